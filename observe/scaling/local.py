"""Local mode: the same short job at several world sizes on this machine, one after another.

Each size is a real ``torchrun`` of the trainer (gloo on CPU, NCCL on a GPU host). While it
runs, rank 0's ``/metrics`` is polled over HTTP; once rank 0 is past the warm-up every rank is
scraped (the start snapshot), and once every rank has finished its last step every rank is
scraped again (the end snapshot, served while the ranks linger). The trainer logs every step
(``--log-every 1``), so rank 0's JSON log gives the exact per-step times for p50/p95.
Figures come from ``observe.scaling.figures.measure``; nothing is timed from outside.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from observe import promtext
from observe.catalog import TRAINER_PORT_BASE
from observe.flags import flag
from observe.promtext import Sample
from observe.scaling.figures import SizeFigures, measure
from observe.scaling.snapshot import RankSnapshot, rank_snapshots

if TYPE_CHECKING:
    from trainer.runspec.config import TrainConfig

#: ``--help`` sections of the plan's flags.
LOCAL_GROUP = "local mode (default): run the job here at each world size"
BOTH_GROUP = "both modes"


class RunFailed(RuntimeError):
    """A local run did not produce figures (it exited early, failed, or timed out)."""


def world_sizes(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` (commas or spaces) → ``(1, 2, 4)``, sorted, without repeats.

    Raises:
        argparse.ArgumentTypeError: not a list of positive integers.
    """
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of whole numbers of ranks; pass e.g. --world-sizes 1,2,4"
        )
    sizes = sorted({int(p) for p in parts})
    if sizes[0] < 1:
        raise argparse.ArgumentTypeError("0 is not a number of ranks; pass sizes of 1 or more, e.g. 1,2,4")
    return tuple(sizes)


def _positive_int(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number; pass {name} 1 or more")
        return int(text)

    return parse


def _count(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of steps; pass 0 or more")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds; pass e.g. 600")
    return value


@dataclass(frozen=True)
class LocalPlan:
    """What local mode runs.

    Attributes:
        world_sizes: ranks per run, ascending, each >= 1.
        strong: same global batch at every size (strong scaling) instead of the same per-rank
            batch (weak scaling).
        steps: optimizer steps per run.
        warmup_steps: steps excluded at the start of every run (must be < ``steps``).
        batch_size: sequences per rank at the smallest size; in strong scaling the global
            batch ``batch_size × world_sizes[0]`` is split evenly over the ranks.
        seq_len: tokens per sequence.
        preset: the trainer's model preset.
        metrics_port: base port of the ranks' ``/metrics`` (rank r serves on base + r).
        threads_per_rank: ``OMP_NUM_THREADS`` of each rank, the same at every size.
        linger_seconds: how long ranks keep serving after their last step.
        timeout_seconds: the longest one run may take.
        trainer_args: further trainer flags, appended as given.
    """

    world_sizes: tuple[int, ...] = field(
        default=(1, 2, 4),
        metadata=flag("--world-sizes", "ranks per run", metavar="N,N,...", parse=world_sizes, group=LOCAL_GROUP),
    )
    strong: bool = field(
        default=False,
        metadata=flag(
            "--strong",
            "strong scaling: keep the global batch (--batch-size x smallest size) and split it; default "
            "is weak scaling: --batch-size sequences per rank at every size",
            group=LOCAL_GROUP,
        ),
    )
    steps: int = field(
        default=40,
        metadata=flag("--steps", "steps per run", metavar="N", parse=_positive_int("--steps"), group=LOCAL_GROUP),
    )
    warmup_steps: int = field(
        default=5,
        metadata=flag(
            "--warmup-steps",
            "steps left out of the figures at the start of each run; not the trainer's "
            "learning-rate warm-up, which goes after -- like any trainer flag",
            metavar="N",
            parse=_count,
            group=BOTH_GROUP,
        ),
    )
    batch_size: int = field(
        default=8,
        metadata=flag(
            "--batch-size",
            "sequences per rank at the smallest size",
            metavar="N",
            parse=_positive_int("--batch-size"),
            group=LOCAL_GROUP,
        ),
    )
    seq_len: int = field(
        default=256,
        metadata=flag(
            "--seq-len", "tokens per sequence", metavar="N", parse=_positive_int("--seq-len"), group=LOCAL_GROUP
        ),
    )
    preset: str = field(
        default="tiny",
        metadata=flag("--preset", "model preset; --model PATH etc. go after --", metavar="NAME", group=LOCAL_GROUP),
    )
    metrics_port: int = field(
        default=TRAINER_PORT_BASE,
        metadata=flag(
            "--metrics-port",
            "base port of the ranks' /metrics",
            metavar="PORT",
            parse=_positive_int("--metrics-port"),
            group=LOCAL_GROUP,
        ),
    )
    threads_per_rank: int = field(
        default=1,
        metadata=flag(
            "--threads-per-rank",
            "OMP_NUM_THREADS of every rank at every size",
            metavar="N",
            parse=_positive_int("--threads-per-rank"),
            env="OMP_NUM_THREADS",
            default_text="$OMP_NUM_THREADS or 1",
            group=LOCAL_GROUP,
        ),
    )
    linger_seconds: float = 3.0
    timeout_seconds: float = field(
        default=600.0,
        metadata=flag("--timeout", "longest one run may take", metavar="SECONDS", parse=_seconds, group=LOCAL_GROUP),
    )
    trainer_args: tuple[str, ...] = ()

    def per_rank_batch(self, world_size: int) -> int:
        """Sequences per rank at ``world_size``.

        Raises:
            UserError: strong scaling whose global batch does not split evenly.
        """
        from observe.errors import UserError

        if not self.strong:
            return self.batch_size
        global_batch = self.batch_size * self.world_sizes[0]
        if global_batch % world_size:
            raise UserError(
                "--batch-size",
                f"--strong keeps a global batch of {global_batch} sequences "
                f"({self.batch_size} x {self.world_sizes[0]} ranks), which does not split "
                f"evenly over {world_size} ranks",
                "choose a --batch-size that makes it divisible by every world size",
            )
        return global_batch // world_size

    def trainer_config(self, world_size: int, run_id: str, log_json: Path) -> TrainConfig:
        """The trainer's settings for the run at ``world_size``: the plan's, then ``trainer_args``
        on top (as the trainer reads a command line: the later flag wins).

        Raises:
            UserError: a mistake in ``trainer_args`` or in the strong-scaling batch.
        """
        from observe.flags import parse_flags
        from trainer.runspec.config import (
            DataConfig,
            MetricsConfig,
            ModelConfig,
            TrainConfig,
            build_parser,
            config_from_values,
        )

        planned = TrainConfig(
            model=ModelConfig(preset=self.preset),
            steps=self.steps,
            data=DataConfig(seq_len=self.seq_len, batch_size=self.per_rank_batch(world_size)),
            metrics=MetricsConfig(
                enabled=True,
                log_every=1,
                log_json=str(log_json),
                run_id=run_id,
                address="127.0.0.1",
                port_base=self.metrics_port,
                linger_seconds=self.linger_seconds,
            ),
        )
        given = parse_flags(build_parser("fsdp-observe scaling --"), list(self.trainer_args))
        return config_from_values(given, base=planned)


def check(plan: LocalPlan) -> None:
    """Validate the plan and every size's trainer configuration before anything runs.

    Raises:
        UserError: the first problem (flag, data, port), naming the flag and the fix.
    """
    from observe.errors import UserError
    from trainer.runspec.launch import prepare

    if plan.warmup_steps >= plan.steps:
        raise UserError(
            "--warmup-steps",
            f"{plan.warmup_steps} leaves none of the {plan.steps} steps to measure",
            "pass fewer warm-up steps or more --steps",
        )
    configs = {n: plan.trainer_config(n, "check", Path(os.devnull)) for n in plan.world_sizes}  # batches first
    for n, cfg in configs.items():
        prepare(cfg, n)


def scrape(client: httpx.Client, url: str) -> list[Sample] | None:
    """One rank's ``/metrics`` as samples, or ``None`` when it does not answer (yet)."""
    try:
        return promtext.parse(client.get(url).raise_for_status().text)
    except (httpx.HTTPError, ValueError):
        return None


def run_all(plan: LocalPlan, out: Path, say: Callable[[str], None] = print) -> list[SizeFigures]:
    """Run every world size of ``plan`` in turn; return their figures.

    Run logs go to ``out/runs/n<N>/trainer.log`` and ``trainer.jsonl``.

    Raises:
        RunFailed: a run failed, ended before it could be measured, or timed out.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return [run_size(plan, n, f"scaling-{stamp}-n{n}", out / "runs" / f"n{n}", say) for n in plan.world_sizes]


def run_size(
    plan: LocalPlan, world_size: int, run_id: str, run_dir: Path, say: Callable[[str], None] = print
) -> SizeFigures:
    """Run the job at ``world_size`` ranks and measure it from its own metrics.

    Raises:
        RunFailed: as ``run_all``.
    """
    from trainer.runspec.launch import torchrun_command, torchrun_env

    run_dir.mkdir(parents=True, exist_ok=True)
    log_path, log_json = run_dir / "trainer.log", run_dir / "trainer.jsonl"
    log_json.unlink(missing_ok=True)
    env = torchrun_env(world_size)
    env["OMP_NUM_THREADS"] = str(plan.threads_per_rank)
    urls = [f"http://127.0.0.1:{plan.metrics_port + r}/metrics" for r in range(world_size)]
    batch = plan.per_rank_batch(world_size)
    say(
        f"world size {world_size}: {plan.steps} steps, {batch} sequence{'s' if batch != 1 else ''} per rank "
        f"(run {run_id}, log {log_path})"
    )
    deadline = time.monotonic() + plan.timeout_seconds
    with open(log_path, "w") as log, httpx.Client(timeout=2.0) as client:
        proc = subprocess.Popen(
            torchrun_command(plan.trainer_config(world_size, run_id, log_json), world_size),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            watch = _Watch(client, urls, proc, deadline, log_path)
            start = watch.until(lambda s: s.step >= plan.warmup_steps, interval=0.1)
            end = watch.until(lambda s: s.planned_steps is not None and s.step >= s.planned_steps, interval=0.25)
            status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise RunFailed(f"world size {world_size}: no exit within --timeout; see {log_path}") from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
    if status != 0:
        raise RunFailed(f"world size {world_size}: the trainer exited with status {status}; see {log_path}")
    exact = per_step_seconds(log_json, int(start[0].step), int(end[0].step))
    figures = measure(run_id, start, end, exact)
    say(f"  steps {figures.step_from + 1}-{figures.step_to}: {figures.global_tokens_per_second:,.0f} tokens/s")
    return figures


def per_step_seconds(log_json: Path, step_from: int, step_to: int) -> list[float] | None:
    """Rank 0's per-step wall times for steps ``step_from+1 .. step_to`` from its JSON log.

    Returns ``None`` unless every one of those steps has a one-step window (``--log-every 1``).
    """
    times = {}
    if log_json.exists():
        for line in log_json.read_text().splitlines():
            record = json.loads(line)
            if record.get("event") == "window" and record.get("window_steps") == 1:
                times[record["step"]] = record["step_seconds"]
    wanted = range(step_from + 1, step_to + 1)
    if not wanted or any(step not in times for step in wanted):
        return None
    return [times[step] for step in wanted]


@dataclass
class _Watch:
    """Polls rank 0 until a condition holds, then scrapes every rank (until each one holds it)."""

    client: httpx.Client
    urls: list[str]
    proc: subprocess.Popen
    deadline: float
    log_path: Path

    def until(self, condition: Callable[[RankSnapshot], bool], interval: float) -> dict[int, RankSnapshot]:
        """Snapshots of every rank, each taken once ``condition`` holds for that rank.

        Only rank 0 is polled (every ``interval`` seconds) until it meets the condition, so the
        scrapes cost the run little; then each rank is scraped in turn.
        """
        found = {0: self._wait(0, condition, interval)}
        for rank in range(1, len(self.urls)):
            found[rank] = self._wait(rank, condition, interval)
        return found

    def _wait(self, rank: int, condition: Callable[[RankSnapshot], bool], interval: float) -> RankSnapshot:
        while True:
            samples = scrape(self.client, self.urls[rank])
            snapshot = rank_snapshots(samples).get(rank) if samples else None
            if snapshot is not None and condition(snapshot):
                return snapshot
            if self.proc.poll() is not None:
                raise RunFailed(
                    f"the run ended (status {self.proc.returncode}) before rank {rank} could be "
                    f"measured; see {self.log_path}"
                )
            if time.monotonic() > self.deadline:
                raise RunFailed(f"rank {rank} was not measured within --timeout; see {self.log_path}")
            time.sleep(interval)
