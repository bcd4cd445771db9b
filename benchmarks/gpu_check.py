"""What only a CUDA GPU can show, in one prepared run of under 8 minutes on one GPU.

**This script has not run on a GPU.** No GPU has been available to this project; what is tested
(on CPU, ``tests/benchmarks/test_gpu_check.py``) is its refusal without CUDA and its pure parts:
parsing ``nvidia-smi --query-gpu`` CSV, comparing the agent's fields with it, the MFU check
against the peak table. The first run on a GPU is its first real test: read its table critically.

Four checks, each a real process, each a row group in the table and a key in the JSON:

1. ``agent``: ``fsdp-observe agent`` against the real NVML, on the idle GPU. One scrape of its
   ``/metrics`` between two ``nvidia-smi --query-gpu`` reads; every field the agent exports for the
   GPU is compared with nvidia-smi's (``FIELDS``: static facts exactly, readings within a
   tolerance of either read). PCIe throughput has no ``--query-gpu`` field and is listed as not
   compared.
2. ``fsdp``: ``fsdp-observe train`` on one GPU: the Llama 3.2 1B shape (``--preset llama3.2-1b``,
   random weights), FSDP2 on a 1-rank mesh, bf16 mixed precision, ``--seq-len 2048 --batch-size 4``.
   From the rank's ``/metrics`` during training: tokens/s, MFU (and the MFU recomputed from the
   exported FLOPs/token, tokens/s and ``observe.training.flops.PEAK_BF16_FLOPS``: they must agree),
   the device-memory series (present, allocated <= reserved <= the GPU's memory, peak >=
   allocated, and the 1B model's weights + grads + AdamW state, ~16 bytes/parameter, fit under
   the peak) and the ``gpu_uuid`` label equal to nvidia-smi's (NVML's) UUID of that GPU.
3. ``hf``: the own-loop instrumentation on a Hugging Face ``Trainer`` run on CUDA (bf16, a
   ~120M-parameter Llama): runs with and without ``FSDP_OBSERVE_INSTRUMENT=1`` in ABBA order,
   the overhead ratio (median seconds/step with / without, warm-up dropped; target <= 1.01) and
   the synchronising CUDA calls per run (``torch.cuda.set_sync_debug_mode("warn")``, counted):
   the instrumentation must add none.
4. ``hang``: two NCCL ranks on the GPU under ``fsdp-observe run``, one that stops and one that
   straggles: the verdict ``fsdp-observe diagnose`` gives and how long it took
   (``benchmarks/gpu_hang.py``; NCCL's refusal of two ranks on one device is reported as such).

    python -m benchmarks.gpu_check [--out FILE] [--gpu INDEX] [--quick]

Without CUDA it prints one ``error:`` line and exits 2. Writes JSON to ``--out`` (default: a
scratch folder, never benchmarks/results). Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from observe import catalog as c
from observe.ports import free_port
from observe.promtext import Sample, parse
from observe.training.flops import peak_flops
from observe.xid import normalise_bus

REPO = Path(__file__).resolve().parents[1]

MIB = 2**20
#: Seconds the whole check may take on one GPU (the issue's budget).
BUDGET_SECONDS = 8 * 60
#: nvidia-smi's "no value" spellings (``--format=csv,noheader,nounits``).
NO_VALUE = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]"}


@dataclass(frozen=True)
class Field:
    """One agent series (or label) and the ``nvidia-smi --query-gpu`` field that reads the same value.

    Attributes:
        smi: the query field (``nvidia-smi --help-query-gpu``).
        metric: the agent's sample name, or ``label:NAME`` for a label of ``fsdp_gpu_info`` (or
            of every GPU series, for ``gpu_uuid``), with ``{label=value}`` for one labelled sample.
        scale: nvidia-smi's unit in the agent's (MiB -> bytes, MHz -> Hz, % -> ratio).
        tolerance: ``exact`` for a fact, else ``(absolute, relative)``: a reading agrees when
            within either of one of the two nvidia-smi reads.
    """

    smi: str
    metric: str
    scale: float = 1.0
    tolerance: str | tuple[float, float] = "exact"


#: Every GPU field the agent exports, paired with nvidia-smi's (catalog names, nvidia-smi units).
FIELDS: tuple[Field, ...] = (
    Field("uuid", "label:gpu_uuid"),
    Field("name", "label:name"),
    Field("pci.bus_id", "label:pci_bus"),
    Field("driver_version", "label:driver_version"),
    Field("memory.total", c.GPU_MEMORY_TOTAL.name, MIB, (1 * MIB, 0.0)),
    Field("memory.used", c.GPU_MEMORY_USED.name, MIB, (64 * MIB, 0.02)),
    Field("memory.reserved", c.GPU_MEMORY_RESERVED.name, MIB, (1 * MIB, 0.0)),
    Field("utilization.gpu", c.GPU_UTILIZATION.name, 0.01, (0.10, 0.0)),
    Field("utilization.memory", c.GPU_MEMORY_UTILIZATION.name, 0.01, (0.10, 0.0)),
    Field("utilization.encoder", c.GPU_ENCODER_UTILIZATION.name, 0.01, (0.05, 0.0)),
    Field("utilization.decoder", c.GPU_DECODER_UTILIZATION.name, 0.01, (0.05, 0.0)),
    Field("temperature.gpu", c.GPU_TEMPERATURE.name, 1.0, (3.0, 0.0)),
    Field("power.draw", c.GPU_POWER.name, 1.0, (25.0, 0.10)),
    Field("enforced.power.limit", c.GPU_POWER_LIMIT.name, 1.0, (1.0, 0.0)),
    Field("clocks.sm", c.GPU_SM_CLOCK.name, 1e6, (0.0, 0.15)),
    Field("clocks.mem", c.GPU_MEMORY_CLOCK.name, 1e6, (0.0, 0.05)),
    Field("fan.speed", c.GPU_FAN_SPEED.name, 0.01, (0.10, 0.0)),
    Field("ecc.errors.corrected.volatile.total", f"{c.GPU_ECC_ERRORS.name}{{type=corrected}}"),
    Field("ecc.errors.uncorrected.volatile.total", f"{c.GPU_ECC_ERRORS.name}{{type=uncorrected}}"),
    Field("mig.mode.current", c.GPU_MIG_MODE.name),
    *(
        Field(f"clocks_throttle_reasons.{reason}", f"{c.GPU_CLOCK_THROTTLE.name}{{reason={reason}}}")
        for reason in (
            "gpu_idle",
            "applications_clocks_setting",
            "sw_power_cap",
            "hw_slowdown",
            "sync_boost",
            "sw_thermal_slowdown",
            "hw_thermal_slowdown",
            "hw_power_brake_slowdown",
            "display_clock_setting",
        )
    ),
)
#: Agent GPU series with no ``--query-gpu`` counterpart (listed in the table as not compared).
NOT_COMPARED = (c.GPU_PCIE_RX.name, c.GPU_PCIE_TX.name)


class CheckError(Exception):
    """Something this check needs is missing or answered nonsense (one line for the user)."""


# -- pure parts (tested on CPU) -----------------------------------------------------------------------


def cuda_problem(cuda_available: Callable[[], bool] | None = None) -> str | None:
    """Why this machine cannot run the check (no CUDA build of torch, no GPU), or ``None``."""
    if cuda_available is None:
        try:
            import torch
        except ImportError:
            return "torch is not installed (pip install -e '.[trainer]' with a CUDA build of torch)"
        if torch.version.cuda is None:
            return f"torch {torch.__version__} is a CPU-only build (install a CUDA build of torch)"
        cuda_available = torch.cuda.is_available
    if not cuda_available():
        return "torch.cuda.is_available() is False: no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
    return None


def smi_value(raw: str) -> str | float | None:
    """One ``nvidia-smi`` CSV cell: ``None`` for its no-value spellings, a float for a number,
    1.0/0.0 for Active/Enabled and Not Active/Disabled, else the stripped text."""
    text = raw.strip()
    low = text.lower()
    if low in NO_VALUE:
        return None
    if low in ("active", "enabled"):
        return 1.0
    if low in ("not active", "disabled"):
        return 0.0
    try:
        return float(text)
    except ValueError:
        return text


def parse_smi_csv(text: str, fields: list[str]) -> list[dict[str, str | float | None]]:
    """Rows of ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``, one dict per GPU.

    Raises:
        CheckError: a row with another number of columns than ``fields``.
    """
    rows = []
    for line_no, cells in enumerate(csv.reader(io.StringIO(text)), 1):
        if not cells or all(not cell.strip() for cell in cells):
            continue
        if len(cells) != len(fields):
            raise CheckError(
                f"nvidia-smi line {line_no} has {len(cells)} columns for {len(fields)} fields: {','.join(cells)[:200]}"
            )
        rows.append({name: smi_value(cell) for name, cell in zip(fields, cells, strict=True)})
    return rows


def agent_values(samples: list[Sample], gpu_uuid: str) -> dict[str, str | float]:
    """The agent's values for one GPU, keyed as ``Field.metric``: ``label:NAME`` for the labels of
    ``fsdp_gpu_info`` and ``gpu_uuid``, ``NAME{label=value}`` for a labelled sample, else ``NAME``."""
    out: dict[str, str | float] = {}
    mine = [s for s in samples if s.labels.get("gpu_uuid") == gpu_uuid]
    if mine:
        out["label:gpu_uuid"] = gpu_uuid
    for s in mine:
        extra = {k: v for k, v in s.labels.items() if k not in c.AGENT_GPU_LABELS}
        if s.name == c.GPU_INFO.name:
            out.update({f"label:{k}": v for k, v in extra.items()})
        elif len(extra) == 1:
            ((key, value),) = extra.items()
            out[f"{s.name}{{{key}={value}}}"] = s.value
        elif not extra:
            out[s.name] = s.value
    return out


def same_text(field: str, agent: str, smi: str) -> bool:
    """Whether two spellings of a fact agree (a PCI bus id as ``observe.xid.normalise_bus`` writes
    it: nvidia-smi says ``00000000:86:00.0``, the agent's label ``0000:86:00``)."""
    if field == "pci.bus_id":
        return normalise_bus(agent) == normalise_bus(smi)
    return agent.strip() == smi.strip()


@dataclass(frozen=True)
class Comparison:
    """One row of the agent check: ``ok`` is ``None`` when neither side has a value (not exported,
    as documented: absent, never 0, e.g. the fan of a passively cooled GPU)."""

    field: str
    metric: str
    agent: str | float | None
    smi: tuple[str | float | None, ...]
    ok: bool | None
    note: str = ""


def compare(
    agent: Mapping[str, str | float],
    reads: Sequence[Mapping[str, str | float | None]],
    fields: tuple[Field, ...] = FIELDS,
) -> list[Comparison]:
    """Each field of one GPU: the agent's value against nvidia-smi's reads taken around its scrape.

    Agreement: a fact equal to the first read; a number equal (``exact``) or within
    ``max(absolute, relative * |smi|)`` of one of the reads after ``Field.scale``; a value
    on only one side disagrees (the agent dropped a field nvidia-smi has, or invented one).
    """
    rows = []
    for f in fields:
        have = agent.get(f.metric)
        smi = tuple(r.get(f.smi) for r in reads)
        if have is None and all(v is None for v in smi):
            rows.append(Comparison(f.smi, f.metric, None, smi, None, "neither has it"))
            continue
        if have is None or smi[0] is None:
            side = "nvidia-smi" if have is None else "the agent"
            rows.append(Comparison(f.smi, f.metric, have, smi, False, f"only {side} has it"))
            continue
        if isinstance(have, str) or isinstance(smi[0], str):
            ok = same_text(f.smi, str(have), str(smi[0]))
            rows.append(Comparison(f.smi, f.metric, have, smi, ok))
            continue
        scaled = [float(v) * f.scale for v in smi if isinstance(v, float)]
        if isinstance(f.tolerance, tuple):
            absolute, relative = f.tolerance
            ok = any(abs(have - v) <= max(absolute, relative * abs(v)) for v in scaled)
        else:
            ok = any(abs(have - v) < 1e-9 * max(1.0, abs(v)) for v in scaled)
        rows.append(Comparison(f.smi, f.metric, have, smi, ok, "" if ok else f"nvidia-smi x{f.scale:g} = {scaled}"))
    return rows


def mfu_agrees(
    exported_mfu: float, flops_per_token: float, tokens_per_second: float, device_name: str, tolerance: float = 0.02
) -> tuple[bool, float | None]:
    """Whether the exported MFU equals ``flops/token * tokens/s / peak`` for ``device_name`` from
    ``PEAK_BF16_FLOPS`` (within ``tolerance`` of it, relative; tokens/s and MFU are read from
    one scrape); returns the recomputed MFU too (``None``: the device is not in the table)."""
    peak = peak_flops(device_name)
    if peak is None:
        return False, None
    expected = flops_per_token * tokens_per_second / peak
    return abs(exported_mfu - expected) <= tolerance * max(expected, 1e-12), expected


def memory_plausible(allocated: float, reserved: float, peak: float, total: float, parameters: float) -> list[str]:
    """What is wrong with one rank's device-memory series (empty: plausible). ``parameters`` is
    the model's parameter count: weights, gradients and AdamW's two moments in fp32 take about
    16 bytes each, which the peak must hold on a 1-rank mesh."""
    problems = []
    if not 0 < allocated <= reserved:
        problems.append(f"allocated {allocated:.3g} B is not in (0, reserved {reserved:.3g} B]")
    if reserved > total:
        problems.append(f"reserved {reserved:.3g} B exceeds the GPU's {total:.3g} B")
    if peak < allocated:
        problems.append(f"peak {peak:.3g} B is below allocated {allocated:.3g} B")
    if peak < 0.8 * 16 * parameters:  # 0.8: ``parameters`` may be an estimate (from FLOPs/token)
        problems.append(f"peak {peak:.3g} B is below 0.8 x 16 B x {parameters:.3g} parameters (weights, grads, AdamW)")
    return problems


# -- the GPU phases (have not run: see the module docstring) ---------------------------------------

SMI_FIELDS = [f.smi for f in FIELDS]


def nvidia_smi(index: int) -> dict[str, str | float | None]:
    """nvidia-smi's read of GPU ``index`` (every ``FIELDS`` query field)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise CheckError("nvidia-smi is not on PATH (it ships with the NVIDIA driver)")
    proc = subprocess.run(
        [smi, f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0:
        raise CheckError(f"nvidia-smi exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:300]}")
    rows = parse_smi_csv(proc.stdout, SMI_FIELDS)
    if len(rows) != 1:
        raise CheckError(f"nvidia-smi --id={index} gave {len(rows)} rows")
    return rows[0]


def wait_for(url: str, seconds: float) -> str:
    """GET ``url`` until it answers 200 (its body), or raise CheckError after ``seconds``."""
    import httpx

    deadline = time.monotonic() + seconds
    while True:
        try:
            r = httpx.get(url, timeout=2.0)
            if r.status_code == 200:
                return r.text
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise CheckError(f"{url} did not answer within {seconds:g} s")
        time.sleep(0.5)


def check_agent(index: int, env: dict[str, str]) -> dict:
    """Phase 1: the agent against the real NVML and nvidia-smi, on the idle GPU."""
    port = free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "observe.cli", "agent", "--port", str(port), "--interval", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/healthz", 60)
        time.sleep(3)  # a few collections: utilisation and power need a sample period
        before = nvidia_smi(index)
        text = wait_for(f"http://127.0.0.1:{port}/metrics", 10)
        after = nvidia_smi(index)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    uuid = str(before["uuid"])
    samples = parse(text)
    rows = compare(agent_values(samples, uuid), [before, after])
    exported = {s.name for s in samples if s.labels.get("gpu_uuid") == uuid}
    return {
        "gpu_uuid": uuid,
        "rows": [asdict(r) for r in rows],
        "not_compared": [n for n in NOT_COMPARED if n in exported],
        "ok": all(r.ok is not False for r in rows),
    }


def check_fsdp(index: int, env: dict[str, str], workdir: Path, steps: int, expected_uuid: str) -> dict:
    """Phase 2: a 1-GPU FSDP run of the Llama 3.2 1B shape in bf16, read from its /metrics."""
    port = free_port()
    log = workdir / "fsdp.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "observe.cli",
        "train",
        "--nproc-per-node",
        "1",
        "--preset",
        "llama3.2-1b",
        "--device",
        "cuda",
        "--mixed-precision",
        "bf16",
        "--seq-len",
        "2048",
        "--batch-size",
        "4",
        "--steps",
        str(steps),
        "--log-every",
        "5",
        "--metrics-port",
        str(port),
        "--metrics-address",
        "127.0.0.1",
        "--metrics-linger",
        "10",
        "--log-json",
        str(log),
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    scrapes: list[list[Sample]] = []
    try:
        deadline = time.monotonic() + BUDGET_SECONDS / 2
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                text = wait_for(f"http://127.0.0.1:{port}/metrics", 5)
            except CheckError:
                continue
            samples = parse(text)
            if any(s.name == c.TRAIN_STEP.name and s.value >= 10 for s in samples):
                scrapes.append(samples)
            time.sleep(2)
        out = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if not scrapes:
        raise CheckError(f"the FSDP run gave no scrape past step 10 (exit {proc.returncode}): {out[-600:]}")
    last = {s.name: s for s in scrapes[-1]}

    def value(metric: c.Metric) -> float | None:
        s = last.get(metric.name)
        return None if s is None else s.value

    tokens = value(c.TRAIN_TOKENS_PER_SECOND)
    mfu, fpt = value(c.TRAIN_MFU), value(c.TRAIN_FLOPS_PER_TOKEN)
    uuid = next((s.labels.get("gpu_uuid") for s in scrapes[-1] if s.name == c.TRAIN_STEP.name), None)
    name = str(nvidia_smi(index)["name"])
    agrees, expected = (
        mfu_agrees(mfu, fpt, tokens, name)
        if mfu is not None and fpt is not None and tokens is not None
        else (False, None)
    )
    memory = [
        value(m) for m in (c.TRAIN_DEVICE_MEMORY_ALLOCATED, c.TRAIN_DEVICE_MEMORY_RESERVED, c.TRAIN_DEVICE_MEMORY_PEAK)
    ]
    total = float(nvidia_smi(index)["memory.total"] or 0) * MIB
    parameters = (fpt or 0) / 6  # FLOPs/token = 6 N + attention (about 10% here): N, slightly over
    problems = (
        ["a device-memory series is missing"]
        if None in memory
        else memory_plausible(memory[0] or 0, memory[1] or 0, memory[2] or 0, total, parameters)
    )
    return {
        "exit_status": proc.returncode,
        "tokens_per_second": tokens,
        "mfu": mfu,
        "mfu_recomputed": expected,
        "mfu_agrees": agrees,
        "device_memory_bytes": memory,
        "memory_problems": problems,
        "gpu_uuid": uuid,
        "nvml_gpu_uuid": expected_uuid,
        "scrapes": len(scrapes),
        "ok": proc.returncode == 0 and agrees and not problems and uuid == expected_uuid,
    }


def hf_worker(steps: int, record: str) -> None:
    """One HF Trainer run on CUDA (``--worker``): writes step timestamps and the sync count."""
    import warnings

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=1024,
    )
    model = LlamaForCausalLM(config)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 32000, (steps * 8 + 8, 1024))]
    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 - the Trainer's signature
            stamps.append(time.perf_counter())

    args = TrainingArguments(
        output_dir=str(Path(record).parent / "hf-out"),
        max_steps=steps,
        per_device_train_batch_size=8,
        bf16=True,
        logging_steps=10,
        report_to="none",
        save_strategy="no",
        dataloader_drop_last=True,
        seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[Stamp()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        trainer.train()
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    stamps.append(time.perf_counter())
    syncs = sum("synchronizing" in str(w.message) for w in caught)
    Path(record).write_text(json.dumps({"stamps": stamps, "syncs": syncs}))


def check_hf(env: dict[str, str], workdir: Path, steps: int, pairs: int) -> dict:
    """Phase 3: HF Trainer on CUDA with and without zero-code instrumentation, ABBA order."""
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    order = [k for _ in range(pairs) for k in ("off", "on", "on", "off")][: 2 * pairs]
    for i, kind in enumerate(order):
        record = workdir / f"hf-{i}-{kind}.json"
        run_env = dict(env)
        if kind == "on":
            run_env.update(
                {c.INSTRUMENT_ENV: "1", "FSDP_OBSERVE_PORT_BASE": str(free_port()), "FSDP_OBSERVE_LINGER_SECONDS": "0"}
            )
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.gpu_check",
                "--worker",
                "hf",
                "--steps",
                str(steps),
                "--record",
                str(record),
            ],
            cwd=REPO,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=BUDGET_SECONDS / 2,
        )
        if proc.returncode != 0:
            raise CheckError(f"the HF Trainer run ({kind}) exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
        runs[kind].append(json.loads(record.read_text()))
    warm = 10

    def seconds_per_step(run: dict) -> float:
        stamps = run["stamps"][warm:]
        return (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)

    off = statistics.median(seconds_per_step(r) for r in runs["off"])
    on = statistics.median(seconds_per_step(r) for r in runs["on"])
    added = statistics.median(r["syncs"] for r in runs["on"]) - statistics.median(r["syncs"] for r in runs["off"])
    return {
        "seconds_per_step_off": off,
        "seconds_per_step_on": on,
        "overhead_ratio": on / off,
        "syncs_off": [r["syncs"] for r in runs["off"]],
        "syncs_on": [r["syncs"] for r in runs["on"]],
        "added_syncs": added,
        "ok": on / off <= 1.01 and added <= 0,
    }


def _hang_check(env: dict[str, str], workdir: Path) -> dict:
    """The hang-and-straggler check (``benchmarks/gpu_hang.py``), ``ok`` as the others."""
    from gpu_hang import check_hang  # noqa: E402 - beside this file

    result = check_hang(env, workdir)
    return {**result, "ok": result["passed"]}


def table(report: dict) -> str:
    """The printed summary of ``report``."""
    lines = [f"gpu_check on {report.get('gpu_name')} ({report.get('gpu_uuid')}), load average {report['load']}"]
    agent = report.get("agent") or {}
    for row in agent.get("rows", []):
        mark = {True: "ok", False: "MISMATCH", None: "n/a"}[row["ok"]]
        lines.append(f"  agent  {row['field']:<44} {mark:<9} agent {row['agent']!s:<22} nvidia-smi {row['smi']}")
    for name in agent.get("not_compared", []):
        lines.append(f"  agent  {name:<44} not compared (no nvidia-smi --query-gpu field)")
    for key in ("fsdp", "hf", "hang"):
        for k, v in (report.get(key) or {}).items():
            lines.append(f"  {key:<6} {k:<44} {v}")
    for key, error in report.get("errors", {}).items():
        lines.append(f"  {key:<6} ERROR {error}")
    lines.append(f"overall: {'ok' if report['ok'] else 'FAILED'} in {report['seconds']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "fsdp-observe-bench" / "gpu_check.json")
    ap.add_argument("--gpu", type=int, default=0, help="nvidia-smi index of the GPU to use (default 0)")
    ap.add_argument("--quick", action="store_true", help="fewer steps and pairs (a smoke run)")
    ap.add_argument("--worker", choices=("hf",), help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=60, help=argparse.SUPPRESS)
    ap.add_argument("--record", help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.worker:
        hf_worker(ns.steps, ns.record)
        return 0
    problem = cuda_problem()
    if problem is not None:
        print(f"error: gpu_check: {problem}; run it on a machine with an NVIDIA GPU", file=sys.stderr)
        return 2
    started = time.monotonic()
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(ns.gpu)}
    workdir = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    report: dict = {"load": " ".join(f"{x:.2f}" for x in os.getloadavg()), "errors": {}}
    try:
        facts = nvidia_smi(ns.gpu)
    except CheckError as exc:
        print(f"error: gpu_check: {exc}", file=sys.stderr)
        return 2
    report.update(gpu_name=facts["name"], gpu_uuid=facts["uuid"])
    phases: list[tuple[str, Callable[[], dict]]] = [
        ("agent", lambda: check_agent(ns.gpu, env)),
        ("fsdp", lambda: check_fsdp(ns.gpu, env, workdir, 30 if ns.quick else 80, str(facts["uuid"]))),
        ("hf", lambda: check_hf(env, workdir, 30 if ns.quick else 60, 1 if ns.quick else 2)),
        ("hang", lambda: _hang_check(env, workdir)),
    ]
    for key, phase in phases:
        try:
            report[key] = phase()
        except (CheckError, subprocess.TimeoutExpired, OSError) as exc:
            report["errors"][key] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    report["seconds"] = time.monotonic() - started
    report["ok"] = (
        not report["errors"]
        and all(report.get(k, {}).get("ok") for k, _ in phases)
        and report["seconds"] < BUDGET_SECONDS
    )
    print(table(report))
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {ns.out}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
