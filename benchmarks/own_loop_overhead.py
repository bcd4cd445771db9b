"""What instrumenting the user's own training costs: paired runs with and without, and a sync probe.

Two workloads, each a real two-rank CPU run (torchrun, gloo) of a tiny Llama: a hand-written FSDP2
loop (``fully_shard``, gradient accumulation 2, ``clip_grad_norm_``) and a Hugging Face Trainer
(DDP). Each runs in pairs, once with zero-code instrumentation (``FSDP_OBSERVE_INSTRUMENT=1``,
both ranks scraped once a second as a busy Prometheus would) and once without, the order
alternating ABBA so drift cancels. The figure is the median over pairs of (median step time with
/ median step time without), per workload; target <= 1.01. Step times come from the workload
itself (a timestamp per optimizer step, the same code in both runs), warm-up steps dropped.

A micro-measurement times the hooks' own per-step path directly (a batch, a backward, a clip,
the step hooks), the figure least disturbed by a busy machine. The sync probe needs no GPU: it
counts host reads (``item``, ``tolist``, ``float`` ...) per step of the device values handed to
``TrainingMetrics`` (``tests.support.sync_probe.SyncProbe`` tensors) and those the injector's
hooks add to a loop (``HostReads``, with the hooks minus without): zero on steps that are not
log steps is the claim.

    python -m benchmarks.own_loop_overhead [--pairs 4] [--steps 120] [--out FILE]

Prints a table and writes JSON to ``--out`` (default: a scratch folder, never benchmarks/results).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.report_table import print_and_write
from benchmarks.trainer_overhead import scrape_loop  # both ranks scraped once a second, as a busy Prometheus would

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "e2e" / "scripts"
WARMUP_STEPS = 5


# -- the workloads (run by torchrun: this file with --worker) ----------------------------------------


def worker(kind: str, steps: int, record: str, model_dir: str) -> None:
    """One rank of a workload; writes its optimizer-step timestamps (rank 0). Its ``PYTHONPATH`` holds
    ``SCRIPTS`` (``run_once``), as the e2e tests' own scripts find their ``tiny_llama`` beside them."""
    import tiny_llama  # the e2e scripts' tiny Llama and data
    import torch
    import torch.distributed as dist

    stamps: list[float] = []
    if kind == "loop":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.utils.data import DataLoader, DistributedSampler

        dist.init_process_group("gloo")
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        model = tiny_llama.model()
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = tiny_llama.sequences(steps * 2 * 4 * dist.get_world_size())
        loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, shuffle=False))
        for i, batch in enumerate(loader):
            (model(**batch).loss / 2).backward()
            if (i + 1) % 2 == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
                stamps.append(time.perf_counter())
        dist.barrier()
    else:
        from transformers import LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

        class Stamps(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
                stamps.append(time.perf_counter())

        world = int(os.environ.get("WORLD_SIZE", "1"))
        args = TrainingArguments(
            output_dir=tempfile.mkdtemp(),
            max_steps=steps,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            logging_steps=10,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            seed=0,
            disable_tqdm=True,
        )
        trainer = Trainer(
            model=LlamaForCausalLM.from_pretrained(model_dir),
            args=args,
            train_dataset=tiny_llama.sequences(steps * 2 * 4 * world),
            callbacks=[Stamps()],
        )
        trainer.train()
    if int(os.environ.get("RANK", "0")) == 0:
        Path(record).write_text(json.dumps(stamps))


# -- the pairs ----------------------------------------------------------------------------------


def median_step(record: Path) -> float:
    """Median seconds between optimizer steps after the warm-up."""
    stamps = json.loads(record.read_text())[WARMUP_STEPS:]
    return statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False))


def run_once(kind: str, instrumented: bool, steps: int, folder: Path, model_dir: Path) -> float:
    """One two-rank run; rank 0's median step seconds."""
    from observe.ports import free_port_block

    base = free_port_block(2)
    record = folder / f"{kind}-{instrumented}-{time.monotonic_ns()}.json"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "FSDP_OBSERVE_PORT_BASE": str(base),
        "FSDP_OBSERVE_ADDRESS": "127.0.0.1",
        "FSDP_OBSERVE_LINGER_SECONDS": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SCRIPTS), os.environ.get("PYTHONPATH")])),
    }
    env.pop("FSDP_OBSERVE_INSTRUMENT", None)
    if instrumented:
        env["FSDP_OBSERVE_INSTRUMENT"] = "1"
    stop = threading.Event()
    scraper = threading.Thread(target=scrape_loop, args=(base, stop), daemon=True)
    if instrumented:
        scraper.start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node=2",
                "-m",
                "benchmarks.own_loop_overhead",
                "--worker",
                kind,
                "--steps",
                str(steps),
                "--record",
                str(record),
                "--model-dir",
                str(model_dir),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        stop.set()
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.splitlines()[-15:])
        raise SystemExit(
            f"the {kind} run ({'with' if instrumented else 'without'} metrics) exited "
            f"{proc.returncode}; its last lines:\n{tail}"
        )
    return median_step(record)


# -- the sync probe -------------------------------------------------------------------------------


def probe_reads(steps: int = 20, log_every: int = 5) -> dict[str, list[int]]:
    """Host reads per step: of the device values handed to the API (``SyncProbe``), and added by the
    injector's hooks to a loop (``HostReads`` with the hooks, minus the same loop before them)."""
    import torch

    from observe.ports import free_port
    from observe.training import TrainingMetrics, session
    from observe.training.inject import hooks
    from tests.support.sync_probe import HostReads, SyncProbe, probe

    os.environ.update(FSDP_OBSERVE_PORT_BASE=str(free_port()), FSDP_OBSERVE_ADDRESS="127.0.0.1")
    out: dict[str, list[int]] = {"api": [], "auto": []}
    m = TrainingMetrics(planned_steps=steps, log_every=log_every, serve=False)
    for step in range(steps):
        before = SyncProbe.total()
        with m.step() as s:
            s.loss(probe(2.0), tokens=probe(64.0))
            s.grad_norm(probe(1.0 + step))
        out["api"].append(SyncProbe.total() - before)
    m.close(linger_seconds=0)

    os.environ["FSDP_OBSERVE_LOG_EVERY"] = str(log_every)
    layer = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = torch.ones(4, 8)

    def one_step() -> int:
        with HostReads() as reads:  # every host read in the step, torch's own included
            layer(x).mean().backward()
            torch.nn.utils.clip_grad_norm_(layer.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
        return reads.total()

    plain = [one_step() for _ in range(steps)]  # torch's own reads (clip_grad_norm_'s .to(device))
    hooks.install(torch)
    hooked = [one_step() for _ in range(steps)]
    out["auto"] = [h - p for h, p in zip(hooked, plain, strict=True)]  # what the hooks added
    current = session.current()
    if current is not None:
        current.close(linger_seconds=0)
    return out


def hook_seconds_per_step(steps: int = 20_000) -> float:
    """Seconds the injector's hooks add to one optimizer step, called directly (after
    ``probe_reads`` installed them): a batch, a backward, a clip, the step's pre- and post-hooks,
    log windows included (median of 5 repeats)."""
    import torch

    from observe.training import session
    from observe.training.inject.hooks import STATE

    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    batch = {"input_ids": torch.zeros(4, 32, dtype=torch.long), "labels": torch.zeros(4, 32, dtype=torch.long)}
    loss, norm = torch.tensor(2.0), torch.tensor(1.0)

    def block() -> float:
        started = time.perf_counter()
        for _ in range(steps):
            now = time.perf_counter()
            STATE.on_batch(batch, now, now)
            STATE.on_backward(loss)
            STATE.on_clip(norm)
            STATE.pre_step(opt, (), {})
            STATE.post_step(opt, (), {})
        return (time.perf_counter() - started) / steps

    seconds = statistics.median(block() for _ in range(5))
    current = session.current()
    if current is not None:
        current.close(linger_seconds=0)
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--workloads", default="loop,hf")
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "fsdp-observe-bench" / "own_loop_overhead.json"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--record", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.worker:
        worker(ns.worker, ns.steps, ns.record, ns.model_dir)
        return 0
    load_before = os.getloadavg()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        subprocess.run(
            [sys.executable, str(SCRIPTS / "save_tiny_llama.py"), str(folder / "tiny")], check=True, capture_output=True
        )
        for kind in ns.workloads.split(","):
            ratios, on, off = [], [], []
            for i in range(ns.pairs):
                order = (False, True) if i % 2 == 0 else (True, False)  # ABBA
                got = {flag: run_once(kind, flag, ns.steps, folder, folder / "tiny") for flag in order}
                on.append(got[True])
                off.append(got[False])
                ratios.append(got[True] / got[False])
                print(
                    f"{kind} pair {i + 1}/{ns.pairs}: with {got[True] * 1000:.2f} ms, without "
                    f"{got[False] * 1000:.2f} ms, ratio {ratios[-1]:.4f}",
                    flush=True,
                )
            results[kind] = {
                "median_step_seconds_instrumented": statistics.median(on),
                "median_step_seconds_plain": statistics.median(off),
                "pair_ratios": ratios,
                "median_ratio": statistics.median(ratios),
            }
    reads = probe_reads()
    hook_seconds = hook_seconds_per_step()
    log_steps = [i for i in range(20) if (i + 1) == 1 or (i + 1) % 5 == 0 or (i + 1) == 20]
    non_log = {path: sum(n for i, n in enumerate(per) if i not in log_steps) for path, per in reads.items()}
    report = {
        "pairs": ns.pairs,
        "steps_per_run": ns.steps,
        "ranks": 2,
        "target_ratio": 1.01,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "workloads": results,
        "probe_reads_per_step": reads,
        "probe_reads_on_non_log_steps": non_log,
        "hook_seconds_per_step": hook_seconds,
    }
    rows = []
    for kind, r in results.items():
        with_ms, without_ms = r["median_step_seconds_instrumented"] * 1000, r["median_step_seconds_plain"] * 1000
        rows.append((f"{kind}: median step with / without", f"{with_ms:.2f} / {without_ms:.2f} ms"))
        rows.append(
            (
                f"{kind}: median pair ratio",
                f"{r['median_ratio']:.4f} (target <= 1.01; pairs {', '.join(f'{x:.3f}' for x in r['pair_ratios'])})",
            )
        )
    for kind, r in results.items():
        rows.append(
            (
                f"{kind}: injector hooks' own cost per step",
                f"{hook_seconds * 1e6:.1f} us = {hook_seconds / r['median_step_seconds_plain']:.2e} of its plain step",
            )
        )
    for path, per in reads.items():
        rows.append((f"sync probe ({path}): reads on non-log steps", f"{non_log[path]} (per step: {per})"))
    rows.append(("load average before / after", f"{load_before[0]:.2f} / {report['load_average_after'][0]:.2f}"))
    print_and_write(rows, report, ns.out)
    return 1 if any(non_log.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
