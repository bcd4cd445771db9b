"""Typed, validated training settings and the command line that fills them.

Each flag is declared once, on its dataclass field (``observe.flags.flag``): its name, help text
and the field's default. The parser (``build_parser``), the settings of a command line
(``TrainConfig.from_argv``) and the command line of settings (``TrainConfig.to_argv``, used by
every launcher: ``fsdp-observe train``, the demo, the scaling runs, the PyTorchJob) come from it.

Torch-free: ``fsdp-observe train`` and ``demo`` validate a configuration before any rank starts,
so a user mistake is one line, not a stack trace from every rank.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from observe.catalog import TRAINER_PORT_BASE
from observe.errors import UserError, did_you_mean, prove_writable, writable_dir
from observe.flags import OneLineParser, add_flags, apply_flags, flag, parse_flags, to_argv
from trainer.runspec.checkpoint_files import (
    TrainerState,
    check_compatible,
    data_digest,
    layout_fingerprint,
    newest_complete,
    resolve_resume,
)
from trainer.runspec.corpus import check_enough_text, check_jsonl_text, resolve_data_files
from trainer.runspec.presets import PRESETS
from trainer.runspec.weights import check_model_dir

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
MIXED_PRECISION = ("fp32", "bf16", "pure-bf16")
#: ``--resume`` keywords; any other value is the path of one checkpoint directory.
RESUME_MODES = ("auto", "latest", "never")
#: The console script that runs one rank (``pyproject.toml`` [project.scripts]); torchrun starts
#: it with ``--no-python``, so a ``trainer.py`` in the working directory cannot shadow ours.
TRAINER_COMMAND = "fsdp-observe-trainer"
#: ``--metrics-linger``'s default: the longest wait for a final scrape, a bit more than the trainer
#: PodMonitor's 15 s interval (``observe.training.rankenv.DEFAULT_LINGER_SECONDS``, the same).
DEFAULT_LINGER_SECONDS = 20.0
#: The environment variable that gives ``--run-id`` its default in a rank.
RUN_ID_ENV = "FSDP_OBSERVE_RUN_ID"


def _on_off(text: str) -> bool:
    if text not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r} is neither on nor off; pass --metrics on or --metrics off")
    return text == "on"


@dataclass
class ModelConfig:
    """Which model to train: a named shape with random weights, or a checkpoint.

    Attributes:
        preset: a key of ``trainer.runspec.presets.PRESETS``; ignored when ``path`` is set.
        path: a local ``save_pretrained`` directory (``config.json`` and ``*.safetensors``).
        tokenizer: a local Hugging Face tokenizer directory; ``None`` uses the byte tokenizer.
    """

    preset: str = field(
        default="tiny",
        metadata=flag("--preset", f"model shape with random weights: {', '.join(PRESETS)}", metavar="NAME"),
    )
    path: str | None = field(
        default=None,
        metadata=flag(
            "--model",
            "local save_pretrained directory with safetensors, loaded shard by shard (overrides --preset)",
            metavar="PATH",
        ),
    )
    tokenizer: str | None = field(
        default=None, metadata=flag("--tokenizer", "local Hugging Face tokenizer", metavar="PATH", default_text="bytes")
    )

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

    paths: list[str] = field(
        default_factory=list,
        metadata=flag(
            "--data",
            ".txt/.md/.py/.jsonl files or globs",
            nargs="+",
            metavar="FILE_OR_GLOB",
            default_text="the Python standard library's sources",
        ),
    )
    seq_len: int = field(default=256, metadata=flag("--seq-len", "tokens per sequence", metavar="N"))
    batch_size: int = field(default=8, metadata=flag("--batch-size", "sequences per rank per step", metavar="N"))


@dataclass
class OptimConfig:
    """AdamW with linear warm-up, then cosine decay to ``lr * min_lr_ratio``; norm clipping.

    Attributes:
        grad_accum_steps: micro-batches per optimizer step (each ``--batch-size`` sequences per rank).
    """

    lr: float = field(default=1e-3, metadata=flag("--lr", "peak learning rate"))
    warmup_steps: int = field(
        default=10, metadata=flag("--warmup-steps", "steps of linear learning-rate warm-up", metavar="N")
    )
    min_lr_ratio: float = field(
        default=0.1, metadata=flag("--min-lr-ratio", "the cosine decay ends at this share of --lr")
    )
    weight_decay: float = field(default=0.1, metadata=flag("--weight-decay", "AdamW weight decay"))
    grad_clip: float = field(default=1.0, metadata=flag("--grad-clip", "clip the gradient norm to this"))
    grad_accum_steps: int = field(
        default=1,
        metadata=flag(
            "--grad-accum-steps",
            "micro-batches per optimizer step (global batch = K x batch size x ranks)",
            metavar="K",
        ),
    )


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

    sharding_strategy: str = field(
        default="FULL_SHARD",
        metadata=flag("--sharding-strategy", ", ".join(SHARDING_STRATEGIES), metavar="STRATEGY", parse=str.upper),
    )
    mixed_precision: str = field(
        default="bf16", metadata=flag("--mixed-precision", ", ".join(MIXED_PRECISION), metavar="POLICY")
    )
    device: str = field(default="auto", metadata=flag("--device", "auto, cpu or cuda"))
    backend: str = field(default="auto", metadata=flag("--backend", "auto (nccl on CUDA, gloo on CPU), gloo, nccl"))
    replicate_degree: int | None = field(
        default=None,
        metadata=flag("--replicate-degree", "HYBRID_SHARD: replica groups", metavar="R", default_text="nodes"),
    )
    shard_degree: int | None = field(
        default=None,
        metadata=flag(
            "--shard-degree",
            "HYBRID_SHARD: ranks each replica is sharded over",
            metavar="S",
            default_text="ranks per node",
        ),
    )
    activation_checkpointing: str = field(
        default="none",
        metadata=flag(
            "--activation-checkpointing",
            "recompute activations in backward: no layer, every decoder layer, or every N-th",
            metavar="none|full|every-N",
        ),
    )

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
        raise UserError(
            "--activation-checkpointing",
            f"unknown setting {value!r}",
            "choose none, full, or every-N with N >= 1 (every N-th decoder layer)",
        )

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
        for name, value in (("--replicate-degree", r), ("--shard-degree", s)):
            if value is not None and self.sharding_strategy != "HYBRID_SHARD":
                raise UserError(
                    name,
                    f"only HYBRID_SHARD uses a (replicate, shard) mesh, the strategy is {self.sharding_strategy}",
                    f"drop {name} or pass --sharding-strategy HYBRID_SHARD",
                )
            if value is not None and value < 1:
                raise UserError(name, f"must be positive, got {value}", f"pass {name} 1 or more")
        if self.sharding_strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
            return (world_size,)
        if self.sharding_strategy == "NO_SHARD":
            return (world_size, 1)
        if r is None and s is None:
            if world_size % local_world_size:
                raise UserError(
                    "--sharding-strategy",
                    f"HYBRID_SHARD needs the world size ({world_size}) "
                    f"to be a multiple of ranks per node ({local_world_size})",
                    "use the same number of ranks on every node, or pass --shard-degree",
                )
            r, s = world_size // local_world_size, local_world_size
        elif r is None and s is not None:
            r = world_size // s if world_size % s == 0 else None
        elif s is None and r is not None:
            s = world_size // r if world_size % r == 0 else None
        if r is None or s is None or r * s != world_size:
            given = " x ".join(
                f"{f} {v}"
                for f, v in (("--replicate-degree", self.replicate_degree), ("--shard-degree", self.shard_degree))
                if v is not None
            )
            raise UserError(
                "--replicate-degree" if self.replicate_degree is not None else "--shard-degree",
                f"{given} does not fit the world size {world_size}",
                "pass degrees whose product is the number of ranks",
            )
        return (r, s)


@dataclass
class MetricsConfig:
    """The Prometheus exporter of each rank.

    Attributes:
        enabled: ``False`` turns the exporter off entirely (the A/B benchmark's baseline).
        port_base: rank ``r`` on a node serves on ``port_base + local_rank``.
        address: bind address.
        linger_seconds: after the last step, keep serving ``/metrics`` this long, so whoever scrapes
            sees the ``finished`` phase and the final figures. ``None`` (the default): until every
            scraper seen in the last ``DEFAULT_LINGER_SECONDS`` (20 s) has scraped once more, at
            most that long, and not at all when nobody scraped (``observe.training.server``): one
            more scrape at the trainer PodMonitor's 15 s interval.
        log_every: steps per log window (loss, tokens/s, MFU are read on log steps only).
        log_json: rank 0 appends one JSON object per log window, and a summary, to this file.
        run_id: the ``run_id`` label; default: torchrun's ``--rdzv-id`` when set, else a new id.
    """

    enabled: bool = field(
        default=True,
        metadata=flag(
            "--metrics",
            "serve /metrics on every rank",
            metavar="on|off",
            parse=_on_off,
            format=lambda on: "on" if on else "off",
        ),
    )
    port_base: int = field(
        default=TRAINER_PORT_BASE,
        metadata=flag("--metrics-port", "base port; each rank serves on base + LOCAL_RANK", metavar="PORT"),
    )
    address: str = field(
        default="0.0.0.0", metadata=flag("--metrics-address", "bind address of /metrics", metavar="ADDRESS")
    )
    linger_seconds: float | None = field(
        default=None,
        metadata=flag(
            "--metrics-linger",
            "after the last step keep serving /metrics this long (0: stop at once)",
            metavar="SECONDS",
            default_text=(
                f"until every scraper of the last {DEFAULT_LINGER_SECONDS:g} s has scraped the end once more, "
                f"at most {DEFAULT_LINGER_SECONDS:g} s"
            ),
        ),
    )
    log_every: int = field(default=10, metadata=flag("--log-every", "steps per log window", metavar="N"))
    log_json: str | None = field(
        default=None, metadata=flag("--log-json", "rank 0 appends one JSON object per log window", metavar="FILE")
    )
    run_id: str | None = field(
        default=None,
        metadata=flag(
            "--run-id",
            "run_id label",
            metavar="ID",
            env=RUN_ID_ENV,
            default_text=f"${RUN_ID_ENV}, else torchrun's --rdzv-id, else generated",
        ),
    )


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
        any_world_size: resume a checkpoint written at another world size (an elastic resize, a
            job rendered again with another node count): the model and optimizer are resharded
            and the data continues from the first block of the global stream no rank has read,
            so no text is seen twice or skipped; not bit-exact (the global batch is another).
            Off: such a checkpoint is refused, naming ``--nproc-per-node``.
    """

    dir: str | None = field(
        default=None, metadata=flag("--checkpoint-dir", "sharded checkpoints go to DIR/step-NNNNNNNN", metavar="DIR")
    )
    every: int = field(
        default=0,
        metadata=flag("--checkpoint-every", "save every N steps; 0: at the end and on SIGTERM only", metavar="N"),
    )
    keep: int = field(default=2, metadata=flag("--keep-checkpoints", "complete checkpoints kept", metavar="K"))
    resume: str = field(
        default="auto",
        metadata=flag(
            "--resume",
            "auto: continue from the newest complete checkpoint in --checkpoint-dir if any; --resume "
            "alone: the same, but one must exist; never; or one checkpoint directory",
            nargs="?",
            const="latest",
            metavar="auto|latest|never|PATH",
        ),
    )
    sigterm_grace: float = field(
        default=25.0,
        metadata=flag(
            "--sigterm-grace",
            "on SIGTERM save and exit within this time (keep it below torchrun's --shutdown-timeout)",
            metavar="SECONDS",
        ),
    )
    any_world_size: bool = field(
        default=False,
        metadata=flag(
            "--resume-any-world-size",
            "resume a checkpoint written at another world size (resharded; the data "
            "continues where the whole run stopped; not bit-exact)",
        ),
    )


@dataclass
class ValidationConfig:
    """Held-out loss and perplexity.

    Attributes:
        every: evaluate every N steps and at the end (0: never; then nothing is held out).
        fraction: share of documents held out of training (chosen by a hash of each document's
            text, so the split does not depend on file order or world size).
        batches: micro-batches per rank per evaluation (the same ones every time).
    """

    every: int = field(
        default=0,
        metadata=flag("--val-every", "held-out loss and perplexity every N steps and at the end; 0: off", metavar="N"),
    )
    fraction: float = field(default=0.01, metadata=flag("--val-fraction", "share of documents held out"))
    batches: int = field(
        default=4, metadata=flag("--val-batches", "micro-batches per rank per evaluation", metavar="N")
    )


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
    steps: int = field(default=100, metadata=flag("--steps", "optimizer steps", group="optimisation", metavar="N"))
    seed: int = field(
        default=0, metadata=flag("--seed", "seed of the weights and the data order", group="optimisation")
    )
    verify_weights: bool = field(
        default=False,
        metadata=flag(
            "--verify-weights",
            "at the end, gather the full weights on every rank and check all ranks hold the same",
            group="parallelism",
        ),
    )

    @classmethod
    def from_argv(
        cls, argv: list[str], prog: str = TRAINER_COMMAND, environ: Mapping[str, str] | None = None
    ) -> TrainConfig:
        """The settings of a trainer command line (not yet validated).

        Args:
            argv: trainer flags, e.g. ``["--preset", "tiny", "--steps", "5"]``.
            prog: the command named in error messages.
            environ: where ``--run-id`` may take its default (``$FSDP_OBSERVE_RUN_ID``); the
                rank passes ``os.environ``, launchers nothing.

        Raises:
            UserError: a usage mistake (an unknown flag, a value of the wrong type).
        """
        return config_from_values(parse_flags(build_parser(prog), argv), environ=environ)

    def to_argv(self) -> list[str]:
        """The trainer flags that give these settings: each one that differs from the default.

        ``TrainConfig.from_argv(cfg.to_argv()) == cfg``. The launchers (``fsdp-observe train``,
        the demo, the scaling runs, the PyTorchJob) build their command lines with it.
        """
        return to_argv(self)

    def layout(self, files: list[Path], world_size: int | None) -> dict:
        """The settings that fix which tokens each rank sees at each step (resume checks)."""
        return layout_fingerprint(
            {
                "world_size": world_size,
                "seq_len": self.data.seq_len,
                "batch_size": self.data.batch_size,
                "grad_accum_steps": self.optim.grad_accum_steps,
                "seed": self.seed,
                "model": self.model.name,
                "tokenizer": self.model.tokenizer or "bytes",
                "data": data_digest(files),
                "val_fraction": self.validation.fraction if self.validation.every else 0.0,
            }
        )

    def validate(self, world_size: int | None = None, local_world_size: int | None = None) -> list[Path]:
        """Check every setting and the files it names; return the resolved data files.

        Args:
            world_size, local_world_size: the ranks in the run and per node, when known (the
                launcher knows them before torchrun starts; a rank reads them from torchrun).
                The mesh layout, the corpus size and a resume's world size are checked only when given.

        Raises:
            UserError: naming the first flag at fault and how to fix it.
        """
        self.check_settings(world_size, local_world_size)
        m, d, o, x = self.model, self.data, self.optim, self.metrics
        if m.path is not None:
            check_model_dir(Path(m.path))
        if m.tokenizer is not None and not Path(m.tokenizer).exists():
            raise UserError(
                "--tokenizer",
                f"{m.tokenizer!r} does not exist",
                "pass a local Hugging Face tokenizer directory, or omit it for bytes",
            )
        if x.log_json is not None:
            _appendable_file(Path(x.log_json), "--log-json")
        if self.checkpoint.dir is not None:
            _writable_dir(Path(self.checkpoint.dir))
        files = resolve_data_files(d.paths)
        for path in files:
            if path.suffix == ".jsonl":
                check_jsonl_text(path)
        if world_size is not None:
            check_enough_text(
                files,
                world_size,
                d.batch_size,
                o.grad_accum_steps,
                d.seq_len,
                self.validation.fraction if self.validation.every else 0.0,
            )
        self._validate_resume(files, world_size)
        return files

    def check_settings(self, world_size: int | None = None, local_world_size: int | None = None) -> None:
        """The checks of ``validate`` that read no file of this machine: what ``fsdp-observe job render``
        can check for ranks that run elsewhere (their model, data and checkpoint paths are in the pod).

        Raises:
            UserError: naming the first flag at fault and how to fix it.
        """
        m, d, o, p, x = self.model, self.data, self.optim, self.parallel, self.metrics
        if m.path is None and m.preset not in PRESETS:
            close = did_you_mean(m.preset, PRESETS)
            raise UserError(
                "--preset",
                f"unknown preset {m.preset!r}",
                (f"did you mean {close}? " if close else "")
                + f"choose one of {', '.join(PRESETS)} or pass --model PATH",
            )
        _positive("--steps", self.steps)
        _positive("--batch-size", d.batch_size)
        _positive("--seq-len", d.seq_len)
        _positive("--log-every", x.log_every)
        _positive("--grad-accum-steps", o.grad_accum_steps)
        if not o.lr > 0:
            raise UserError("--lr", f"must be positive, got {o.lr}", "pass e.g. --lr 3e-4")
        if o.warmup_steps < 0:
            raise UserError("--warmup-steps", f"must be >= 0, got {o.warmup_steps}", "pass 0 for no warm-up")
        if not 0 <= o.min_lr_ratio <= 1:
            raise UserError("--min-lr-ratio", f"must be in [0, 1], got {o.min_lr_ratio}", "pass e.g. 0.1")
        max_pos = m.max_positions()
        if max_pos is not None and d.seq_len > max_pos:
            raise UserError(
                "--seq-len", f"{d.seq_len} exceeds the model's {max_pos} positions", f"pass --seq-len {max_pos} or less"
            )
        if p.sharding_strategy not in SHARDING_STRATEGIES:
            raise UserError(
                "--sharding-strategy",
                f"unknown strategy {p.sharding_strategy!r}",
                f"choose one of {', '.join(SHARDING_STRATEGIES)}",
            )
        if p.mixed_precision not in MIXED_PRECISION:
            raise UserError(
                "--mixed-precision",
                f"unknown policy {p.mixed_precision!r}",
                f"choose one of {', '.join(MIXED_PRECISION)}",
            )
        if p.device not in ("auto", "cpu", "cuda"):
            raise UserError("--device", f"unknown device {p.device!r}", "choose auto, cpu or cuda")
        every = p.checkpoint_every()
        layers = m.shape().get("num_hidden_layers")
        if layers is not None and every > layers:
            raise UserError(
                "--activation-checkpointing",
                f"every-{every} checkpoints no layer of a {layers}-layer model",
                f"pass every-N with N <= {layers}, full or none",
            )
        if world_size is not None:
            p.mesh_shape(world_size, local_world_size or world_size)
        if x.linger_seconds is not None and not x.linger_seconds >= 0:
            raise UserError(
                "--metrics-linger",
                f"must be 0 or more, got {x.linger_seconds:g}",
                f"pass e.g. --metrics-linger {DEFAULT_LINGER_SECONDS:g}, or 0 to stop serving at once",
            )
        if not 0 < x.port_base < 65536:
            raise UserError("--metrics-port", f"{x.port_base} is not a TCP port", "pass a port between 1024 and 65535")
        self._validate_checkpointing()
        self._validate_validation()

    def _validate_checkpointing(self) -> None:
        k = self.checkpoint
        if k.every < 0:
            raise UserError("--checkpoint-every", f"must be >= 0, got {k.every}", "pass 0 to save only at the end")
        if k.every and k.dir is None:
            raise UserError("--checkpoint-every", "there is nowhere to save", "pass --checkpoint-dir DIR as well")
        _positive("--keep-checkpoints", k.keep)
        if not k.sigterm_grace > 0:
            raise UserError(
                "--sigterm-grace",
                f"must be positive, got {k.sigterm_grace}",
                "pass the seconds a save may take after SIGTERM, e.g. 25",
            )

    def _validate_validation(self) -> None:
        v = self.validation
        if v.every < 0:
            raise UserError("--val-every", f"must be >= 0, got {v.every}", "pass 0 to turn validation off")
        if v.every and not 0 < v.fraction <= 0.5:
            raise UserError(
                "--val-fraction",
                f"must be in (0, 0.5], got {v.fraction}",
                "hold out a small share of documents, e.g. 0.01",
            )
        if v.every:
            _positive("--val-batches", v.batches)

    def _validate_resume(self, files: list[Path], world_size: int | None) -> None:
        if self.checkpoint.resume == "never" and self.checkpoint.dir and newest_complete(self.checkpoint.dir):
            raise UserError(
                "--resume",
                f"never, but {self.checkpoint.dir!r} already holds checkpoints of a run, "
                "which a restart would resume instead of this one",
                "pass a new (empty) --checkpoint-dir to start another run, or --resume auto to continue that one",
            )
        path = resolve_resume(self.checkpoint.dir, self.checkpoint.resume)
        if path is not None:
            state = TrainerState.read(path)
            layout = self.layout(files, world_size)
            if self.checkpoint.any_world_size:
                layout["world_size"] = None  # not checked: the checkpoint is resharded
            check_compatible(path, state.layout, layout)


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
    writable_dir(path, "--checkpoint-dir", "pass a directory you can write, on storage every node shares")


def _appendable_file(path: Path, flag: str) -> None:
    """Prove ``path`` can be opened for appending (its folder is created) without ever creating
    or removing ``path`` itself: every rank validates the same ``--log-json`` while rank 0 may
    already be writing it, so a probe that made the file and removed it again could delete
    rank 0's log under it. An existing file is opened for appending; for a new one its folder
    is proven writable (``prove_writable``).

    Raises:
        UserError: naming ``flag``: a directory, or a file that cannot be created or written.
    """
    if path.is_dir():
        raise UserError(flag, f"{str(path)!r} is a directory", f"pass a file name, e.g. {path / 'run.jsonl'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))  # no O_CREAT: an existing file only
        except FileNotFoundError:
            prove_writable(path.parent)
    except OSError as exc:
        raise UserError(
            flag, f"cannot write to {str(path)!r} ({exc.strerror})", "pass a file in a directory you can write"
        ) from None


def _positive(flag: str, value: int) -> None:
    if value <= 0:
        raise UserError(flag, f"must be positive, got {value}", f"pass {flag} 1 or more")


#: The ``--help`` section of each nested settings object's flags.
FLAG_GROUPS = {
    "model": "model",
    "data": "data",
    "optim": "optimisation",
    "parallel": "parallelism",
    "checkpoint": "checkpoints and restarts",
    "validation": "validation",
    "metrics": "metrics and logs",
}


def build_parser(prog: str = TRAINER_COMMAND) -> OneLineParser:
    """The trainer's command line, generated from the ``flag`` metadata of ``TrainConfig``.

    Also the trainer part of ``fsdp-observe train``. Every default is ``argparse.SUPPRESS``:
    ``parse_flags`` returns only the flags given (``TrainConfig.from_argv`` fills the rest).
    """
    ap = OneLineParser(prog=prog, description="Instrumented FSDP fine-tune of a Llama model.")
    add_flags(ap, TrainConfig, FLAG_GROUPS)
    return ap


def config_from_values(
    values: dict[str, Any], base: TrainConfig | None = None, environ: Mapping[str, str] | None = None
) -> TrainConfig:
    """``base`` (default: the defaults) with the flags ``values`` (from ``parse_flags``) set.

    ``--resume PATH`` without ``--checkpoint-dir`` keeps saving beside PATH. Not validated.
    """
    cfg = apply_flags(base or TrainConfig(), values, environ)
    if cfg.checkpoint.dir is None and (beside := _beside(cfg.checkpoint.resume)) is not None:
        cfg = replace(cfg, checkpoint=replace(cfg.checkpoint, dir=beside))
    return cfg
