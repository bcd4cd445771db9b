"""Step time and peak memory per rank for every sharding strategy x activation-checkpointing setting.

Each configuration is one real run of the trainer under torchrun; its JSON log gives the
median step time (all steps but the first), tokens/s per device, MFU (CUDA only) and, per rank,
the peak memory: process RSS on CPU (the kernel's ``VmHWM``), the CUDA allocator's peak on GPUs.

    python -m benchmarks.strategies            # CPU: 2 ranks, preset "small", 8 configurations
    python -m benchmarks.strategies --quick    # smoke test: 2 configurations, preset "tiny"
    python -m benchmarks.strategies --cuda     # every GPU: a ~1.2 B Llama 3.2 1B shape in bf16,
                                               # tokens/s per GPU and MFU (about 5 minutes on 8 GPUs)
    python -m benchmarks.strategies --cuda --dry-run   # print and validate the commands only

For comparison: torchtitan reports about 33-39 % MFU for Llama 3 8B with FSDP on H100s (bf16,
torch.compile). This trainer runs Hugging Face's eager Llama without compile, so expect less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.runspec.config import DataConfig, MetricsConfig, ModelConfig, OptimConfig, ParallelConfig, TrainConfig
from trainer.runspec.launch import prepare, torchrun_command, torchrun_env

#: Where the JSON goes unless --out says otherwise (never over the committed benchmarks/results/).
SCRATCH = Path(tempfile.gettempdir()) / "fsdp-observe-benchmarks"

STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
CHECKPOINTING = ("none", "full")


@dataclass(frozen=True)
class Setup:
    """What every configuration of one benchmark mode shares."""

    mode: str
    ranks: int
    preset: str
    mixed_precision: str
    seq_len: int
    batch_size: int
    steps: int
    log_every: int
    grid: tuple[tuple[str, str], ...]


def setups(ranks_cuda: int) -> dict[str, Setup]:
    full = tuple((s, a) for s in STRATEGIES for a in CHECKPOINTING)
    return {
        "cpu": Setup("cpu", 2, "small", "bf16", 256, 4, 8, 4, full),
        "quick": Setup("quick", 2, "tiny", "bf16", 64, 2, 4, 2, (("FULL_SHARD", "none"), ("FULL_SHARD", "full"))),
        "cuda": Setup("cuda", ranks_cuda, "llama3.2-1b", "bf16", 2048, 4, 30, 10, full),
    }


def trainer_config(setup: Setup, strategy: str, checkpointing: str, log_json: Path) -> TrainConfig:
    """The trainer's settings for one configuration. HYBRID_SHARD gets two replicas when there are
    4 or more ranks (on one node its default, 1 x ranks, would be FULL_SHARD's layout)."""
    hybrid = 2 if strategy == "HYBRID_SHARD" and setup.ranks >= 4 and setup.ranks % 2 == 0 else None
    return TrainConfig(
        model=ModelConfig(preset=setup.preset),
        data=DataConfig(seq_len=setup.seq_len, batch_size=setup.batch_size),
        optim=OptimConfig(warmup_steps=2),
        parallel=ParallelConfig(
            sharding_strategy=strategy,
            replicate_degree=hybrid,
            activation_checkpointing=checkpointing,
            mixed_precision=setup.mixed_precision,
        ),
        metrics=MetricsConfig(enabled=False, log_every=setup.log_every, log_json=str(log_json)),
        steps=setup.steps,
    )


def run_one(setup: Setup, strategy: str, checkpointing: str, workdir: Path) -> dict:
    """Run one configuration; return its row (figures from the trainer's JSON log)."""
    log_json = workdir / f"{strategy}-{checkpointing}.jsonl"
    cfg = trainer_config(setup, strategy, checkpointing, log_json)
    started = time.monotonic()
    proc = subprocess.run(
        torchrun_command(cfg, setup.ranks),
        env=torchrun_env(setup.ranks),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"error: {strategy}/{checkpointing} failed:\n{proc.stdout[-3000:]}")
    records = [json.loads(line) for line in log_json.read_text().splitlines()]
    windows = [r for r in records if r["event"] == "window"]
    end = next(r for r in records if r["event"] == "end")
    start = next(r for r in records if r["event"] == "start")
    last = windows[-1]
    step_seconds = [w["step_seconds"] for w in windows if w["step"] > 1]
    devices = [b for b in end["device_peak_bytes"] if b is not None]
    return {
        "strategy": strategy,
        "activation_checkpointing": checkpointing,
        "mesh": start["mesh"],
        "step_seconds_median": statistics.median(step_seconds) if step_seconds else last["step_seconds"],
        "tokens_per_second_per_device": last["global_tokens_per_second"] / setup.ranks,
        "mfu": last["mfu"],
        "peak_rss_bytes_per_rank": [b for b in end["peak_rss_bytes"] if b is not None] or None,
        "device_peak_bytes_per_rank": devices or None,
        "final_loss": last["loss"],
        "wall_seconds": time.monotonic() - started,
    }


def print_table(setup: Setup, rows: list[dict]) -> None:
    on_cuda = setup.mode == "cuda"
    memory = "device peak GiB (max rank)" if on_cuda else "peak RSS MiB (max rank)"
    header = [
        "strategy",
        "mesh",
        "act. ckpt",
        "step s",
        "tokens/s/device",
        "MFU",
        memory,
        "vs FULL_SHARD, no act. ckpt",
    ]

    def peak_of(r: dict) -> float:
        if on_cuda:
            return max(r["device_peak_bytes_per_rank"]) / 2**30
        return max(r["peak_rss_bytes_per_rank"] or [float("nan")]) / 2**20

    ref = rows[0]  # the grid starts with FULL_SHARD, none
    lines = []
    for r in rows:
        peak = peak_of(r)
        ratio = f"step x{r['step_seconds_median'] / ref['step_seconds_median']:.2f}, memory x{peak / peak_of(ref):.2f}"
        lines.append(
            [
                r["strategy"],
                "x".join(map(str, r["mesh"])),
                r["activation_checkpointing"],
                f"{r['step_seconds_median']:.3f}",
                f"{r['tokens_per_second_per_device']:,.0f}",
                "n/a" if r["mfu"] is None else f"{r['mfu']:.1%}",
                f"{peak:,.2f}" if on_cuda else f"{peak:,.0f}",
                ratio,
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines, strict=False)]
    for line in [header, ["-" * w for w in widths], *lines]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=False)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smoke test: two tiny configurations")
    mode.add_argument("--cuda", action="store_true", help="the GPU benchmark (Llama 3.2 1B shape, bf16)")
    ap.add_argument("--nproc-per-node", type=int, help="ranks (default: 2 on CPU, every visible GPU with --cuda)")
    ap.add_argument("--dry-run", action="store_true", help="validate and print the commands, run nothing")
    ap.add_argument(
        "--out",
        help=f"JSON output (default {SCRATCH}/strategies[_quick|_cuda].json; the committed "
        "figures are benchmarks/results/strategies*.json)",
    )
    ns = ap.parse_args()
    name = "cuda" if ns.cuda else "quick" if ns.quick else "cpu"
    gpus = ns.nproc_per_node or (_gpu_count() if ns.cuda and not ns.dry_run else 8)
    setup = setups(gpus)[name]
    if ns.nproc_per_node:
        setup = Setup(**{**asdict(setup), "ranks": ns.nproc_per_node, "grid": setup.grid})
    if name == "cuda":
        os.environ.setdefault("OMP_NUM_THREADS", "4")
    out = Path(ns.out or SCRATCH / f"strategies{'' if name == 'cpu' else '_' + name}.json")
    print(
        f"strategies benchmark ({name}): {setup.ranks} ranks, preset {setup.preset}, {setup.mixed_precision}, "
        f"seq {setup.seq_len} x batch {setup.batch_size} per rank, {setup.steps} steps per configuration"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for strategy, checkpointing in setup.grid:  # every command is validated before the first run
            prepare(trainer_config(setup, strategy, checkpointing, Path(tmp) / "x.jsonl"), setup.ranks)
        if ns.dry_run:
            for strategy, checkpointing in setup.grid:
                cfg = trainer_config(setup, strategy, checkpointing, Path("LOG.jsonl"))
                print(" ".join(torchrun_command(cfg, setup.ranks)))
            return 0
        rows = []
        for strategy, checkpointing in setup.grid:
            rows.append(run_one(setup, strategy, checkpointing, Path(tmp)))
            print(
                f"  {strategy:<13} {checkpointing:<4}  {rows[-1]['step_seconds_median']:.3f} s/step  "
                f"({rows[-1]['wall_seconds']:.0f} s)",
                flush=True,
            )
    print()
    print_table(setup, rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"setup": asdict(setup), "rows": rows}, indent=2) + "\n")
    print(f"\nwritten: {out}")
    return 0


def _gpu_count() -> int:
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise SystemExit("error: --cuda: no CUDA device is visible; run without --cuda for the CPU benchmark")
    return count


if __name__ == "__main__":
    sys.exit(main())
