"""The training run: build in a fixed order, then a thin loop.

Build order: process group → mesh → metrics exporter (so a taken port fails fast) → tokenizer
and data → model → FLOPs/token → FSDP2 → optimizer and schedule. The decision to log is made
before each step; loss and token sums stay on the device and are read, with one all-reduce,
on log steps only, so other steps never synchronise host and device.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from observe.catalog import TRAINER_CUDA_LABELS, TRAINER_LABELS
from trainer import distributed
from trainer.config import TrainConfig
from trainer.data import IGNORE_INDEX, BatchIterator, ByteTokenizer, HFTokenizer
from trainer.errors import ConfigError
from trainer.flops import flops_per_token, peak_flops
from trainer.metrics import DeviceMemory, TrainerMetrics, serve
from trainer.model import build_model
from trainer.parallelize import apply_fsdp, build_mesh
from trainer.window import LogWindow, is_log_step

log = logging.getLogger("trainer")


def lr_lambda(warmup_steps: int, total_steps: int, min_ratio: float):
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


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` for an ETA."""
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def run(cfg: TrainConfig, files: list[Path]) -> int:
    """Train per ``cfg`` on ``files``; return the process exit status (0 on success)."""
    rt = distributed.init(cfg.parallel)
    mesh = build_mesh(cfg.parallel, rt.device.type, rt.world_size, rt.local_world_size)
    run_id = distributed.resolve_run_id(cfg.metrics.run_id)

    tokenizer = HFTokenizer(cfg.model.tokenizer) if cfg.model.tokenizer else ByteTokenizer()
    model = build_model(cfg.model, cfg.seed)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise ConfigError("--tokenizer", f"{tokenizer.vocab_size} tokens exceed the model's vocabulary "
                          f"of {model.config.vocab_size}", "use the tokenizer that belongs to the model")
    fpt = flops_per_token(model, cfg.data.seq_len)

    metrics: TrainerMetrics | None = None
    if cfg.metrics.enabled:
        label_names = TRAINER_CUDA_LABELS if rt.gpu_uuid else TRAINER_LABELS
        label_values = (run_id, str(rt.rank), str(rt.local_rank), rt.node, rt.gpu_uuid)
        metrics = TrainerMetrics(
            labels=dict(zip(label_names, label_values)),
            info={"model": cfg.model.name, "sharding_strategy": cfg.parallel.sharding_strategy,
                  "mixed_precision": cfg.parallel.mixed_precision, "world_size": str(rt.world_size),
                  "device_type": rt.device.type, "backend": rt.backend},
            planned_steps=cfg.steps, flops_per_token=fpt, peak_flops=peak_flops(rt.device_name),
            export_global=rt.is_main,
        )
        serve(metrics, cfg.metrics.address, cfg.metrics.port_base + rt.local_rank)

    model = apply_fsdp(model, mesh, cfg.parallel)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.optim.lr, betas=(0.9, 0.95),
                                  weight_decay=cfg.optim.weight_decay, foreach=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(cfg.optim.warmup_steps, cfg.steps, cfg.optim.min_lr_ratio))
    batches = BatchIterator(files, tokenizer, cfg.data.seq_len, cfg.data.batch_size,
                            rt.rank, rt.world_size, cfg.seed)

    reporter = Reporter(cfg, rt, run_id, fpt) if rt.is_main else None
    window = LogWindow(start_step=0)
    loss_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    label_sum = torch.zeros((), dtype=torch.float64, device=rt.device)
    step_times: list[float] = []
    for step in range(1, cfg.steps + 1):
        log_now = is_log_step(step, cfg.metrics.log_every, cfg.steps)
        t0 = time.perf_counter()
        batch = next(batches)
        data_wait = time.perf_counter() - t0
        inputs = batch.input_ids.to(rt.device, non_blocking=True)
        targets = batch.targets.to(rt.device, non_blocking=True)
        logits = model(input_ids=inputs).logits
        step_loss_sum = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(),
                                        ignore_index=IGNORE_INDEX, reduction="sum")
        (step_loss_sum / max(1, batch.labelled_tokens)).backward()
        grad_norm = clip_grad_norm(params, cfg.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        loss_sum += step_loss_sum.detach()
        label_sum += batch.labelled_tokens
        step_seconds = time.perf_counter() - t0
        step_times.append(step_seconds)
        window.add(data_wait, batch.labelled_tokens)
        if metrics is not None:
            metrics.on_step(step, step_seconds, data_wait, batch.labelled_tokens, batch.samples, lr)
        if reporter is not None:
            reporter.tick()
        if not log_now:
            continue
        stats = window.close(step)
        totals = torch.stack([loss_sum, label_sum, torch.tensor(stats.tokens_per_second,
                                                                dtype=torch.float64, device=rt.device)])
        dist.all_reduce(totals)
        global_loss_sum, global_labels, global_tps = totals.tolist()
        loss = global_loss_sum / max(1.0, global_labels)
        loss_sum.zero_()
        label_sum.zero_()
        norm = float(grad_norm)
        if metrics is not None:
            metrics.on_window(stats, loss, norm, global_tps, device_memory(rt.device))
        if reporter is not None:
            reporter.window(step, stats, loss, norm, global_tps, lr)
    if reporter is not None:
        reporter.finish(step_times)
    if metrics is not None and cfg.metrics.linger_seconds > 0:
        time.sleep(cfg.metrics.linger_seconds)
    distributed.shutdown()
    return 0


class Reporter:
    """Rank 0's log: one line per window, an optional progress bar, and the JSON log."""

    def __init__(self, cfg: TrainConfig, rt: distributed.Runtime, run_id: str, fpt: int) -> None:
        self.cfg, self.rt, self.run_id, self.fpt = cfg, rt, run_id, fpt
        self.peak = peak_flops(rt.device_name)
        self.started = time.time()
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=cfg.steps, unit="step", dynamic_ncols=True, leave=False)
        self.json = open(cfg.metrics.log_json, "a") if cfg.metrics.log_json else None
        self._emit({"event": "start", "run_id": run_id, "world_size": rt.world_size, "model": cfg.model.name,
                    "flops_per_token": fpt, "device": str(rt.device), "steps": cfg.steps})
        self._print(f"run {run_id}: {cfg.model.name}, {rt.world_size} rank(s) on {rt.device.type}/{rt.backend}, "
                    f"{cfg.parallel.sharding_strategy}, {cfg.parallel.mixed_precision}, {cfg.steps} steps")

    def tick(self) -> None:
        """Advance the progress bar by one step."""
        if self.bar is not None:
            self.bar.update(1)

    def window(self, step: int, stats, loss: float, grad_norm: float, global_tps: float, lr: float) -> None:
        """Log one closed window."""
        per_device = global_tps / self.rt.world_size
        mfu = None if self.peak is None else self.fpt * stats.tokens_per_second / self.peak
        eta = (self.cfg.steps - step) * stats.step_seconds
        self._print(f"step {step:>6}/{self.cfg.steps} | loss {loss:7.4f} | tokens/s {global_tps:,.0f} "
                    f"({per_device:,.0f}/rank) | MFU {'n/a' if mfu is None else f'{mfu:.1%}'} | "
                    f"step {stats.step_seconds * 1000:.1f} ms | data {stats.data_wait_ratio:.1%} | "
                    f"ETA {format_duration(eta)}")
        self._emit({"event": "window", "step": step, "window_steps": stats.steps, "loss": loss,
                    "global_tokens_per_second": global_tps, "tokens_per_second": stats.tokens_per_second,
                    "mfu": mfu, "step_seconds": stats.step_seconds, "data_wait_ratio": stats.data_wait_ratio,
                    "grad_norm": grad_norm, "lr": lr, "time": time.time()})

    def finish(self, step_times: list[float]) -> None:
        """Log the run's summary and close outputs."""
        if self.bar is not None:
            self.bar.close()
        p50, p95 = np.percentile(step_times, [50, 95]).tolist() if step_times else (None, None)
        self._emit({"event": "end", "steps": len(step_times), "wall_seconds": time.time() - self.started,
                    "step_seconds_p50": p50, "step_seconds_p95": p95})
        self._print(f"done: {len(step_times)} steps in {time.time() - self.started:.1f} s")
        if self.json is not None:
            self.json.close()

    def _print(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def _emit(self, record: dict) -> None:
        if self.json is not None:
            self.json.write(json.dumps(record) + "\n")
            self.json.flush()
