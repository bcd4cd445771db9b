"""The training run: build in a fixed order, then a thin loop.

Build order (``Trainer.__init__``): process group → mesh → which checkpoint to resume → stop-signal
vote and grace deadline → tokenizer → model skeleton on the meta device → metrics exporter (so a taken port
fails fast) → activation checkpointing + FSDP2 → each rank's shards allocated and filled →
optimizer and schedule → checkpoint loaded → data at the checkpoint's position → validation
batches.

The loop (``Trainer.train``): the decision to log is made before each step; loss and token
sums stay on the device and are read, with one all-reduce, on log steps only, so other steps
never synchronise host and device. After each step: validation and checkpoint when due, and the
stop vote for SIGTERM/SIGINT (a CPU all-reduce on a side group, read one step later: see
``trainer.signals``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from observe import stopping
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
from trainer.runspec.checkpoint_files import TrainerState, resolve_resume
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
        resume_from = self._agreed_resume_path()
        self.run_id = distributed.resolve_run_id(
            cfg.metrics.run_id or (TrainerState.read(resume_from).run_id if resume_from else None))
        self.phases = PhaseClock("restarting" if resume_from or rt.restart_count else "loading_weights",
                                 already=time.time() - self.process_started)
        self.stop = StopRequest(cfg.checkpoint.sigterm_grace, rt.rank, checkpointing=cfg.checkpoint.dir is not None)
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
            self._resume(resume_from)

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

    def _agreed_resume_path(self) -> Path | None:
        """Rank 0 picks the checkpoint (``--resume``) and tells the others, so all load the same."""
        box = [None]
        if self.rt.is_main:
            path = resolve_resume(self.cfg.checkpoint.dir, self.cfg.checkpoint.resume)
            box = [None if path is None else str(path)]
        dist.broadcast_object_list(box, src=0)
        return None if box[0] is None else Path(box[0])

    def _start_exporter(self) -> TrainerMetrics:
        rt, cfg = self.rt, self.cfg
        label_names = TRAINER_CUDA_LABELS if rt.gpu_uuid else TRAINER_LABELS
        label_values = (self.run_id, str(rt.rank), str(rt.local_rank), rt.node, rt.gpu_uuid)
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

    def _resume(self, path: Path) -> None:
        state, self.load_seconds = self.checkpointer.load(path, self.model, self.optimizer, self.scheduler)
        self.position = RunPosition(state.step, state.batches_consumed)
        self.goodput.run_started, self.goodput.productive_seconds = state.run_started, state.productive_seconds
        if self.metrics is not None:
            self.metrics.on_checkpoint_loaded(state.step, self.load_seconds, state.saved_at)

    # -- the loop ----------------------------------------------------------------------------

    def train(self) -> int:
        """Run the steps from the resumed position to ``--steps``; return the exit status."""
        cfg = self.cfg
        if agreed := self.stop.agree_now():  # a stop signal while loading: nothing new to save
            return self._stop_after(self.position.step, agreed, loading=True)
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
            if (agreed := self.stop.poll()) and not last:
                return self._stop_after(step, agreed)
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
        lr = self.scheduler.get_last_lr()[0]
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
        loss, perplexity = evaluate(self.model, self.val_batches, self.rt.device)
        if self.metrics is not None:
            self.metrics.on_validation(loss, perplexity)
        if self.reporter is not None:
            self.reporter.validation(step, loss, perplexity, time.perf_counter() - started)
        self.phases.enter("training")

    def _save(self, reason: str) -> None:
        self.phases.enter("checkpointing")
        path, seconds = self.checkpointer.save(self.model, self.optimizer, self.scheduler, self.position,
                                               self.goodput, reason)
        if self.metrics is not None:
            self.metrics.on_checkpoint_saved(self.position.step, seconds, time.time())
        if self.reporter is not None:
            self.reporter.checkpoint(self.position.step, str(path), seconds, reason)
        self.phases.enter("training")

    def _stop_after(self, step: int, signum: int, loading: bool = False) -> int:
        """The ranks agreed to stop after ``step`` for ``signum``: save unless that step is saved or no
        step ran (``loading``), finish."""
        saving = not loading and self.checkpointer is not None and self.checkpointer.last_saved_step != step
        if self.reporter is not None:
            self.reporter.stopping(step, signum, self.stop.seconds_since_request(), saving,
                                   saved=self.checkpointer is not None and not saving, loading=loading)
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
        self.phases.enter("finished")
        if self.reporter is not None:
            self.reporter.finish(self.position.step, self.step_times, self.goodput.ratio(),
                                 self.phases.seconds(), memory, status, digests, stopped_by)
        if self.metrics is not None and self.cfg.metrics.linger_seconds > 0 and status not in STOP_EXIT_STATUSES:
            self.stop.sleep(self.cfg.metrics.linger_seconds)
        distributed.shutdown()
        return status
