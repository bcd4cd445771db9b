"""Typed, validated training settings and the command line that fills them.

Torch-free: ``fsdp-observe train`` and ``demo`` validate a configuration before any rank starts,
so a user mistake is one line, not a stack trace from every rank.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from observe.catalog import TRAINER_PORT_BASE
from trainer.corpus import resolve_data_files
from trainer.errors import ConfigError
from trainer.presets import PRESETS

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
MIXED_PRECISION = ("fp32", "bf16", "pure-bf16")


@dataclass
class ModelConfig:
    """Which model to train: a named shape with random weights, or a checkpoint.

    Attributes:
        preset: a key of ``trainer.presets.PRESETS``; ignored when ``path`` is set.
        path: a local ``from_pretrained`` directory (or a hub id where the network allows).
        tokenizer: a local Hugging Face tokenizer directory; ``None`` uses the byte tokenizer.
    """

    preset: str = "tiny"
    path: str | None = None
    tokenizer: str | None = None

    @property
    def name(self) -> str:
        """A short name for labels and logs (the preset, or the checkpoint's directory name)."""
        return Path(self.path).name if self.path else self.preset

    def max_positions(self) -> int | None:
        """The model's ``max_position_embeddings``, read without building it (``None`` if unknown)."""
        if self.path is None:
            return PRESETS[self.preset]["max_position_embeddings"]
        config_file = Path(self.path) / "config.json"
        if config_file.is_file():
            return json.loads(config_file.read_text()).get("max_position_embeddings")
        return None


@dataclass
class DataConfig:
    """Training text and how it is cut.

    Attributes:
        paths: files, directories or globs; empty means the Python standard library's sources.
        seq_len: tokens per sequence (each sequence carries ``seq_len`` labelled tokens).
        batch_size: sequences per rank per step.
    """

    paths: list[str] = field(default_factory=list)
    seq_len: int = 256
    batch_size: int = 8


@dataclass
class OptimConfig:
    """AdamW with linear warm-up, then cosine decay to ``lr * min_lr_ratio``; norm clipping."""

    lr: float = 1e-3
    warmup_steps: int = 10
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0


@dataclass
class ParallelConfig:
    """How the model is spread over ranks.

    Attributes:
        sharding_strategy: one of ``SHARDING_STRATEGIES`` (FSDP1 names, mapped onto FSDP2).
        mixed_precision: ``fp32``; ``bf16`` (bf16 params, fp32 gradient reduction);
            ``pure-bf16`` (bf16 params and reduction).
        device: ``auto`` (CUDA when present), ``cpu`` or ``cuda``.
        backend: ``auto`` (NCCL on CUDA, gloo on CPU), or a torch.distributed backend name.
    """

    sharding_strategy: str = "FULL_SHARD"
    mixed_precision: str = "bf16"
    device: str = "auto"
    backend: str = "auto"


@dataclass
class MetricsConfig:
    """The Prometheus exporter of each rank.

    Attributes:
        enabled: ``False`` turns the exporter off entirely (the A/B benchmark's baseline).
        port_base: rank ``r`` on a node serves on ``port_base + local_rank``.
        address: bind address.
        linger_seconds: keep serving this long after the last step, so a final scrape sees it.
        log_every: steps per log window (loss, tokens/s, MFU are read on log steps only).
        log_json: rank 0 appends one JSON object per log window, and a summary, to this file.
        run_id: the ``run_id`` label; default: torchrun's ``--rdzv-id`` when set, else a new id.
    """

    enabled: bool = True
    port_base: int = TRAINER_PORT_BASE
    address: str = "0.0.0.0"
    linger_seconds: float = 0.0
    log_every: int = 10
    log_json: str | None = None
    run_id: str | None = None


@dataclass
class TrainConfig:
    """Everything one training run needs; ``validate()`` before use."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    steps: int = 100
    seed: int = 0

    def validate(self) -> list[Path]:
        """Check every setting; return the resolved data files.

        Raises:
            ConfigError: naming the first flag at fault and how to fix it.
        """
        m, d, o, p, x = self.model, self.data, self.optim, self.parallel, self.metrics
        if m.path is None and m.preset not in PRESETS:
            raise ConfigError("--preset", f"unknown preset {m.preset!r}",
                              f"choose one of {', '.join(PRESETS)} or pass --model PATH")
        if m.path is not None and not Path(m.path).exists() and m.path.count("/") != 1:
            raise ConfigError("--model", f"{m.path!r} is neither a directory nor a hub id",
                              "pass a local from_pretrained directory")
        if m.tokenizer is not None and not Path(m.tokenizer).exists():
            raise ConfigError("--tokenizer", f"{m.tokenizer!r} does not exist",
                              "pass a local Hugging Face tokenizer directory, or omit it for bytes")
        _positive("--steps", self.steps)
        _positive("--batch-size", d.batch_size)
        _positive("--seq-len", d.seq_len)
        _positive("--log-every", x.log_every)
        if not o.lr > 0:
            raise ConfigError("--lr", f"must be positive, got {o.lr}", "pass e.g. --lr 3e-4")
        if o.warmup_steps < 0:
            raise ConfigError("--warmup-steps", f"must be >= 0, got {o.warmup_steps}",
                              "pass 0 for no warm-up")
        if not 0 <= o.min_lr_ratio <= 1:
            raise ConfigError("--min-lr-ratio", f"must be in [0, 1], got {o.min_lr_ratio}",
                              "pass e.g. 0.1")
        max_pos = m.max_positions()
        if max_pos is not None and d.seq_len > max_pos:
            raise ConfigError("--seq-len", f"{d.seq_len} exceeds the model's {max_pos} positions",
                              f"pass --seq-len {max_pos} or less")
        if p.sharding_strategy not in SHARDING_STRATEGIES:
            raise ConfigError("--sharding-strategy", f"unknown strategy {p.sharding_strategy!r}",
                              f"choose one of {', '.join(SHARDING_STRATEGIES)}")
        if p.mixed_precision not in MIXED_PRECISION:
            raise ConfigError("--mixed-precision", f"unknown policy {p.mixed_precision!r}",
                              f"choose one of {', '.join(MIXED_PRECISION)}")
        if p.device not in ("auto", "cpu", "cuda"):
            raise ConfigError("--device", f"unknown device {p.device!r}", "choose auto, cpu or cuda")
        if not 0 < x.port_base < 65536:
            raise ConfigError("--metrics-port", f"{x.port_base} is not a TCP port",
                              "pass a port between 1024 and 65535")
        return resolve_data_files(d.paths)


def _positive(flag: str, value: int) -> None:
    if value <= 0:
        raise ConfigError(flag, f"must be positive, got {value}", f"pass {flag} 1 or more")


def build_parser(prog: str = "python -m trainer") -> argparse.ArgumentParser:
    """The trainer's command line (also used by ``fsdp-observe train``)."""
    ap = argparse.ArgumentParser(prog=prog, description="Instrumented FSDP fine-tune of a Llama model.")
    g = ap.add_argument_group("model")
    g.add_argument("--preset", default="tiny", help=f"model shape with random weights: {', '.join(PRESETS)}")
    g.add_argument("--model", dest="model_path", metavar="PATH",
                   help="local from_pretrained checkpoint (overrides --preset)")
    g.add_argument("--tokenizer", metavar="PATH", help="local Hugging Face tokenizer (default: bytes)")
    g = ap.add_argument_group("data")
    g.add_argument("--data", nargs="+", default=[], metavar="FILE_OR_GLOB",
                   help=".txt/.md/.py/.jsonl files or globs (default: the Python standard library's sources)")
    g.add_argument("--seq-len", type=int, default=256)
    g.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    g = ap.add_argument_group("optimisation")
    g.add_argument("--steps", type=int, default=100)
    g.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    g.add_argument("--warmup-steps", type=int, default=10)
    g.add_argument("--min-lr-ratio", type=float, default=0.1)
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--grad-clip", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g = ap.add_argument_group("parallelism")
    g.add_argument("--sharding-strategy", default="FULL_SHARD", help=", ".join(SHARDING_STRATEGIES))
    g.add_argument("--mixed-precision", default="bf16", help=", ".join(MIXED_PRECISION))
    g.add_argument("--device", default="auto", help="auto, cpu or cuda")
    g.add_argument("--backend", default="auto", help="auto (nccl on CUDA, gloo on CPU), gloo, nccl")
    g = ap.add_argument_group("metrics and logs")
    g.add_argument("--metrics", choices=("on", "off"), default="on")
    g.add_argument("--metrics-port", type=int, default=TRAINER_PORT_BASE,
                   help="base port; each rank serves on base + LOCAL_RANK")
    g.add_argument("--metrics-address", default="0.0.0.0")
    g.add_argument("--metrics-linger", type=float, default=0.0, metavar="SECONDS",
                   help="keep serving /metrics this long after the run ends")
    g.add_argument("--log-every", type=int, default=10)
    g.add_argument("--log-json", metavar="FILE", help="rank 0 appends one JSON object per log window")
    g.add_argument("--run-id", default=os.environ.get("FSDP_OBSERVE_RUN_ID"),
                   help="run_id label (default: torchrun's --rdzv-id, else generated)")
    return ap


def config_from_args(ns: argparse.Namespace) -> TrainConfig:
    """Build a ``TrainConfig`` from parsed arguments (not yet validated)."""
    return TrainConfig(
        model=ModelConfig(preset=ns.preset, path=ns.model_path, tokenizer=ns.tokenizer),
        data=DataConfig(paths=list(ns.data), seq_len=ns.seq_len, batch_size=ns.batch_size),
        optim=OptimConfig(lr=ns.lr, warmup_steps=ns.warmup_steps, min_lr_ratio=ns.min_lr_ratio,
                          weight_decay=ns.weight_decay, grad_clip=ns.grad_clip),
        parallel=ParallelConfig(sharding_strategy=ns.sharding_strategy.upper(),
                                mixed_precision=ns.mixed_precision, device=ns.device,
                                backend=ns.backend),
        metrics=MetricsConfig(enabled=ns.metrics == "on", port_base=ns.metrics_port,
                              address=ns.metrics_address, linger_seconds=ns.metrics_linger,
                              log_every=ns.log_every, log_json=ns.log_json, run_id=ns.run_id),
        steps=ns.steps,
        seed=ns.seed,
    )
