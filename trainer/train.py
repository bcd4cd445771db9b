"""The training run: build in a fixed order, then a thin loop.

Build order (``Trainer.__init__``): process group → mesh → which checkpoint to resume → stop-signal
vote and grace deadline → tokenizer → model skeleton on the meta device → metrics exporter (so a taken port
fails fast) → activation checkpointing + FSDP2 → each rank's shards allocated and filled →
optimizer and schedule → checkpoint loaded → data at the checkpoint's position → validation
batches.

The loop (``Trainer.train``): every step goes through the public ``observe.training.TrainingMetrics``
(the one code path every entry point uses): data wait and tokens from its ``batches()``, the
step from ``step()``, loss sums that stay on the device and are read, with one all-reduce
(``global_loss``), on log steps only, so other steps never synchronise host and device. After
each step: validation and checkpoint when due, and the stop vote for SIGTERM/SIGINT (a CPU
all-reduce on a side group, read one step later: see ``trainer.signals``). With ``--metrics off`` the same object
keeps the accounting for the log without serving.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from observe import stopping
from observe.errors import UserError
from observe.training import Step, TrainingMetrics, WindowReport
from observe.training.collector import process_resident_memory_peak_bytes
from observe.training.flops import flops_per_token
from observe.training.phases import process_start_time
from trainer import distributed
from trainer.checkpoint import Checkpointer, RunPosition
from trainer.data import Batch, BatchIterator, ByteTokenizer, HFTokenizer
from trainer.model import build_model, materialize
from trainer.parallelize import build_mesh, parallelize
from trainer.progress import RunProgress
from trainer.report import Reporter
from trainer.runspec.checkpoint_files import START_OVER, TrainerState, resolve_resume, resume_candidates
from trainer.runspec.config import TrainConfig
from trainer.signals import STOP_EXIT_STATUSES, StopRequest
from trainer.validation import evaluate, token_loss_sum, validation_batches
from trainer.verify import full_weights_sha256, gather_from_ranks


def lr_lambda(warmup_steps: int, total_steps: int, min_ratio: float) -> Callable[[int], float]:
    """Multiplier of the peak LR at a 0-based scheduler step: linear warm-up, then cosine.

    Warm-up rises linearly to 1 over ``warmup_steps``; the cosine then falls to ``min_ratio``
    at ``total_steps``.
    """

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip gradients to a global L2 norm; return the norm before clipping (a device tensor).

    Sharded (DTensor) gradients give a partial norm that ``full_tensor()`` reduces over the
    mesh, a collective but no host synchronisation.
    """
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=True)
    return total


def peak_memory(device: torch.device) -> dict:
    """This process's peak RSS (bytes, the kernel's ``VmHWM``; ``None`` where unknown) and the
    CUDA allocator's peak allocated bytes (``None`` on CPU)."""
    cuda = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"rss_bytes": process_resident_memory_peak_bytes(), "device_bytes": cuda}


def run(cfg: TrainConfig, files: list[Path]) -> int:
    """Train per ``cfg`` on ``files``; return the process exit status.

    0 on success; 143 after SIGTERM and 130 after SIGINT (the ranks agreed on a step and saved it
    when ``--checkpoint-dir`` is set); 1 when ``--verify-weights`` finds ranks that disagree.
    """
    return Trainer(cfg, files).train()


class Trainer:
    """One rank of a run: everything built in ``__init__``, the loop in ``train``."""

    def __init__(self, cfg: TrainConfig, files: list[Path]) -> None:
        self.cfg = cfg
        self.step_times: list[float] = []
        self.load_seconds = 0.0
        self.process_started = process_start_time()
        self.rt = rt = distributed.init(cfg.parallel)
        self.mesh_shape = cfg.parallel.mesh_shape(rt.world_size, rt.local_world_size)
        mesh = build_mesh(cfg.parallel, rt.device.type, rt.world_size, rt.local_world_size)
        candidates = self._agreed_resume_paths()
        resume_from = candidates[0] if candidates else None
        self.run_id = distributed.resolve_run_id(
            cfg.metrics.run_id or (TrainerState.read(resume_from).run_id if resume_from else None)
        )
        self.stop = StopRequest(cfg.checkpoint.sigterm_grace, rt.rank, checkpointing=cfg.checkpoint.dir is not None)
        self.stop.install()

        tokenizer = HFTokenizer(cfg.model.tokenizer) if cfg.model.tokenizer else ByteTokenizer()
        model = build_model(cfg.model)
        if tokenizer.vocab_size > model.config.vocab_size:
            raise UserError(
                "--tokenizer",
                f"{tokenizer.vocab_size} tokens exceed the model's vocabulary of {model.config.vocab_size}",
                "use the tokenizer that belongs to the model",
            )
        self.fpt = flops_per_token(model, cfg.data.seq_len)
        self.reporter = Reporter(cfg, rt, self.run_id, self.fpt, self.mesh_shape) if rt.is_main else None
        self.metrics = self._start_metrics(model, "restarting" if resume_from or rt.restart_count else None)
        self.recorder = self.metrics.recorder  # the entry-point protocol: our FLOPs, phases, goodput
        self.phases, self.goodput = self.recorder.phases, self.recorder.goodput

        self.model = parallelize(model, mesh, cfg.parallel)
        materialize(self.model, rt.device, cfg.model, cfg.seed)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=cfg.optim.lr, betas=(0.9, 0.95), weight_decay=cfg.optim.weight_decay, foreach=True
        )
        self.optimizer.register_step_pre_hook(self.recorder.read_learning_rate)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(cfg.optim.warmup_steps, cfg.steps, cfg.optim.min_lr_ratio)
        )

        self.checkpointer = (
            Checkpointer(cfg.checkpoint, rt.rank, rt.device, cfg.layout(files, rt.world_size), self.run_id)
            if cfg.checkpoint.dir
            else None
        )
        self.position = RunPosition(step=0, batches_consumed=0)
        self.progress = self._progress()
        if resume_from is not None:
            resume_from = self._resume(candidates)
            if self.progress is not None and (redone := self.progress.resumed(self.position.step)):
                print(f"progress: {redone} steps done after step {self.position.step} are done again", flush=True)

        held_out = cfg.validation.fraction if cfg.validation.every else 0.0
        self.batches = BatchIterator(
            files,
            tokenizer,
            cfg.data.seq_len,
            cfg.data.batch_size,
            rt.rank,
            rt.world_size,
            cfg.seed,
            skip_batches=self.position.batches_consumed,
            held_out=held_out,
            block_offset=self.position.blocks_before,
        )
        self.val_batches = (
            validation_batches(
                files,
                tokenizer,
                cfg.data.seq_len,
                cfg.data.batch_size,
                rt.rank,
                rt.world_size,
                cfg.seed,
                held_out,
                cfg.validation.batches,
            )
            if cfg.validation.every
            else None
        )
        if resume_from is not None and self.reporter is not None:
            self.reporter.resumed(
                self.position.step, str(resume_from), self.load_seconds, time.time() - self.process_started
            )

    # -- build helpers ---------------------------------------------------------------------

    def _agreed_resume_paths(self) -> list[Path]:
        """Rank 0 picks the checkpoints to try (``--resume``), newest first, and tells the others,
        so all load the same; it says in one line which damaged ones it skipped."""
        box: list[list[str] | None] = [None]
        if self.rt.is_main:
            ck = self.cfg.checkpoint
            skipped: list[str] = []
            path = resolve_resume(ck.dir, ck.resume, lambda p, why: skipped.append(f"{p.name} ({why})"))
            paths = [] if path is None else [path]
            if path is not None and ck.resume in ("auto", "latest") and ck.dir:
                paths = resume_candidates(ck.dir)
            if skipped:
                print(
                    f"resume: skipping damaged checkpoint {'; '.join(skipped)}; resuming from "
                    f"{path.name if path else 'the start'}",
                    file=sys.stderr,
                    flush=True,
                )
            box = [[str(p) for p in paths]]
        dist.broadcast_object_list(box, src=0)
        return [Path(p) for p in box[0] or []]

    def _start_metrics(self, model: torch.nn.Module, phase: str | None) -> TrainingMetrics:
        """The rank's ``TrainingMetrics``: global token-weighted loss (one all-reduce per log
        window), served on ``--metrics-port + local_rank`` unless ``--metrics off``; a taken port
        is an error here (the launcher checked the ports already)."""
        rt, cfg, p = self.rt, self.cfg, self.cfg.parallel
        metrics = TrainingMetrics(
            planned_steps=cfg.steps,
            model=model,
            seq_len=cfg.data.seq_len,
            log_every=cfg.metrics.log_every,
            global_loss=True,
            run_id=self.run_id,
            port_base=cfg.metrics.port_base,
            address=cfg.metrics.address,
            linger_seconds=cfg.metrics.linger_seconds,
            serve=cfg.metrics.enabled,
            port_fallback=False,
            port_setting="--metrics-port",
            phase=phase,
            device=rt.device,
            instrumentation="trainer",
            on_window=self._report_window,
            info={
                "model": cfg.model.name,
                "sharding_strategy": p.sharding_strategy,
                "mixed_precision": p.mixed_precision,
                "device_type": rt.device.type,
                "backend": rt.backend,
                "activation_checkpointing": p.activation_checkpointing,
                "mesh": "x".join(map(str, self.mesh_shape)),
            },
        )
        metrics.recorder.set_flops_per_token(self.fpt)
        metrics.recorder.track_checkpoints()
        return metrics

    def _progress(self) -> RunProgress | None:
        """Rank 0's progress record (``trainer.progress``) with a checkpoint directory, its
        ``fsdp_train_steps_redone_total`` served beside the rank's other series."""
        if not (self.rt.is_main and self.cfg.checkpoint.dir):
            return None
        collector = self.metrics.recorder.collector
        progress = RunProgress(self.cfg.checkpoint.dir, self.run_id, collector.labels)
        collector.add_families(lambda _: progress.collect())  # served whenever the rank serves
        return progress

    def _resume(self, candidates: list[Path]) -> Path:
        """Load the first of ``candidates`` that loads (a failed load fails on every rank alike, so
        all ranks move to the next one together); return it.

        Raises:
            UserError: every candidate failed to load (one line naming each, and how to start over).
        """
        assert self.checkpointer is not None  # resuming needs --checkpoint-dir (the launcher checks)
        failed: list[str] = []
        for i, path in enumerate(candidates):
            try:
                state, self.load_seconds = self.checkpointer.load(path, self.model, self.optimizer, self.scheduler)
            except RuntimeError as exc:
                failed.append(f"{path.name} ({exc})")
                if i + 1 == len(candidates):
                    raise UserError(
                        "--resume",
                        f"no checkpoint could be loaded: {'; '.join(failed)}",
                        START_OVER,
                    ) from None
                if self.rt.is_main:
                    print(f"resume: {exc}; falling back to {candidates[i + 1].name}", file=sys.stderr, flush=True)
                continue
            self._restored(state)
            return path
        raise AssertionError("no candidates")  # pragma: no cover - callers pass at least one

    def _restored(self, state: TrainerState) -> None:
        saved_world, world = state.layout.get("world_size"), self.rt.world_size
        if saved_world in (None, world):
            self.position = RunPosition(state.step, state.batches_consumed, state.blocks_before)
        else:  # resharded (--resume-any-world-size): count this world size's batches from where the run stopped
            read = state.blocks_before + state.batches_consumed * self.cfg.data.batch_size * int(saved_world)
            self.position = RunPosition(state.step, 0, read)
            if self.rt.is_main:
                print(
                    f"resume: the checkpoint of step {state.step} was written by {saved_world} rank(s), resharded "
                    f"onto {world}; the data continues at block {read:,} of the run's stream "
                    "(--resume-any-world-size)",
                    flush=True,
                )
        self.metrics.checkpoint_loaded(
            state.step, self.load_seconds, state.saved_at, state.run_started, state.productive_seconds
        )

    # -- the loop ----------------------------------------------------------------------------

    def train(self) -> int:
        """Run the steps from the resumed position to ``--steps``; return the exit status."""
        cfg = self.cfg
        if agreed := self.stop.agree_now():  # a stop signal while loading: nothing new to save
            return self._stop_after(self.position.step, agreed, loading=True)
        self.recorder.enter_phase("training")
        batches = self.metrics.batches(self.batches)  # times next(), counts samples and labelled tokens
        for step in range(self.position.step + 1, cfg.steps + 1):
            t0 = time.perf_counter()
            with self.metrics.step() as s:  # a log step reads the window's device sums (one all-reduce)
                self._optimizer_step(s, batches)
            self.step_times.append(time.perf_counter() - t0)
            self.position.step = step
            self.position.batches_consumed += cfg.optim.grad_accum_steps
            if self.progress is not None:
                self.progress.completed(step)
            if self.reporter is not None:
                self.reporter.tick()
            last = step == cfg.steps
            if self.val_batches is not None and (step % cfg.validation.every == 0 or last):
                self._validate(step)
            if self.checkpointer is not None and ((cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or last):
                self._save("final" if last else "periodic")
            if (agreed := self.stop.poll()) and not last:
                return self._stop_after(step, agreed)
        return self._finish(0)

    def _optimizer_step(self, s: Step, batches: Iterator[Batch]) -> None:
        """Forward and backward over ``--grad-accum-steps`` micro-batches, clip, step.

        Each micro-batch's summed loss goes to ``s`` with its labelled tokens (token-weighted,
        kept on the device); the gradient norm too (a device tensor, read on log steps only).
        """
        accum, device = self.cfg.optim.grad_accum_steps, self.rt.device
        for _ in range(accum):
            batch = next(batches)
            loss_sum = token_loss_sum(self.model, batch, device)
            # the micro-batch's token mean, averaged over micro-batches here and over data-parallel
            # ranks by FSDP's gradient reduction: the mean over the global batch
            (loss_sum / max(1, batch.labelled_tokens) / accum).backward()
            s.loss(loss_sum, tokens=batch.labelled_tokens, reduction="sum")
        s.grad_norm(clip_grad_norm(self.params, self.cfg.optim.grad_clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()

    def _report_window(self, w: WindowReport) -> None:
        """Rank 0's log line of a closed window (``TrainingMetrics(on_window=...)``)."""
        if self.reporter is None:
            return
        # the trainer gives a loss, a grad norm and an optimizer every step, and all-reduces tokens/s
        assert w.loss is not None and w.grad_norm is not None and w.global_tokens_per_second is not None
        assert w.learning_rate is not None
        self.reporter.window(
            w.step, w.stats, w.loss, w.grad_norm, w.global_tokens_per_second, w.learning_rate, self.goodput.ratio()
        )

    def _validate(self, step: int) -> None:
        assert self.val_batches is not None  # validation runs only with --val-every, which holds batches out
        with self.metrics.phase("validating"):
            started = time.perf_counter()
            loss, perplexity = evaluate(self.model, self.val_batches, self.rt.device)
            self.metrics.validation(loss, perplexity)
        if self.reporter is not None:
            self.reporter.validation(step, loss, perplexity, time.perf_counter() - started)

    def _save(self, reason: str) -> None:
        assert self.checkpointer is not None  # saves happen only with --checkpoint-dir
        with self.metrics.phase("checkpointing"):
            path, seconds = self.checkpointer.save(
                self.model, self.optimizer, self.scheduler, self.position, self.goodput, reason
            )
            self.metrics.checkpoint_saved(seconds, step=self.position.step)
        if self.reporter is not None:
            self.reporter.checkpoint(self.position.step, str(path), seconds, reason)

    def _stop_after(self, step: int, signum: int, loading: bool = False) -> int:
        """The ranks agreed to stop after ``step`` for ``signum``: save unless that step is saved or no
        step ran (``loading``), finish."""
        saving = not loading and self.checkpointer is not None and self.checkpointer.last_saved_step != step
        if self.reporter is not None:
            self.reporter.stopping(
                step,
                signum,
                self.stop.seconds_since_request(),
                saving,
                saved=self.checkpointer is not None and not saving,
                loading=loading,
            )
        if saving:
            self._save(stopping.signal_name(signum).lower())
        return self._finish(stopping.exit_status(signum), signum)

    def _finish(self, status: int, stopped_by: int | None = None) -> int:
        """Verify weights if asked, log the summary, linger for a last scrape, shut down."""
        self.stop.close()
        digests = None
        if self.cfg.verify_weights and status == 0:
            digests = gather_from_ranks(full_weights_sha256(self.model))
            if len(set(digests)) != 1:
                status = 1
        memory = gather_from_ranks(peak_memory(self.rt.device))
        self.recorder.enter_phase("finished")
        if self.reporter is not None:
            self.reporter.finish(
                self.position.step,
                self.step_times,
                self.goodput.ratio(),
                self.phases.seconds(),
                memory,
                status,
                digests,
                stopped_by,
            )
        self.metrics.close(
            linger_seconds=0 if status in STOP_EXIT_STATUSES else None,
            sleep=self.stop.sleep,
            on_wait=None if self.reporter is None else self.reporter.lingering,
        )
        distributed.shutdown()
        return status
