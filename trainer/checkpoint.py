"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP): save, and resume exactly.

A checkpoint holds what the next step depends on: the model and optimizer (each rank writes
its own shards, through ``get_state_dict``/``set_state_dict`` so names and sharding are
portable), every rank's RNG state, and, in ``trainer.json`` (``trainer.runspec.checkpoint_files``),
the step, the data position (micro-batches drawn per rank), the LR scheduler, the layout it
was written under and the run's goodput clock. Resuming restores all of them, so step
``s + 1`` after a resume computes exactly what it would have computed without the interruption.

A save that fails (a full disk, most often) removes its partial directory, so the next attempt
starts no worse off, and its error says how much space the save needed and how much was free.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from observe.training.phases import Goodput
from trainer.runspec.checkpoint_files import TrainerState, file_sizes, prune, step_dir
from trainer.runspec.config import CheckpointConfig


@dataclass
class RunPosition:
    """Where the run stands, as saved and restored with a checkpoint.

    Attributes:
        step: optimizer steps completed.
        batches_consumed: micro-batches each rank has drawn.
        blocks_before: global blocks read at an earlier world size (``TrainerState.blocks_before``).
    """

    step: int
    batches_consumed: int
    blocks_before: int = 0


def describe_failure(exc: CheckpointException) -> str:
    """One line for a DCP failure: the ranks that failed and the first rank's exception.

    (``CheckpointException`` derives from ``BaseException`` and prints every rank's traceback.)
    """
    ranks = sorted(exc.failures)
    first, _ = exc.failures[ranks[0]]
    return f"rank(s) {', '.join(map(str, ranks))}: {type(first).__name__}: {first}".splitlines()[0]


def state_bytes(state: object) -> int:
    """Bytes of the tensors in a (nested) state dict, this rank's shard of each DTensor."""
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    if isinstance(state, torch.Tensor):
        local = state.to_local() if hasattr(state, "to_local") else state
        return local.numel() * local.element_size()
    return 0


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _rng_keys(rank: int, device: torch.device) -> dict[str, torch.Tensor]:
    """This rank's RNG states under per-rank keys (so each rank saves and loads its own)."""
    states = {f"rng.cpu.rank{rank}": torch.get_rng_state()}
    if device.type == "cuda":
        states[f"rng.cuda.rank{rank}"] = torch.cuda.get_rng_state(device)
    return states


class Checkpointer:
    """Saves and loads the run's checkpoints under ``--checkpoint-dir``.

    Args:
        cfg: checkpoint settings (``dir`` must be set to save).
        rank: this process's global rank (rank 0 writes ``trainer.json`` and prunes).
        device: for the CUDA RNG state.
        layout: the run's ``TrainConfig.layout`` (stored, checked on resume).
        run_id: stored for the record.
    """

    def __init__(self, cfg: CheckpointConfig, rank: int, device: torch.device, layout: dict, run_id: str) -> None:
        self.cfg, self.rank, self.device, self.layout, self.run_id = cfg, rank, device, layout, run_id
        self.last_saved_step: int | None = None

    def save(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        position: RunPosition,
        goodput: Goodput,
        reason: str,
    ) -> tuple[Path, float]:
        """Write a checkpoint of ``position.step`` on every rank (a collective).

        ``goodput``'s run start and productive seconds go into ``trainer.json`` (restored on resume).
        An older directory of the same step (an interrupted save, or an earlier attempt) is
        removed first. Returns the directory and this rank's save seconds.

        Raises:
            RuntimeError: the save failed (one line: the ranks, the first error, the space the
                save needed and the space free); its partial directory has been removed.
        """
        assert self.cfg.dir is not None  # the trainer makes a Checkpointer only with --checkpoint-dir
        path = step_dir(self.cfg.dir, position.step)
        if self.rank == 0:
            shutil.rmtree(path, ignore_errors=True)
        dist.barrier()
        started = time.perf_counter()
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state, **_rng_keys(self.rank, self.device)}
        try:
            dcp.save(state, checkpoint_id=str(path))
        except CheckpointException as exc:  # every rank gets it: DCP gathers each rank's outcome
            raise self._failed(path, describe_failure(exc), state_bytes(state), collective=True) from None
        seconds = time.perf_counter() - started
        if self.rank == 0:  # dcp.save returned: every rank's shards and the metadata are on disk
            try:
                TrainerState(
                    step=position.step,
                    batches_consumed=position.batches_consumed,
                    blocks_before=position.blocks_before,
                    scheduler=scheduler.state_dict(),
                    layout=self.layout,
                    run_id=self.run_id,
                    run_started=goodput.run_started,
                    productive_seconds=goodput.productive_seconds,
                    reason=reason,
                    saved_at=time.time(),
                    save_seconds=seconds,
                    files=file_sizes(path),
                ).write(path)
            except OSError as exc:
                raise self._failed(
                    path, f"rank(s) 0: {type(exc).__name__}: {exc}", state_bytes(state), collective=False
                ) from None
            for removed, why in prune(self.cfg.dir, self.cfg.keep, position.step):
                if why.startswith("damaged"):  # the others are routine retention
                    print(f"checkpoint: removed {removed.name}: {why}", file=sys.stderr, flush=True)
        self.last_saved_step = position.step
        return path, seconds

    def _failed(self, path: Path, what: str, local_bytes: int, collective: bool) -> RuntimeError:
        """The error of a failed save, after rank 0 removed its partial directory.

        The space needed is this rank's shard bytes times the world size (FSDP shards evenly;
        the DCP index adds little), so it reads "about". ``collective``: every rank is here (a
        DCP failure), so they wait for the removal before measuring the free space.
        """
        world = dist.get_world_size() if dist.is_initialized() else 1
        if self.rank == 0:
            shutil.rmtree(path, ignore_errors=True)
        if collective and dist.is_initialized():
            dist.barrier()
        needed = local_bytes * world
        try:
            free = shutil.disk_usage(path.parent).free
            room = f"{_mb(free)} {'is' if free < 2e6 else 'are'} free there" + (": not enough" if free < needed else "")
        except OSError:
            room = "the free space there is unknown"
        return RuntimeError(
            f"checkpoint save to {path} failed on {what}; the save needs about {_mb(needed)} "
            f"({_mb(local_bytes)} per rank x {world}) and {room}; its partial {path.name} was "
            "removed; free space, or point --checkpoint-dir elsewhere"
        )

    def load(
        self,
        path: Path,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
    ) -> tuple[TrainerState, float]:
        """Restore model, optimizer, RNG and scheduler from ``path`` (a collective).

        Returns the checkpoint's ``TrainerState`` and this rank's load seconds. Written at another
        world size (``--resume-any-world-size``), DCP reshards the model and optimizer onto this
        mesh; a rank the checkpoint had no RNG state for keeps its seeded one.
        """
        state = TrainerState.read(path)
        started = time.perf_counter()
        model_state, optim_state = get_state_dict(model, optimizer)
        saved_world = state.layout.get("world_size")
        rng = _rng_keys(self.rank, self.device) if saved_world is None or self.rank < saved_world else {}
        loaded: dict[str, Any] = {"model": model_state, "optim": optim_state, **rng}
        try:
            dcp.load(loaded, checkpoint_id=str(path))
        except CheckpointException as exc:
            raise RuntimeError(f"checkpoint load from {path} failed on {describe_failure(exc)}") from None
        set_state_dict(model, optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
        if f"rng.cpu.rank{self.rank}" in loaded:
            torch.set_rng_state(loaded[f"rng.cpu.rank{self.rank}"])
        if f"rng.cuda.rank{self.rank}" in loaded:
            torch.cuda.set_rng_state(loaded[f"rng.cuda.rank{self.rank}"], self.device)
        scheduler.load_state_dict(state.scheduler)
        self.last_saved_step = state.step
        return state, time.perf_counter() - started
