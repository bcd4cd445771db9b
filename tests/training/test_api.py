"""``TrainingMetrics``, the public API, driven by a real (tiny) torch loop in this process.

Series are read through a real registry (``tests.support.collector.scrape``) or over real HTTP.
Device values are stood in for by ``SyncProbe`` tensors (no GPU here), which count every host read.
"""

from __future__ import annotations

import math
import threading
import time

import httpx
import pytest
import torch
from torch.utils.data import DataLoader

from observe import catalog as c
from observe.errors import PortInUseError
from observe.training import TrainingMetrics, session
from tests.support.collector import scrape
from tests.support.sync_probe import SyncProbe, probe

VOCAB, SEQ, BATCH, MASKED = 32, 8, 4, 3  # every sequence's first MASKED labels are -100


@pytest.fixture(autouse=True)
def torchrun_env(monkeypatch) -> None:
    for key, value in {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "TORCHELASTIC_RUN_ID": "rdzv-7",
        "NODE_NAME": "node-a",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("FSDP_OBSERVE_RUN_ID", raising=False)
    yield
    m = session.current()
    if m is not None:
        m.close(linger_seconds=0)


def loader(sequences: int = 32) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (sequences, SEQ), generator=g)
    labels = ids.clone()
    labels[:, :MASKED] = -100
    return DataLoader([{"input_ids": i, "labels": lab} for i, lab in zip(ids, labels, strict=True)], batch_size=BATCH)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, VOCAB))


def samples(m: TrainingMetrics) -> dict[str, float]:
    """Sample name (plus phase/problem label) -> value, for this rank's series."""
    out = {}
    for name, series in scrape(m.recorder.collector).items():
        for labels, value in series.items():
            extra = dict(labels).get("phase") or dict(labels).get("problem")
            out[f"{name}{{{extra}}}" if extra else name] = value
    return out


def test_labels_come_from_the_torchrun_environment() -> None:
    m = TrainingMetrics(serve=False)
    (key,) = scrape(m.recorder.collector)[c.TRAIN_STEP.name]
    assert dict(key) == {"run_id": "rdzv-7", "rank": "3", "local_rank": "1", "node": "node-a"}
    info = dict(next(iter(scrape(m.recorder.collector)[c.TRAIN_INFO.name])))
    assert info["instrumentation"] == "api" and info["world_size"] == "4" and info["device_type"] == "cpu"


def test_gradient_accumulation_loop_counts_steps_tokens_and_a_token_weighted_loss() -> None:
    net, accum = model(), 2
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    m = TrainingMetrics(planned_steps=4, model=net, optimizer=opt, log_every=2, serve=False)
    weighted, tokens_seen = [], 0
    batches = m.batches(loader())
    for _ in range(4):
        with m.step() as s:
            for _ in range(accum):
                batch = next(batches)
                logits = net(batch["input_ids"])
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
                n = int((batch["labels"] != -100).sum())
                (loss / accum).backward()
                s.loss(loss, tokens=n)
                weighted.append((loss.item(), n))
                tokens_seen += n
            opt.step()
            opt.zero_grad()
    got = samples(m)
    assert got[c.TRAIN_STEPS.name] == 4 and got[c.TRAIN_STEP.name] == 4
    assert got[c.TRAIN_LABELLED_TOKENS.name] == tokens_seen == 4 * accum * BATCH * (SEQ - MASKED)
    assert got[c.TRAIN_SAMPLES.name] == 4 * accum * BATCH
    last_window = weighted[-4:]  # steps 3 and 4
    expected = sum(v * n for v, n in last_window) / sum(n for _, n in last_window)
    assert got[c.TRAIN_LOSS.name] == pytest.approx(expected, rel=1e-6)
    assert got[c.TRAIN_LEARNING_RATE.name] == 0.5
    assert got[c.TRAIN_PLANNED_STEPS.name] == 4
    assert got[c.TRAIN_FLOPS_PER_TOKEN.name] == 6 * sum(p.numel() for p in net.parameters())
    assert got[c.TRAIN_DATA_WAIT_SECONDS.name + "_count"] == 4
    assert got[c.TRAIN_TOKENS_PER_SECOND.name] > 0
    assert c.TRAIN_GRAD_NORM.name not in got  # never given: absent, never 0
    info = dict(next(iter(scrape(m.recorder.collector)[c.TRAIN_INFO.name])))
    assert info["loss_source"] == "rank_token_mean" and info["tokens_source"] == "labels"
    assert "grad_norm_source" not in info


def test_values_unknown_to_the_loop_are_absent_never_zero() -> None:
    m = TrainingMetrics(serve=False)
    with m.step() as s:
        s.loss(1.5)
    got = samples(m)
    assert got[c.TRAIN_STEPS.name] == 1 and got[c.TRAIN_LOSS.name] == 1.5
    for metric in (
        c.TRAIN_PLANNED_STEPS,
        c.TRAIN_FLOPS_PER_TOKEN,
        c.TRAIN_LABELLED_TOKENS,
        c.TRAIN_SAMPLES,
        c.TRAIN_GRAD_NORM,
        c.TRAIN_LEARNING_RATE,
        c.TRAIN_MFU,
        c.TRAIN_TOKENS_PER_SECOND,
        c.TRAIN_WINDOW_DATA_WAIT_RATIO,
        c.TRAIN_VALIDATION_LOSS,
        c.TRAIN_GLOBAL_TOKENS_PER_SECOND,
    ):
        assert metric.name not in got, metric.name
    for histogram in (c.TRAIN_DATA_WAIT_SECONDS, c.TRAIN_CHECKPOINT_SAVE_SECONDS):
        assert histogram.name + "_count" not in got, histogram.name


def test_phases_checkpoint_and_validation() -> None:
    m = TrainingMetrics(serve=False, log_every=1)
    assert m.recorder.phases.current == "loading_weights"
    with m.step() as s:
        s.loss(2.0)
    assert m.recorder.phases.current == "training"
    with m.phase("checkpointing"):
        assert samples(m)[f"{c.TRAIN_PHASE.name}{{checkpointing}}"] == 1
    m.validation(loss=torch.tensor(math.log(8.0)))
    got = samples(m)
    assert got[f"{c.TRAIN_PHASE.name}{{training}}"] == 1
    assert got[c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + "_count"] == 1 and got[c.TRAIN_LAST_CHECKPOINT_STEP.name] == 1
    assert got[c.TRAIN_VALIDATION_PERPLEXITY.name] == pytest.approx(8.0)
    m.close(linger_seconds=0)
    assert samples(m)[f"{c.TRAIN_PHASE.name}{{finished}}"] == 1
    with pytest.raises(ValueError, match="unknown phase"):
        with m.phase("resting"):
            pass


def test_device_values_are_read_on_log_steps_only() -> None:
    """One read per log step (all values in one transfer), none on the steps between."""
    m = TrainingMetrics(planned_steps=10, log_every=5, serve=False)
    reads_per_step = []
    for step in range(1, 11):
        before = SyncProbe.total()
        with m.step() as s:
            for _ in range(2):
                s.loss(probe(2.0 + step), tokens=probe(10.0))
            s.grad_norm(probe(0.5 * step))
        reads_per_step.append(SyncProbe.total() - before)
    assert reads_per_step == [1, 0, 0, 0, 1, 0, 0, 0, 0, 1]  # log steps 1, 5, 10
    got = samples(m)
    assert got[c.TRAIN_LOSS.name] == pytest.approx(sum(2.0 + s for s in range(6, 11)) / 5)
    assert got[c.TRAIN_GRAD_NORM.name] == 5.0
    assert got[c.TRAIN_LABELLED_TOKENS.name] == 10 * 2 * 10  # device token counts, read in windows


def test_served_on_the_rank_port_and_a_taken_port_falls_back_visibly(port_block, capfd) -> None:
    base = port_block(2)
    m = TrainingMetrics(port_base=base, address="127.0.0.1")
    assert m.port == base + 1  # LOCAL_RANK 1
    with m.step():
        pass
    assert (
        'fsdp_train_steps_total{local_rank="1",node="node-a",rank="3",run_id="rdzv-7"} 1.0'
        in httpx.get(f"http://127.0.0.1:{base + 1}/metrics").text
    )
    second = TrainingMetrics(port_base=base, address="127.0.0.1")  # same rank again: its port is taken
    assert second.port not in (None, base + 1)
    body = httpx.get(f"http://127.0.0.1:{second.port}/metrics").text
    assert f'{c.TRAIN_INSTRUMENTATION_PROBLEM.name}{{local_rank="1",node="node-a",problem="port_taken"' in body
    err = capfd.readouterr().err
    assert err.count("fsdp-observe: rank 3: port") == 1 and f"serving on 127.0.0.1:{second.port}" in err
    second.close(linger_seconds=0)
    with pytest.raises(PortInUseError):
        TrainingMetrics(port_base=base, address="127.0.0.1", port_fallback=False)
    m.close(linger_seconds=0)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{base + 1}/metrics")


def test_close_lingers_for_a_final_scrape(monkeypatch) -> None:
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    m = TrainingMetrics(serve=False, linger_seconds=7)
    m.close()  # never stepped: nothing to linger for
    m = TrainingMetrics(serve=False, linger_seconds=7)
    with m.step():
        pass
    m.close(sleep=slept.append)
    assert slept == []  # not serving: nothing to linger for
    m = TrainingMetrics(address="127.0.0.1", port_base=0, linger_seconds=0.3)
    with m.step():
        pass
    m.close(sleep=sleep)
    assert m.linger_outcome == "timeout" and sum(slept) == pytest.approx(0.3, abs=0.05)  # given: the whole time
    slept.clear()
    monkeypatch.delenv("FSDP_OBSERVE_LINGER_SECONDS", raising=False)
    m = TrainingMetrics(address="127.0.0.1", port_base=0)  # the default: until the recent scrapers came back
    with m.step():
        pass
    m.close(sleep=sleep)
    assert slept == [] and m.linger_outcome == "unwatched"  # nobody scraped: no wait
    m = TrainingMetrics(address="127.0.0.1", port_base=0)
    with m.step():
        pass
    httpx.get(f"http://127.0.0.1:{m.port}/metrics", headers={"User-Agent": "Prometheus/2.42"})
    threading.Timer(
        0.3, lambda: httpx.get(f"http://127.0.0.1:{m.port}/metrics", headers={"User-Agent": "Prometheus/2.42"})
    ).start()
    m.close(sleep=sleep)
    assert m.linger_outcome == "scraped" and 0.2 < sum(slept) < 5  # waited for its scraper's next scrape only


def test_a_raising_step_is_not_counted() -> None:
    m = TrainingMetrics(serve=False)
    with pytest.raises(RuntimeError), m.step():
        raise RuntimeError("out of memory")
    assert samples(m)[c.TRAIN_STEPS.name] == 0


def test_global_loss_is_one_all_reduce_per_log_step(tmp_path, monkeypatch) -> None:
    """A gloo world of one: the window's sums go through a real all-reduce."""
    import torch.distributed as dist

    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        m = TrainingMetrics(log_every=3, global_loss=True, serve=False)
        for step in range(3):
            with m.step() as s:
                s.loss(torch.tensor(4.0 * (step + 1)), tokens=4, reduction="sum")
                m.recorder.record_tokens(4, "reported")
        got = samples(m)
        assert got[c.TRAIN_LOSS.name] == pytest.approx((8.0 + 12.0) / 8)  # the window of steps 2 and 3
        assert got[c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name] == pytest.approx(got[c.TRAIN_TOKENS_PER_SECOND.name])
        assert dict(next(iter(scrape(m.recorder.collector)[c.TRAIN_INFO.name])))["loss_source"] == "global_token_mean"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("raw", ["abc", "0", "-3", "2.5"])
def test_a_log_every_setting_that_is_no_step_count_is_refused_in_one_line(monkeypatch, capsys, raw) -> None:
    monkeypatch.setenv("FSDP_OBSERVE_LOG_EVERY", raw)
    m = TrainingMetrics(serve=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FSDP_OBSERVE_LOG_EVERY" in err[0] and "every 10 steps" in err[0], err
    assert m.recorder.log_every == 10
    assert samples(m)[f"{c.TRAIN_INSTRUMENTATION_PROBLEM.name}{{setting_ignored}}"] == 1


def test_a_log_every_setting_acts(monkeypatch, capsys) -> None:
    monkeypatch.setenv("FSDP_OBSERVE_LOG_EVERY", "4")
    assert TrainingMetrics(serve=False).recorder.log_every == 4
    assert capsys.readouterr().err == ""
