# Two images, one per role (targets of this file):
#
#   agent    the node agent DaemonSet (fsdp-observe agent): the [agent] extra only, no torch,
#            transformers or CUDA libraries (NVML comes from the node's driver at run time).
#   trainer  the PyTorchJob pods (torchrun --no-python fsdp-observe-trainer), torch's CUDA build,
#            the etcd rendezvous backends, and htop/nvtop for the debug DaemonSets. The default
#            target, so a plain `docker build .` builds it.
#
#   docker build --target agent -t <registry>/fsdp-observe-agent:0.1.0 .
#   docker build -t <registry>/fsdp-observe:0.1.0 .
#
# Not built in this project's CI (no container engine there): keep it plain. The trainer's default
# base is Debian with PyPI's CUDA build of torch; NCCL then talks TCP between nodes. For EFA,
# build on an image with the EFA installer and aws-ofi-nccl (e.g. the AWS walkthrough's
# nccl-tests image, or an AWS Deep Learning Container): --build-arg BASE_IMAGE=... (apt-based
# bases only).
ARG BASE_IMAGE=python:3.12-slim-bookworm

# --- agent --------------------------------------------------------------------------------
FROM python:3.12-slim-bookworm AS agent
WORKDIR /opt/fsdp-observe
COPY pyproject.toml README.md ./
COPY observe ./observe
COPY trainer ./trainer
# The base install (CLI) plus nvidia-ml-py; docs/agent.md gives the measured size.
RUN pip install --no-cache-dir '.[agent]'
ENV PYTHONUNBUFFERED=1
# The DaemonSet runs it as uid 0 with the privileges it explains (daemonsets/agent-daemonset.yaml).
CMD ["fsdp-observe", "agent"]

# --- trainer (default) --------------------------------------------------------------------
FROM ${BASE_IMAGE} AS trainer

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
# torch from PyPI (the CUDA build on Linux x86_64), then the trainer with the etcd rendezvous
# backends (torchrun's etcd and etcd-v2).
RUN pip install --no-cache-dir torch \
 && pip install --no-cache-dir '.[trainer,etcd]'

ENV PYTHONUNBUFFERED=1 \
    HF_HOME=/tmp/huggingface
# Trainer pods run as this user.
RUN useradd --uid 1000 --create-home --shell /usr/sbin/nologin fsdp
USER 1000:1000
CMD ["fsdp-observe-trainer", "--help"]
