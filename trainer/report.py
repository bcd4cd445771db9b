"""Rank 0's log: one line per event, an optional progress bar, and the JSON log (``--log-json``).

JSON records, one object per line, each with an ``event``: ``start``, ``resume``, ``window``
(one per log window), ``validation``, ``checkpoint``, ``stop`` (the ranks agreed to stop on
SIGTERM or SIGINT) and ``end`` (with ``exit_status`` and ``stopped_by``, the signal's name or
``null``). A restarted run
appends to the same file, so the file tells the run's whole story, attempt by attempt.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from observe import stopping
from observe.training.flops import peak_flops
from observe.training.window import WindowStats
from trainer import distributed
from trainer.runspec.config import DEFAULT_LINGER_SECONDS, TrainConfig


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` for an ETA."""
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _percent(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.1%}"


class Reporter:
    """Rank 0's log of the run.

    Args:
        cfg: the run's settings.
        rt: rank 0's runtime.
        run_id: the run's id.
        fpt: model FLOPs per token.
        mesh_shape: the device mesh's shape.
    """

    def __init__(
        self, cfg: TrainConfig, rt: distributed.Runtime, run_id: str, fpt: int, mesh_shape: tuple[int, ...]
    ) -> None:
        self.cfg, self.rt, self.run_id, self.fpt = cfg, rt, run_id, fpt
        self.peak = peak_flops(rt.device_name)
        self.started = time.time()
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=cfg.steps, unit="step", dynamic_ncols=True, leave=False)
        self.json = open(cfg.metrics.log_json, "a") if cfg.metrics.log_json else None
        p = cfg.parallel
        self._emit(
            {
                "event": "start",
                "run_id": run_id,
                "world_size": rt.world_size,
                "model": cfg.model.name,
                "flops_per_token": fpt,
                "device": str(rt.device),
                "steps": cfg.steps,
                "sharding_strategy": p.sharding_strategy,
                "mesh": list(mesh_shape),
                "mixed_precision": p.mixed_precision,
                "activation_checkpointing": p.activation_checkpointing,
                "grad_accum_steps": cfg.optim.grad_accum_steps,
                "restart": rt.restart_count,
                "time": self.started,
            }
        )
        attempt = f", restart {rt.restart_count}" if rt.restart_count else ""
        self._print(
            f"run {run_id}: {cfg.model.name}, {rt.world_size} rank(s) on {rt.device.type}/{rt.backend}, "
            f"{p.sharding_strategy} mesh {'x'.join(map(str, mesh_shape))}, {p.mixed_precision}, "
            f"activation checkpointing {p.activation_checkpointing}, "
            f"grad accumulation {cfg.optim.grad_accum_steps}, {cfg.steps} steps{attempt}"
        )

    def tick(self) -> None:
        """Advance the progress bar by one step."""
        if self.bar is not None:
            self.bar.update(1)

    def resumed(self, step: int, path: str, load_seconds: float, startup_seconds: float) -> None:
        """Log a resume from the checkpoint of ``step``."""
        if self.bar is not None:
            self.bar.update(step)
        self._print(
            f"resumed from {path} at step {step}: checkpoint loaded in {load_seconds:.2f} s, "
            f"{startup_seconds:.1f} s since start"
        )
        self._emit(
            {
                "event": "resume",
                "step": step,
                "path": path,
                "load_seconds": load_seconds,
                "restart": self.rt.restart_count,
                "startup_seconds": startup_seconds,
                "time": time.time(),
            }
        )

    def window(
        self,
        step: int,
        stats: WindowStats,
        loss: float,
        grad_norm: float,
        global_tps: float,
        lr: float,
        goodput: float | None,
    ) -> None:
        """Log one closed window."""
        per_device = global_tps / self.rt.world_size
        mfu = None if self.peak is None else self.fpt * (stats.tokens_per_second or 0.0) / self.peak
        steady = stats.steady_step_seconds  # the process's first step (warm-up) left out
        eta = "n/a" if steady is None else format_duration((self.cfg.steps - step) * steady)
        self._print(
            f"step {step:>6}/{self.cfg.steps} | loss {loss:7.4f} | tokens/s {global_tps:,.0f} "
            f"({per_device:,.0f}/rank) | MFU {_percent(mfu)} | "
            f"step {stats.step_seconds * 1000:.1f} ms | data {_percent(stats.data_wait_ratio)} | "
            f"goodput {_percent(goodput)} | ETA {eta}"
        )
        self._emit(
            {
                "event": "window",
                "step": step,
                "window_steps": stats.steps,
                "loss": loss,
                "global_tokens_per_second": global_tps,
                "tokens_per_second": stats.tokens_per_second,
                "mfu": mfu,
                "step_seconds": stats.step_seconds,
                "data_wait_ratio": stats.data_wait_ratio,
                "grad_norm": grad_norm,
                "lr": lr,
                "goodput": goodput,
                "time": time.time(),
            }
        )

    def validation(self, step: int, loss: float, perplexity: float, seconds: float) -> None:
        """Log a held-out evaluation."""
        self._print(f"validation at step {step}: loss {loss:.4f} | perplexity {perplexity:,.2f} | {seconds:.2f} s")
        self._emit(
            {
                "event": "validation",
                "step": step,
                "loss": loss,
                "perplexity": perplexity,
                "seconds": seconds,
                "time": time.time(),
            }
        )

    def checkpoint(self, step: int, path: str, seconds: float, reason: str) -> None:
        """Log a completed checkpoint save."""
        self._print(f"checkpoint ({reason}) of step {step} saved in {seconds:.2f} s: {path}")
        self._emit(
            {
                "event": "checkpoint",
                "step": step,
                "path": path,
                "seconds": seconds,
                "reason": reason,
                "time": time.time(),
            }
        )

    def stopping(
        self,
        step: int,
        signum: int,
        since_signal: float | None,
        saving: bool,
        saved: bool = False,
        loading: bool = False,
    ) -> None:
        """Log that the ranks agreed to stop after ``step`` because of signal ``signum``.

        Args:
            saving: a checkpoint of ``step`` is about to be saved.
            saved: a checkpoint of ``step`` exists already (``saving`` is then False).
            loading: the signal came while the ranks were loading: no step of this attempt ran.
        """
        name = stopping.signal_name(signum)
        waited = "" if since_signal is None else f" ({since_signal:.2f} s after the signal)"
        if loading:
            self._print(f"{name}: all ranks stop before their first step{waited}; nothing new to save; exiting")
        else:
            then = (
                "saving a checkpoint and exiting"
                if saving
                else f"step {step} is saved already; exiting"
                if saved
                else "exiting (no --checkpoint-dir: nothing is saved)"
            )
            self._print(f"{name}: all ranks stop after step {step}{waited}; {then}")
        self._emit(
            {
                "event": "stop",
                "signal": name,
                "step": step,
                "since_signal_seconds": since_signal,
                "saving": saving,
                "loading": loading,
                "time": time.time(),
            }
        )

    def finish(
        self,
        step: int,
        step_times: list[float],
        goodput: float | None,
        phase_seconds: dict[str, float],
        peak_memory: list[dict],
        exit_status: int,
        weights_sha256: list[str] | None = None,
        stopped_by: int | None = None,
    ) -> None:
        """Log the summary of this process's part of the run and close outputs.

        Args:
            step: the step the run reached.
            step_times: wall time of every step this process ran.
            goodput: the run's goodput ratio at the end.
            phase_seconds: this process's seconds per phase.
            peak_memory: per rank, ``{"rss_bytes": peak RSS or None, "device_bytes": CUDA peak or None}``.
            exit_status: the status the process exits with.
            weights_sha256: per-rank digests of the full weights (``--verify-weights``).
            stopped_by: the signal the ranks agreed to stop for (``None``: the run was not stopped).
        """
        if self.bar is not None:
            self.bar.close()
        p50, p95 = np.percentile(step_times, [50, 95]).tolist() if step_times else (None, None)
        wall = time.time() - self.started
        record = {
            "event": "end",
            "step": step,
            "steps": len(step_times),
            "wall_seconds": wall,
            "step_seconds_p50": p50,
            "step_seconds_p95": p95,
            "goodput": goodput,
            "phase_seconds": phase_seconds,
            "restarts": self.rt.restart_count,
            "peak_rss_bytes": [m["rss_bytes"] for m in peak_memory],
            "device_peak_bytes": [m["device_bytes"] for m in peak_memory],
            "exit_status": exit_status,
            "stopped_by": None if stopped_by is None else stopping.signal_name(stopped_by),
        }
        if weights_sha256 is not None:
            record["weights_sha256"] = weights_sha256
        self._emit(record)
        rss = [m["rss_bytes"] for m in peak_memory if m["rss_bytes"] is not None]
        device = [m["device_bytes"] for m in peak_memory if m["device_bytes"] is not None]
        parts = []
        if rss:
            parts.append(f"peak RSS {max(rss) / 2**20:,.0f} MiB/rank")
        if device:
            parts.append(f"device peak {max(device) / 2**30:.2f} GiB/rank")
        memory = ", ".join(parts) or "peak memory n/a"
        how = "done" if stopped_by is None else f"stopped by {stopping.signal_name(stopped_by)}"
        self._print(
            f"{how}: step {step}, {len(step_times)} steps in {wall:.1f} s | goodput {_percent(goodput)} | "
            f"restarts {self.rt.restart_count} | {memory} | exit status {exit_status}"
        )
        if weights_sha256 is not None:
            same = len(set(weights_sha256)) == 1
            self._print(
                f"weights: {'identical on all' if same else 'DIFFER across'} {len(weights_sha256)} ranks "
                f"(sha256 {', '.join(sorted({d[:12] for d in weights_sha256}))})"
            )
        if self.json is not None:
            self.json.close()

    def lingering(self, scrapers: int) -> None:
        """Say that rank 0 keeps serving /metrics for a final scrape (``scrapers`` waited for; 0: a
        fixed ``--metrics-linger``)."""
        linger = self.cfg.metrics.linger_seconds
        if scrapers:
            who = "its scraper has" if scrapers == 1 else f"its {scrapers} scrapers have"
            self._print(
                f"serving /metrics until {who} scraped the end once more (at most "
                f"{DEFAULT_LINGER_SECONDS:g} s; --metrics-linger 0 skips this)"
            )
        else:
            self._print(f"serving /metrics for {linger or 0:g} s more (--metrics-linger)")

    def _print(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def _emit(self, record: dict) -> None:
        if self.json is not None:
            self.json.write(json.dumps(record) + "\n")
            self.json.flush()
