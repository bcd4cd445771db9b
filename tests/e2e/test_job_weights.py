"""A rendered job's life on this machine: real weights downloaded from a hub, a SIGTERM, a resume.

In a pod the container runs the rendered command with the rendered environment, the training
operator adds torchrun's ``PET_*`` variables, and volumes appear at their mount paths. Here the
same command runs as a process: ``MODEL_MOUNT`` and ``CHECKPOINT_MOUNT`` are folders of this test
(standing in for ``MODEL_PVC`` and ``CHECKPOINT_PVC``), ``HF_ENDPOINT`` points the real
``huggingface_hub`` client at a local stand-in of the hub (``tests/support/hub_standin.py``: no hub
is reachable here), the Secret's token is in ``HF_TOKEN``, and the kubelet's stop is a SIGTERM to
the container's first process.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from observe.k8s.job_settings import settings_from_mapping
from observe.k8s.kinds.pytorchjob import render
from observe.ports import free_port
from tests.e2e.test_job_rendezvous import operator_env
from tests.support.hub_standin import HubStandIn
from tests.support.trainer_runs import events, read_log, sigterm_at_step
from trainer.runspec.checkpoint_files import TrainerState, newest_complete

REPO_ID = "acme/tiny-llama"
TOKEN = "hf_standin_token_0123456789"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    """A save_pretrained folder as a hub repo holds it: safetensors shards, config, a real tokenizer,
    and a pytorch_model.bin copy of the weights that a download must leave alone."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("hub-repo")
    torch.manual_seed(3)
    config = LlamaConfig(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(  # type: ignore[arg-type] # transformers' stub
        out, max_shard_size="60KB"
    )
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator(
        [(out / "config.json").read_text()] * 4,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<unk>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>").save_pretrained(out)
    (out / "pytorch_model.bin").write_bytes(b"\0" * 4096)  # the same weights again, in a format we never read
    return out


@pytest.fixture
def hub(tiny_llama: Path):
    standin = HubStandIn()
    standin.add_dir(REPO_ID, tiny_llama, gated_token=TOKEN)
    yield standin
    standin.close()


def pod_env(job: dict, base: dict[str, str], hub: HubStandIn, home: Path, token: str | None = TOKEN) -> dict[str, str]:
    """The container's environment as the kubelet and the operator make it, pointed at the stand-ins."""
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    env = {**base, "NODE_NAME": "node-a", "HF_ENDPOINT": hub.url, "HF_HOME": str(home)}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
    if token is not None and any(v["name"] == "HF_TOKEN" for v in container["env"]):
        env["HF_TOKEN"] = token  # what secretKeyRef gives
    env.update(operator_env(job))
    env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{free_port()}"  # <job>-worker-0:23456 in the cluster
    return env


def command(job: dict) -> list[str]:
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    return container["command"]


def settings(tmp_path: Path, corpus: Path, metrics_port: int, **extra: object) -> dict:
    return {
        "IMAGE_URI": "fsdp-observe:test",
        "JOB_NAME": "llama-ft",
        "NUM_NODES": 1,
        "GPU_PER_NODE": 0,
        "NPROC_PER_NODE": 2,
        "RDZV_BACKEND": "c10d",
        "MAX_RESTARTS": 0,
        "METRICS_PORT": metrics_port,
        "MODEL": REPO_ID,
        "HF_TOKEN_SECRET": "hf-token",
        "MODEL_PVC": "weights",
        "MODEL_MOUNT": str(tmp_path / "models"),
        "CHECKPOINT_PVC": "ckpt",
        "CHECKPOINT_MOUNT": str(tmp_path / "checkpoints"),
        "CHECKPOINT_EVERY": 100,
        "DATA": str(corpus),
        "TRAINER_ARGS": f"--steps 400 --seq-len 64 --batch-size 2 --log-every 1 --metrics-address 127.0.0.1 "
        f"--metrics-linger 0 --log-json {tmp_path / 'run.jsonl'}",
        **extra,
    }


def test_a_rendered_job_downloads_real_weights_stops_with_143_and_resumes(
    tmp_path: Path, corpus: Path, hub: HubStandIn, port_block, subprocess_env
) -> None:
    """A hub MODEL becomes a download before torchrun; the kubelet's SIGTERM ends the
    container with 143 (what restartPolicy ExitCode retries) and the agreed step saved on the shared
    volume; the restarted pod skips the download and resumes from that checkpoint."""
    job = render(settings_from_mapping(settings(tmp_path, corpus, port_block(2))))
    assert command(job)[0] == "fsdp-observe-fetch-model"
    log = tmp_path / "run.jsonl"
    home = tmp_path / "hf-home"

    status, out = sigterm_at_step(command(job), pod_env(job, subprocess_env, hub, home), log, 5)
    assert status == 143, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    weights = tmp_path / "models" / "acme--tiny-llama"
    fetched = hub.fetched()
    assert "pytorch_model.bin" not in fetched and "config.json" in fetched and "tokenizer.json" in fetched
    assert sorted(f for f in fetched if f.endswith(".safetensors")) == sorted(
        p.name for p in weights.glob("*.safetensors")
    )
    records = read_log(log)
    (start,) = events(records, "start")
    assert start["model"] == "acme--tiny-llama" and start["steps"] == 400
    (stop,) = events(records, "stop")
    saved = newest_complete(tmp_path / "checkpoints" / "llama-ft")
    assert saved is not None and TrainerState.read(saved).step == stop["step"] and stop["signal"] == "SIGTERM"
    assert events(records, "end")[-1]["exit_status"] == 143

    downloads = len(hub.fetched())
    second = subprocess.run(
        command(job),
        env=pod_env(job, subprocess_env, hub, home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert second.returncode == 0, second.stdout[-4000:]
    assert len(hub.fetched()) == downloads  # the files on the volume were complete: nothing fetched again
    records = read_log(log)
    (resume,) = events(records, "resume")
    assert resume["step"] == stop["step"] and f"resumed from {saved}" in second.stdout
    assert events(records, "end")[-1]["exit_status"] == 0 and events(records, "end")[-1]["step"] == 400


@pytest.mark.parametrize(
    "case, token, needle",
    [
        ("gated without a token", None, "error: MODEL: acme/tiny-llama is gated and no token (HF_TOKEN is not set"),
        (
            "a wrong token",
            "hf_wrong",
            "error: MODEL: acme/tiny-llama is gated and the job's HF_TOKEN_SECRET does not give",
        ),
        ("an unknown repo", TOKEN, "error: MODEL: acme/no-such-model is not on the hub"),
        ("an unknown revision", TOKEN, "error: MODEL_REVISION: acme/tiny-llama has no revision 'v9'"),
    ],
)
def test_a_download_that_settings_can_fix_is_one_line_and_exit_2(
    case: str, token: str | None, needle: str, tmp_path: Path, corpus: Path, hub: HubStandIn, subprocess_env
) -> None:
    """Exit 2 is permanent under restartPolicy ExitCode: the job fails with this line instead of restarting."""
    extra = (
        {"MODEL": "acme/no-such-model"}
        if "unknown repo" in case
        else {"MODEL_REVISION": "v9"}
        if "revision" in case
        else {}
    )
    job = render(settings_from_mapping(settings(tmp_path, corpus, free_port(), **extra)))
    proc = subprocess.run(
        command(job),
        env=pod_env(job, subprocess_env, hub, tmp_path / "home", token),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(needle) and "Traceback" not in proc.stderr, proc.stderr
    assert not list((tmp_path / "models").glob("*/*.safetensors"))  # nothing downloaded, no rank started


def test_a_repo_without_safetensors_is_refused_before_any_rank(
    tmp_path: Path, corpus: Path, hub: HubStandIn, tiny_llama: Path, subprocess_env
) -> None:
    old = tmp_path / "old-repo"
    old.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "pytorch_model.bin"):
        (old / name).write_bytes((tiny_llama / name).read_bytes())
    hub.add_dir("acme/bin-only", old)
    job = render(
        settings_from_mapping(settings(tmp_path, corpus, free_port(), MODEL="acme/bin-only", HF_TOKEN_SECRET=""))
    )
    proc = subprocess.run(
        command(job),
        env=pod_env(job, subprocess_env, hub, tmp_path / "home", None),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "error: MODEL: acme/bin-only: no .safetensors files in" in proc.stderr and "Traceback" not in proc.stderr


def test_an_unreachable_hub_names_the_command_that_fills_a_volume(tmp_path: Path, corpus: Path, subprocess_env) -> None:
    job = render(settings_from_mapping(settings(tmp_path, corpus, free_port(), HF_TOKEN_SECRET="")))
    closed = HubStandIn()
    closed.close()  # nothing listens there any more
    env = pod_env(job, subprocess_env, closed, tmp_path / "home", None)
    started = time.monotonic()
    proc = subprocess.run(command(job), env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stderr
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert (
        error.startswith("error: MODEL: cannot download acme/tiny-llama into")
        and "hf download acme/tiny-llama" in error
    )
    assert "MODEL_PVC" in error and time.monotonic() - started < 170
    assert json.dumps(error)  # one line
