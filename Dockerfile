# The fsdp-observe image: the trainer (torchrun -m trainer), the node agent (fsdp-observe agent),
# the fsdp-observe CLI, and htop/nvtop for the debug DaemonSets. One image for every pod that
# `daemonsets/` and `fsdp-observe job render` create.
#
#   docker build -t <registry>/fsdp-observe:0.1.0 .
#   docker push <registry>/fsdp-observe:0.1.0
#
# Not built in this project's CI (no container engine there): keep it plain. The default base is
# Debian with PyPI's CUDA build of torch; NCCL then talks TCP between nodes. For EFA, build on an
# image with the EFA installer and aws-ofi-nccl (e.g. the AWS walkthrough's nccl-tests image, or
# an AWS Deep Learning Container): --build-arg BASE_IMAGE=... (apt-based bases only).
ARG BASE_IMAGE=python:3.12-slim-bookworm
FROM ${BASE_IMAGE}

# htop and nvtop for the debug DaemonSets; nvtop is in Debian's contrib section.
RUN if [ -f /etc/apt/sources.list.d/debian.sources ]; then \
        sed -i 's/^Components: main$/Components: main contrib/' /etc/apt/sources.list.d/debian.sources; \
    fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends htop nvtop \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/fsdp-observe
COPY pyproject.toml setup.py README.md ./
COPY observe ./observe
COPY trainer ./trainer
# torch from PyPI (the CUDA build on Linux x86_64), then the project with the etcd rendezvous extra.
RUN pip install --no-cache-dir torch \
 && pip install --no-cache-dir '.[etcd]'

ENV PYTHONUNBUFFERED=1 \
    HF_HOME=/tmp/huggingface
# Trainer pods run as this user; the agent DaemonSet runs as uid 0 (see daemonsets/agent-daemonset.yaml).
RUN useradd --uid 1000 --create-home --shell /usr/sbin/nologin fsdp
USER 1000:1000
CMD ["fsdp-observe", "--help"]
