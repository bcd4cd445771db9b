"""The training run: build in a fixed order, then a thin loop.

Build order (``Trainer.__init__``): process group → mesh → which checkpoint to resume → SIGTERM
handling → tokenizer → model skeleton on the meta device → metrics exporter (so a taken port
fails fast) → activation checkpointing + FSDP2 → each rank's shards allocated and filled →
optimizer and schedule → checkpoint loaded → data at the checkpoint's position → validation
batches.

The loop (``Trainer.train``): the decision to log is made before each step; loss and token
sums stay on the device and are read, with one all-reduce, on log steps only, so other steps
never synchronise host and device. After each step: validation and checkpoint when due, and the
SIGTERM vote (a CPU all-reduce on a side group, read one step later: see ``trainer.signals``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from observe.catalog import TRAINER_CUDA_LABELS, TRAINER_LABELS
from observe.errors import UserError
from observe.training.collector import DeviceMemory, TrainerMetrics, process_resident_memory_peak_bytes
from observe.training.flops import flops_per_token, peak_flops
from observe.training.phases import Goodput, PhaseClock, process_start_time
from observe.training.server import serve
from observe.training.window import LogWindow, WindowStats, is_log_step
from trainer import distributed
from trainer.checkpoint import Checkpointer, RunPosition
from trainer.data import BatchIterator, ByteTokenizer, HFTokenizer
from trainer.model import build_model, materialize
from trainer.parallelize import build_mesh, parallelize
from trainer.report import Reporter
from trainer.runspec.checkpoint_files import TrainerState, resolve_resume, resume_candidates
from trainer.runspec.config import TrainConfig
from trainer.signals import SIGTERM_EXIT_STATUS, StopRequest
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


def device_memory(device: torch.device) -> DeviceMemory | None:
    """The CUDA caching allocator's figures, or ``None`` on CPU (absent, never 0)."""
    if device.type != "cuda":
        return None
    stats = torch.cuda.memory_stats(device)
    return DeviceMemory(stats.get("allocated_bytes.all.current", 0), stats.get("reserved_bytes.all.current", 0),
                        stats.get("allocated_bytes.all.peak", 0), stats.get("num_alloc_retries", 0))


def peak_memory(device: torch.device) -> dict:
    """This process's peak RSS (bytes, the kernel's ``VmHWM``; ``None`` where unknown) and the
    CUDA allocator's peak allocated bytes (``None`` on CPU)."""
    cuda = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {"rss_bytes": process_resident_memory_peak_bytes(), "device_bytes": cuda}


def run(cfg: TrainConfig, files: list[Path]) -> int:
    """Train per ``cfg`` on ``files``; return the process exit status.

    0 on success; 143 after a SIGTERM-triggered save; 1 when ``--verify-weights`` finds ranks
    that disagree.
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
            cfg.metrics.run_id or (TrainerState.read(resume_from).run_id if resume_from else None))
        self.phases = PhaseClock("restarting" if resume_from or rt.restart_count else "loading_weights",
                                 already=time.time() - self.process_started)
        self.stop = StopRequest(cfg.checkpoint.sigterm_grace, rt.rank)
        self.stop.install()

        tokenizer = HFTokenizer(cfg.model.tokenizer) if cfg.model.tokenizer else ByteTokenizer()
        model = build_model(cfg.model)
        if tokenizer.vocab_size > model.config.vocab_size:
            raise UserError("--tokenizer", f"{tokenizer.vocab_size} tokens exceed the model's vocabulary "
                              f"of {model.config.vocab_size}", "use the tokenizer that belongs to the model")
        self.fpt = flops_per_token(model, cfg.data.seq_len)
        self.goodput = Goodput(run_started=self.process_started)
        self.metrics = self._start_exporter() if cfg.metrics.enabled else None
        self.reporter = Reporter(cfg, rt, self.run_id, self.fpt, self.mesh_shape) if rt.is_main else None

        self.model = parallelize(model, mesh, cfg.parallel)
        materialize(self.model, rt.device, cfg.model, cfg.seed)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.optim.lr, betas=(0.9, 0.95),
                                           weight_decay=cfg.optim.weight_decay, foreach=True)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(cfg.optim.warmup_steps, cfg.steps, cfg.optim.min_lr_ratio))

        self.checkpointer = (Checkpointer(cfg.checkpoint, rt.rank, rt.device, cfg.layout(files, rt.world_size),
                                          self.run_id) if cfg.checkpoint.dir else None)
        self.position = RunPosition(step=0, batches_consumed=0)
        if resume_from is not None:
            resume_from = self._resume(candidates)

        held_out = cfg.validation.fraction if cfg.validation.every else 0.0
        self.batches = BatchIterator(files, tokenizer, cfg.data.seq_len, cfg.data.batch_size, rt.rank,
                                     rt.world_size, cfg.seed, skip_batches=self.position.batches_consumed,
                                     held_out=held_out)
        self.val_batches = (validation_batches(files, tokenizer, cfg.data.seq_len, cfg.data.batch_size, rt.rank,
                                               rt.world_size, cfg.seed, held_out, cfg.validation.batches)
                            if cfg.validation.every else None)
        if resume_from is not None and self.reporter is not None:
            self.reporter.resumed(self.position.step, str(resume_from), self.load_seconds,
                                  time.time() - self.process_started)

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
                print(f"resume: skipping damaged checkpoint {'; '.join(skipped)}; resuming from "
                      f"{path.name if path else 'the start'}", file=sys.stderr, flush=True)
            box = [[str(p) for p in paths]]
        dist.broadcast_object_list(box, src=0)
        return [Path(p) for p in box[0] or []]

    def _start_exporter(self) -> TrainerMetrics:
        rt, cfg = self.rt, self.cfg
        label_names = TRAINER_CUDA_LABELS if rt.gpu_uuid else TRAINER_LABELS
        label_values = (self.run_id, str(rt.rank), str(rt.local_rank), rt.node, rt.gpu_uuid or "")  # "" cut by zip
        p = cfg.parallel
        metrics = TrainerMetrics(
            labels=dict(zip(label_names, label_values, strict=False)),
            info={"model": cfg.model.name, "sharding_strategy": p.sharding_strategy,
                  "mixed_precision": p.mixed_precision, "world_size": str(rt.world_size),
                  "device_type": rt.device.type, "backend": rt.backend,
                  "activation_checkpointing": p.activation_checkpointing,
                  "mesh": "x".join(map(str, self.mesh_shape))},
            planned_steps=cfg.steps, flops_per_token=self.fpt, peak_flops=peak_flops(rt.device_name),
            export_global=rt.is_main, phases=self.phases, goodput=self.goodput, restarts=rt.restart_count,
        )
        serve(metrics, cfg.metrics.address, cfg.metrics.port_base + rt.local_rank)
        return metrics

    def _resume(self, candidates: list[Path]) -> Path:
        """Load the first of ``candidates`` that loads (a failed load fails on every rank alike, so
        all ranks move to the next one together); return it.

        Raises:
            RuntimeError: the last candidate failed too.
        """
        assert self.checkpointer is not None  # resuming needs --checkpoint-dir (the launcher checks)
        for i, path in enumerate(candidates):
            try:
                state, self.load_seconds = self.checkpointer.load(path, self.model, self.optimizer, self.scheduler)
            except RuntimeError as exc:
                if i + 1 == len(candidates):
                    raise
                if self.rt.is_main:
                    print(f"resume: {exc}; falling back to {candidates[i + 1].name}", file=sys.stderr, flush=True)
                continue
            self._restored(state)
            return path
        raise AssertionError("no candidates")  # pragma: no cover - callers pass at least one

    def _restored(self, state: TrainerState) -> None:
        self.position = RunPosition(state.step, state.batches_consumed)
        self.goodput.run_started, self.goodput.productive_seconds = state.run_started, state.productive_seconds
        if self.metrics is not None:
            self.metrics.on_checkpoint_loaded(state.step, self.load_seconds, state.saved_at)

    # -- the loop ----------------------------------------------------------------------------

    def train(self) -> int:
        """Run the steps from the resumed position to ``--steps``; return the exit status."""
        cfg = self.cfg
        if self.stop.agree_now():  # SIGTERM while loading: nothing new to save
            return self._finish(SIGTERM_EXIT_STATUS)
        self.phases.enter("training")
        window = LogWindow(start_step=self.position.step)
        sums = torch.zeros(2, dtype=torch.float64, device=self.rt.device)  # loss, labelled tokens: on the device
        for step in range(self.position.step + 1, cfg.steps + 1):
            log_now = is_log_step(step, cfg.metrics.log_every, cfg.steps)
            t0 = time.perf_counter()
            data_wait, labelled, samples, grad_norm, lr = self._optimizer_step(sums)
            step_seconds = time.perf_counter() - t0
            self.step_times.append(step_seconds)
            self.goodput.add_step(step_seconds)
            self.position.step = step
            self.position.batches_consumed += cfg.optim.grad_accum_steps
            window.add(data_wait, labelled)
            if self.metrics is not None:
                self.metrics.on_step(step, step_seconds, data_wait, labelled, samples, lr)
            if self.reporter is not None:
                self.reporter.tick()
            if log_now:
                self._log_window(step, window.close(step), sums, grad_norm, lr)
            last = step == cfg.steps
            if self.val_batches is not None and (step % cfg.validation.every == 0 or last):
                self._validate(step)
            if self.checkpointer is not None and ((cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or last):
                self._save("final" if last else "periodic")
            if self.stop.poll() and not last:
                if self.reporter is not None:
                    self.reporter.stopping(step, self.stop.seconds_since_request())
                if self.checkpointer is not None and self.checkpointer.last_saved_step != step:
                    self._save("sigterm")
                return self._finish(SIGTERM_EXIT_STATUS)
        return self._finish(0)

    def _optimizer_step(self, sums: torch.Tensor) -> tuple[float, int, int, torch.Tensor, float]:
        """Forward and backward over ``--grad-accum-steps`` micro-batches, clip, step.

        Adds each micro-batch's summed loss and labelled tokens to the device tensor ``sums``.
        Returns host figures (data wait seconds, labelled tokens, sequences), the gradient norm
        as a device tensor (read on log steps only) and the learning rate the step used.
        """
        accum, device = self.cfg.optim.grad_accum_steps, self.rt.device
        data_wait, labelled, samples = 0.0, 0, 0
        for _ in range(accum):
            t_data = time.perf_counter()
            batch = next(self.batches)
            data_wait += time.perf_counter() - t_data
            loss_sum = token_loss_sum(self.model, batch, device)
            # the micro-batch's token mean, averaged over micro-batches here and over data-parallel
            # ranks by FSDP's gradient reduction: the mean over the global batch
            (loss_sum / max(1, batch.labelled_tokens) / accum).backward()
            sums[0] += loss_sum.detach()
            sums[1] += batch.labelled_tokens
            labelled += batch.labelled_tokens
            samples += batch.samples
        grad_norm = clip_grad_norm(self.params, self.cfg.optim.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        lr = float(self.scheduler.get_last_lr()[0])  # LambdaLR's rates are Python floats
        self.scheduler.step()
        return data_wait, labelled, samples, grad_norm, lr

    def _log_window(self, step: int, stats: WindowStats, sums: torch.Tensor, grad_norm: torch.Tensor,
                    lr: float) -> None:
        """The log step: one all-reduce of the window's sums and tokens/s, one read, then reset."""
        device = self.rt.device
        totals = torch.cat([sums, torch.tensor([stats.tokens_per_second], dtype=torch.float64, device=device)])
        dist.all_reduce(totals)
        global_loss_sum, global_labels, global_tps = totals.tolist()
        sums.zero_()
        loss = global_loss_sum / max(1.0, global_labels)
        norm = float(grad_norm)
        if self.metrics is not None:
            self.metrics.on_window(stats, loss, norm, global_tps, device_memory(device))
        if self.reporter is not None:
            self.reporter.window(step, stats, loss, norm, global_tps, lr, self.goodput.ratio())

    def _validate(self, step: int) -> None:
        self.phases.enter("validating")
        started = time.perf_counter()
        assert self.val_batches is not None  # validation runs only with --val-every, which holds batches out
        loss, perplexity = evaluate(self.model, self.val_batches, self.rt.device)
        if self.metrics is not None:
            self.metrics.on_validation(loss, perplexity)
        if self.reporter is not None:
            self.reporter.validation(step, loss, perplexity, time.perf_counter() - started)
        self.phases.enter("training")

    def _save(self, reason: str) -> None:
        self.phases.enter("checkpointing")
        assert self.checkpointer is not None  # saves happen only with --checkpoint-dir
        path, seconds = self.checkpointer.save(self.model, self.optimizer, self.scheduler, self.position,
                                               self.goodput, reason)
        if self.metrics is not None:
            self.metrics.on_checkpoint_saved(self.position.step, seconds, time.time())
        if self.reporter is not None:
            self.reporter.checkpoint(self.position.step, str(path), seconds, reason)
        self.phases.enter("training")

    def _finish(self, status: int) -> int:
        """Verify weights if asked, log the summary, linger for a last scrape, shut down."""
        self.stop.close()
        digests = None
        if self.cfg.verify_weights and status == 0:
            digests = gather_from_ranks(full_weights_sha256(self.model))
            if len(set(digests)) != 1:
                status = 1
        memory = gather_from_ranks(peak_memory(self.rt.device))
        self.phases.enter("finished")
        if self.reporter is not None:
            self.reporter.finish(self.position.step, self.step_times, self.goodput.ratio(),
                                 self.phases.seconds(), memory, status, digests)
        if self.metrics is not None and self.cfg.metrics.linger_seconds > 0 and status != SIGTERM_EXIT_STATUS:
            self.stop.sleep(self.cfg.metrics.linger_seconds)
        distributed.shutdown()
        return status
