"""``fsdp-observe job render`` writes exactly the checked-in manifests under ``tests/k8s/rendered/``.

Each case (PyTorchJobs and TrainJobs) is a settings file of ``examples/`` with a fixed ``--run-id`` and, for the storage
variants, a few ``--set`` overrides; the expected text is the whole of what ``job render`` prints
(claims, the job, its NetworkPolicy), byte for byte. A change to the renderer that changes a
rendered job fails here and shows the difference; rewrite the file only when the change is meant.
"""

from __future__ import annotations

import difflib

import pytest

from observe.cli import main as cli_main
from tests.support.kube_checks import REPO

RENDERED = REPO / "tests" / "k8s" / "rendered"
EXAMPLES = REPO / "examples"

#: expected file -> (settings file, --set overrides)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "llama2-7b.yaml": ("llama2-7b.env", ()),
    "own-training.yaml": ("own-training.env", ()),
    "llama2-7b-hub-pvc-checkpoint-claim.yaml": (
        "llama2-7b.env",
        (
            "MODEL=meta-llama/Llama-2-7b-hf",
            "MODEL_PVC=llama-weights",
            "CHECKPOINT_STORAGE_CLASS=efs-sc",
            "CHECKPOINT_SIZE=500Gi",
        ),
    ),
    "llama2-7b-hub-emptydir-checkpoint-pvc.yaml": (
        "llama2-7b.env",
        ("MODEL=meta-llama/Llama-2-7b-hf", "MODEL_VOLUME_SIZE=100Gi", "CHECKPOINT_PVC=ckpt", "CHECKPOINT_EVERY=100"),
    ),
    "llama2-7b-host-path-cpu-c10d.yaml": (
        "llama2-7b.env",
        (
            "MODEL=/models/llama-2-7b",
            "MODEL_HOST_PATH=/mnt/fsx/llama-2-7b",
            "GPU_PER_NODE=0",
            "EFA_PER_NODE=0",
            "NPROC_PER_NODE=2",
            "RDZV_BACKEND=c10d",
            "MIN_NODES=1",
            "MAX_NODES=4",
            "SHM_SIZE=16Gi",
        ),
    ),
    "own-training-checkpoint-pvc.yaml": ("own-training.env", ("CHECKPOINT_PVC=ckpt",)),
    "llama2-7b-trainjob.yaml": ("llama2-7b-trainjob.env", ()),
    "llama2-7b-trainjob-hub-pvc-checkpoint-claim.yaml": (
        "llama2-7b-trainjob.env",
        (
            "MODEL=meta-llama/Llama-2-7b-hf",
            "MODEL_PVC=llama-weights",
            "CHECKPOINT_STORAGE_CLASS=efs-sc",
            "CHECKPOINT_SIZE=500Gi",
        ),
    ),
    "own-training-trainjob.yaml": ("own-training.env", ("JOB_KIND=TrainJob", "CHECKPOINT_PVC=ckpt")),
}


def rendered(settings: str, overrides: tuple[str, ...], capsys) -> str:
    sets = [arg for item in overrides for arg in ("--set", item)]
    assert cli_main(["job", "render", "--config", str(EXAMPLES / settings), "--run-id", "fixed-run-1", *sets]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("expected", sorted(CASES))
def test_render_writes_the_checked_in_manifest(expected: str, capsys) -> None:
    settings, overrides = CASES[expected]
    text = rendered(settings, overrides, capsys)
    want = (RENDERED / expected).read_text()
    assert text == want, "".join(
        difflib.unified_diff(want.splitlines(True), text.splitlines(True), f"rendered/{expected}", "job render")
    )


def test_the_yaml_example_renders_the_same_bytes_as_the_env_example(capsys) -> None:
    assert rendered("llama2-7b.yaml", (), capsys) == (RENDERED / "llama2-7b.yaml").read_text()


def test_every_checked_in_manifest_has_a_case() -> None:
    assert sorted(p.name for p in RENDERED.glob("*.yaml")) == sorted(CASES)
