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
from observe.errors import UserError
from trainer.runspec.checkpoint_files import (
    TrainerState,
    check_compatible,
    data_digest,
    layout_fingerprint,
    newest_complete,
    resolve_resume,
)
from trainer.runspec.corpus import resolve_data_files
from trainer.runspec.presets import PRESETS

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
MIXED_PRECISION = ("fp32", "bf16", "pure-bf16")
#: ``--resume`` keywords; any other value is the path of one checkpoint directory.
RESUME_MODES = ("auto", "latest", "never")


@dataclass
class ModelConfig:
    """Which model to train: a named shape with random weights, or a checkpoint.

    Attributes:
        preset: a key of ``trainer.runspec.presets.PRESETS``; ignored when ``path`` is set.
        path: a local ``save_pretrained`` directory (``config.json`` and ``*.safetensors``).
        tokenizer: a local Hugging Face tokenizer directory; ``None`` uses the byte tokenizer.
    """

    preset: str = "tiny"
    path: str | None = None
    tokenizer: str | None = None

    @property
    def name(self) -> str:
        """A short name for labels and logs (the preset, or the checkpoint's directory name)."""
        return Path(self.path).name if self.path else self.preset

    def shape(self) -> dict:
        """The ``LlamaConfig`` keyword arguments (preset) or ``config.json`` (checkpoint), read
        without building the model; ``{}`` when there is no ``config.json``."""
        if self.path is None:
            return PRESETS[self.preset]
        config_file = Path(self.path) / "config.json"
        return json.loads(config_file.read_text()) if config_file.is_file() else {}

    def max_positions(self) -> int | None:
        """The model's ``max_position_embeddings`` (``None`` if unknown)."""
        return self.shape().get("max_position_embeddings")


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
    #: Micro-batches per optimizer step (each ``--batch-size`` sequences per rank).
    grad_accum_steps: int = 1


@dataclass
class ParallelConfig:
    """How the model is spread over ranks.

    Attributes:
        sharding_strategy: one of ``SHARDING_STRATEGIES`` (FSDP1 names, mapped onto FSDP2).
        mixed_precision: ``fp32``; ``bf16`` (bf16 params, fp32 gradient reduction);
            ``pure-bf16`` (bf16 params and reduction).
        device: ``auto`` (CUDA when present), ``cpu`` or ``cuda``.
        backend: ``auto`` (NCCL on CUDA, gloo on CPU), or a torch.distributed backend name.
        replicate_degree, shard_degree: HYBRID_SHARD's mesh ``(replicate, shard)``; ``None``
            derives them (nodes x ranks per node, or from the one given).
        activation_checkpointing: ``none``, ``full`` or ``every-N`` (decoder layers
            N-1, 2N-1, ... counted from 0, i.e. every N-th layer).
    """

    sharding_strategy: str = "FULL_SHARD"
    mixed_precision: str = "bf16"
    device: str = "auto"
    backend: str = "auto"
    replicate_degree: int | None = None
    shard_degree: int | None = None
    activation_checkpointing: str = "none"

    def checkpoint_every(self) -> int:
        """Every how many decoder layers one is checkpointed: 0 none, 1 full, N for ``every-N``.

        Raises:
            UserError: an unknown value (flag ``--activation-checkpointing``).
        """
        value = self.activation_checkpointing
        if value == "none":
            return 0
        if value == "full":
            return 1
        n = value.removeprefix("every-")
        if value.startswith("every-") and n.isdigit() and int(n) >= 1:
            return int(n)
        raise UserError("--activation-checkpointing", f"unknown setting {value!r}",
                          "choose none, full, or every-N with N >= 1 (every N-th decoder layer)")

    def mesh_shape(self, world_size: int, local_world_size: int) -> tuple[int, ...]:
        """The device mesh of the strategy (torch-free, so the launcher can check it first).

        ``(world,)`` for FULL_SHARD and SHARD_GRAD_OP, ``(world, 1)`` for NO_SHARD, and
        ``(replicate, shard)`` for HYBRID_SHARD: the degrees given, the one missing derived from
        the world size, or by default (nodes, ranks per node).

        Raises:
            UserError: degrees given to another strategy, or degrees that do not multiply to
                the world size (never a silent fallback to another layout).
        """
        r, s = self.replicate_degree, self.shard_degree
        for flag, value in (("--replicate-degree", r), ("--shard-degree", s)):
            if value is not None and self.sharding_strategy != "HYBRID_SHARD":
                raise UserError(flag, f"only HYBRID_SHARD uses a (replicate, shard) mesh, "
                                  f"the strategy is {self.sharding_strategy}",
                                  f"drop {flag} or pass --sharding-strategy HYBRID_SHARD")
            if value is not None and value < 1:
                raise UserError(flag, f"must be positive, got {value}", f"pass {flag} 1 or more")
        if self.sharding_strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
            return (world_size,)
        if self.sharding_strategy == "NO_SHARD":
            return (world_size, 1)
        if r is None and s is None:
            if world_size % local_world_size:
                raise UserError("--sharding-strategy", f"HYBRID_SHARD needs the world size ({world_size}) "
                                  f"to be a multiple of ranks per node ({local_world_size})",
                                  "use the same number of ranks on every node, or pass --shard-degree")
            r, s = world_size // local_world_size, local_world_size
        elif r is None:
            r = world_size // s if world_size % s == 0 else None
        elif s is None:
            s = world_size // r if world_size % r == 0 else None
        if r is None or s is None or r * s != world_size:
            given = " x ".join(f"{f} {v}" for f, v in (("--replicate-degree", self.replicate_degree),
                                                      ("--shard-degree", self.shard_degree)) if v is not None)
            raise UserError("--replicate-degree" if self.replicate_degree is not None else "--shard-degree",
                              f"{given} does not fit the world size {world_size}",
                              "pass degrees whose product is the number of ranks")
        return (r, s)


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
class CheckpointConfig:
    """Sharded checkpoints (``torch.distributed.checkpoint``), resume and SIGTERM handling.

    Attributes:
        dir: where ``step-NNNNNNNN`` checkpoints go; ``None`` saves nothing.
        every: save every N steps (0: only at the end and on SIGTERM).
        keep: complete checkpoints kept (older ones are deleted after a save).
        resume: ``auto`` (newest complete checkpoint in ``dir`` when there is one), ``latest``
            (the same, but required), ``never``, or a checkpoint directory.
        sigterm_grace: seconds from SIGTERM to exit: the ranks agree on a step, save and exit
            with status 143; a save still running at the deadline is abandoned. Keep it below
            torchrun's ``--shutdown-timeout`` and the pod's ``terminationGracePeriodSeconds``
            (both 30 s by default).
    """

    dir: str | None = None
    every: int = 0
    keep: int = 2
    resume: str = "auto"
    sigterm_grace: float = 25.0


@dataclass
class ValidationConfig:
    """Held-out loss and perplexity.

    Attributes:
        every: evaluate every N steps and at the end (0: never; then nothing is held out).
        fraction: share of documents held out of training (chosen by a hash of each document's
            text, so the split does not depend on file order or world size).
        batches: micro-batches per rank per evaluation (the same ones every time).
    """

    every: int = 0
    fraction: float = 0.01
    batches: int = 4


@dataclass
class TrainConfig:
    """Everything one training run needs; ``validate()`` before use."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    steps: int = 100
    seed: int = 0
    verify_weights: bool = False

    def layout(self, files: list[Path], world_size: int | None) -> dict:
        """The settings that fix which tokens each rank sees at each step (resume checks)."""
        return layout_fingerprint({
            "world_size": world_size, "seq_len": self.data.seq_len, "batch_size": self.data.batch_size,
            "grad_accum_steps": self.optim.grad_accum_steps, "seed": self.seed, "model": self.model.name,
            "tokenizer": self.model.tokenizer or "bytes", "data": data_digest(files),
            "val_fraction": self.validation.fraction if self.validation.every else 0.0,
        })

    def validate(self, world_size: int | None = None, local_world_size: int | None = None) -> list[Path]:
        """Check every setting; return the resolved data files.

        Args:
            world_size, local_world_size: the ranks in the run and per node, when known (the
                launcher knows them before torchrun starts; a rank reads them from torchrun).
                The mesh layout and a resume's world size are checked only when given.

        Raises:
            UserError: naming the first flag at fault and how to fix it.
        """
        m, d, o, p, x = self.model, self.data, self.optim, self.parallel, self.metrics
        if m.path is None and m.preset not in PRESETS:
            raise UserError("--preset", f"unknown preset {m.preset!r}",
                              f"choose one of {', '.join(PRESETS)} or pass --model PATH")
        if m.path is not None and not Path(m.path).is_dir():
            raise UserError("--model", f"{m.path!r} is not a local directory (weights are read shard by "
                              "shard from local files)",
                              "download it first, e.g. huggingface-cli download ID --local-dir DIR, and pass DIR")
        if m.tokenizer is not None and not Path(m.tokenizer).exists():
            raise UserError("--tokenizer", f"{m.tokenizer!r} does not exist",
                              "pass a local Hugging Face tokenizer directory, or omit it for bytes")
        if m.path is not None and not (Path(m.path) / "config.json").is_file():
            raise UserError("--model", f"{m.path!r} has no config.json",
                              "pass a directory written by save_pretrained")
        if m.path is not None and not any(Path(m.path).glob("*.safetensors")):
            raise UserError("--model", f"no .safetensors files in {m.path!r} (weights are loaded shard by "
                              "shard from safetensors only)",
                              "save the model with save_pretrained(..., safe_serialization=True)")
        _positive("--steps", self.steps)
        _positive("--batch-size", d.batch_size)
        _positive("--seq-len", d.seq_len)
        _positive("--log-every", x.log_every)
        _positive("--grad-accum-steps", o.grad_accum_steps)
        if not o.lr > 0:
            raise UserError("--lr", f"must be positive, got {o.lr}", "pass e.g. --lr 3e-4")
        if o.warmup_steps < 0:
            raise UserError("--warmup-steps", f"must be >= 0, got {o.warmup_steps}",
                              "pass 0 for no warm-up")
        if not 0 <= o.min_lr_ratio <= 1:
            raise UserError("--min-lr-ratio", f"must be in [0, 1], got {o.min_lr_ratio}",
                              "pass e.g. 0.1")
        max_pos = m.max_positions()
        if max_pos is not None and d.seq_len > max_pos:
            raise UserError("--seq-len", f"{d.seq_len} exceeds the model's {max_pos} positions",
                              f"pass --seq-len {max_pos} or less")
        if p.sharding_strategy not in SHARDING_STRATEGIES:
            raise UserError("--sharding-strategy", f"unknown strategy {p.sharding_strategy!r}",
                              f"choose one of {', '.join(SHARDING_STRATEGIES)}")
        if p.mixed_precision not in MIXED_PRECISION:
            raise UserError("--mixed-precision", f"unknown policy {p.mixed_precision!r}",
                              f"choose one of {', '.join(MIXED_PRECISION)}")
        if p.device not in ("auto", "cpu", "cuda"):
            raise UserError("--device", f"unknown device {p.device!r}", "choose auto, cpu or cuda")
        every = p.checkpoint_every()
        layers = m.shape().get("num_hidden_layers")
        if layers is not None and every > layers:
            raise UserError("--activation-checkpointing", f"every-{every} checkpoints no layer of a "
                              f"{layers}-layer model", f"pass every-N with N <= {layers}, full or none")
        if world_size is not None:
            p.mesh_shape(world_size, local_world_size or world_size)
        if not 0 < x.port_base < 65536:
            raise UserError("--metrics-port", f"{x.port_base} is not a TCP port",
                              "pass a port between 1024 and 65535")
        self._validate_checkpointing()
        self._validate_validation()
        files = resolve_data_files(d.paths)
        self._validate_resume(files, world_size)
        return files

    def _validate_checkpointing(self) -> None:
        k = self.checkpoint
        if k.every < 0:
            raise UserError("--checkpoint-every", f"must be >= 0, got {k.every}", "pass 0 to save only at the end")
        if k.every and k.dir is None:
            raise UserError("--checkpoint-every", "there is nowhere to save", "pass --checkpoint-dir DIR as well")
        _positive("--keep-checkpoints", k.keep)
        if not k.sigterm_grace > 0:
            raise UserError("--sigterm-grace", f"must be positive, got {k.sigterm_grace}",
                              "pass the seconds a save may take after SIGTERM, e.g. 25")
        if k.dir is not None:
            _writable_dir(Path(k.dir))

    def _validate_validation(self) -> None:
        v = self.validation
        if v.every < 0:
            raise UserError("--val-every", f"must be >= 0, got {v.every}", "pass 0 to turn validation off")
        if v.every and not 0 < v.fraction <= 0.5:
            raise UserError("--val-fraction", f"must be in (0, 0.5], got {v.fraction}",
                              "hold out a small share of documents, e.g. 0.01")
        if v.every:
            _positive("--val-batches", v.batches)

    def _validate_resume(self, files: list[Path], world_size: int | None) -> None:
        if self.checkpoint.resume == "never" and self.checkpoint.dir and newest_complete(self.checkpoint.dir):
            raise UserError("--resume", f"never, but {self.checkpoint.dir!r} already holds checkpoints of a run, "
                              "which a restart would resume instead of this one",
                              "pass an empty --checkpoint-dir, or --resume auto to continue that run")
        path = resolve_resume(self.checkpoint.dir, self.checkpoint.resume)
        if path is not None:
            state = TrainerState.read(path)
            check_compatible(path, state.layout, self.layout(files, world_size))


def _beside(resume: str) -> str | None:
    """``--resume PATH`` without ``--checkpoint-dir``: new checkpoints go next to PATH."""
    return None if resume in RESUME_MODES else str(Path(resume).parent)


def _writable_dir(path: Path) -> None:
    """Create ``--checkpoint-dir`` if needed and prove a file can be written in it.

    Raises:
        UserError: it is a file, or cannot be created or written.
    """
    if path.exists() and not path.is_dir():
        raise UserError("--checkpoint-dir", f"{str(path)!r} is a file", "pass a directory (it is created)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UserError("--checkpoint-dir", f"cannot write to {str(path)!r} ({exc.strerror})",
                          "pass a directory you can write, on storage every node shares") from None


def _positive(flag: str, value: int) -> None:
    if value <= 0:
        raise UserError(flag, f"must be positive, got {value}", f"pass {flag} 1 or more")


def build_parser(prog: str = "python -m trainer") -> argparse.ArgumentParser:
    """The trainer's command line (also used by ``fsdp-observe train``)."""
    ap = argparse.ArgumentParser(prog=prog, description="Instrumented FSDP fine-tune of a Llama model.")
    g = ap.add_argument_group("model")
    g.add_argument("--preset", default="tiny", help=f"model shape with random weights: {', '.join(PRESETS)}")
    g.add_argument("--model", dest="model_path", metavar="PATH",
                   help="local save_pretrained directory with safetensors, loaded shard by shard (overrides --preset)")
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
    g.add_argument("--grad-accum-steps", type=int, default=1, metavar="K",
                   help="micro-batches per optimizer step (global batch = K x batch size x ranks)")
    g.add_argument("--seed", type=int, default=0)
    g = ap.add_argument_group("parallelism")
    g.add_argument("--sharding-strategy", default="FULL_SHARD", help=", ".join(SHARDING_STRATEGIES))
    g.add_argument("--mixed-precision", default="bf16", help=", ".join(MIXED_PRECISION))
    g.add_argument("--device", default="auto", help="auto, cpu or cuda")
    g.add_argument("--backend", default="auto", help="auto (nccl on CUDA, gloo on CPU), gloo, nccl")
    g.add_argument("--replicate-degree", type=int, metavar="R",
                   help="HYBRID_SHARD: replica groups (default: nodes)")
    g.add_argument("--shard-degree", type=int, metavar="S",
                   help="HYBRID_SHARD: ranks each replica is sharded over (default: ranks per node)")
    g.add_argument("--activation-checkpointing", default="none", metavar="none|full|every-N",
                   help="recompute activations in backward: no layer, every decoder layer, or every N-th")
    g.add_argument("--verify-weights", action="store_true",
                   help="at the end, gather the full weights on every rank and check all ranks hold the same")
    g = ap.add_argument_group("checkpoints and restarts")
    g.add_argument("--checkpoint-dir", metavar="DIR", help="sharded checkpoints go to DIR/step-NNNNNNNN")
    g.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="save every N steps (default 0: at the end and on SIGTERM only)")
    g.add_argument("--keep-checkpoints", type=int, default=2, metavar="K", help="complete checkpoints kept")
    g.add_argument("--resume", nargs="?", const="latest", default="auto", metavar="auto|latest|never|PATH",
                   help="auto (default): continue from the newest complete checkpoint in --checkpoint-dir if "
                        "any; --resume alone: the same, but one must exist; never; or one checkpoint directory")
    g.add_argument("--sigterm-grace", type=float, default=25.0, metavar="SECONDS",
                   help="on SIGTERM save and exit within this time (keep it below torchrun's --shutdown-timeout)")
    g = ap.add_argument_group("validation")
    g.add_argument("--val-every", type=int, default=0, metavar="N",
                   help="held-out loss and perplexity every N steps and at the end (default 0: off)")
    g.add_argument("--val-fraction", type=float, default=0.01, help="share of documents held out")
    g.add_argument("--val-batches", type=int, default=4, help="micro-batches per rank per evaluation")
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
                          weight_decay=ns.weight_decay, grad_clip=ns.grad_clip,
                          grad_accum_steps=ns.grad_accum_steps),
        parallel=ParallelConfig(sharding_strategy=ns.sharding_strategy.upper(),
                                mixed_precision=ns.mixed_precision, device=ns.device,
                                backend=ns.backend, replicate_degree=ns.replicate_degree,
                                shard_degree=ns.shard_degree,
                                activation_checkpointing=ns.activation_checkpointing),
        checkpoint=CheckpointConfig(dir=ns.checkpoint_dir or _beside(ns.resume), every=ns.checkpoint_every,
                                    keep=ns.keep_checkpoints, resume=ns.resume, sigterm_grace=ns.sigterm_grace),
        validation=ValidationConfig(every=ns.val_every, fraction=ns.val_fraction, batches=ns.val_batches),
        verify_weights=ns.verify_weights,
        metrics=MetricsConfig(enabled=ns.metrics == "on", port_base=ns.metrics_port,
                              address=ns.metrics_address, linger_seconds=ns.metrics_linger,
                              log_every=ns.log_every, log_json=ns.log_json, run_id=ns.run_id),
        steps=ns.steps,
        seed=ns.seed,
    )
