"""The DCGM exposition fixtures are what ``tests/support/dcgm_exposition`` renders from the
released counter lists and the 4.9.0/4.10.0 rename table, and carry what each release prints (and
nothing it does not); the canonical layer's dialect table (``observe.monitoring.dialects``) says
what the rename table says."""

from __future__ import annotations

import re

import pytest

from observe.monitoring import dialects
from tests.support import dcgm_exposition as d


def test_the_fixtures_are_regenerated_byte_for_byte() -> None:
    on_disk = {p.name: p.read_bytes() for p in d.FIXTURES.glob("*.prom")}
    assert on_disk == d.fixtures(), "run: python -m tests.support.dcgm_exposition"


def series(name: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in d.fixtures()[name].decode().splitlines():
        if line.startswith("#"):
            continue
        metric, labels, value = re.match(r"^(\w+)\{(.*)\} (\S+)$", line).groups()
        out.append((metric, dict(re.findall(r'(\w+)="([^"]*)"', labels)), float(value)))
    return out


def test_the_released_dialect_and_counters() -> None:
    found = series(f"dcgm-{d.RELEASE}-gpu-operator.prom")
    names = {m for m, _, _ in found}
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in names and "DCGM_FI_DEV_XID_ERRORS" in names
    # commented out in the GPU Operator's list: a stock install does not export these
    assert not names & {"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_PROF_SM_ACTIVE"}
    for _, labels, _ in found:
        assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"} <= set(labels)
        assert not {"hostname", "gpu_uuid", "model_name"} & set(labels)  # NVLink-only / later spellings


def test_mig_instances_have_no_gpu_utilisation_and_4_8_3_says_hostname() -> None:
    mig = series(f"dcgm-{d.RELEASE}-mig.prom")
    assert {m for m, _, _ in mig} & d.NOT_FOR_MIG == set()
    assert {labels["GPU_I_ID"] for _, labels, _ in mig} == {"1", "2"}
    released = series("dcgm-4.6.0-4.8.3-gpu-operator.prom")
    assert all("hostname" in labels and "Hostname" not in labels for _, labels, _ in released)
    assert "DCGM_FI_DEV_FB_RESERVED" in {m for m, _, _ in released}  # new in 4.6.0-4.8.3's list


def test_the_windowed_xid_count_only_where_switched_on() -> None:
    counted = [labels for m, labels, _ in series(f"dcgm-{d.RELEASE}-xid-count.prom") if m == d.XID_COUNT]
    assert {(labels.get("xid"), labels["window_size_in_ms"]) for labels in counted} == {
        (None, "300000"),
        ("31", "300000"),
    }


@pytest.mark.parametrize("release", ["4.9.0", "4.10.0"])
def test_4_9_and_4_10_print_the_renamed_fields_in_base_units(release: str) -> None:
    old = {m: v for m, labels, v in series("dcgm-4.6.0-4.8.3-gpu-operator.prom") if labels["gpu"] == "0"}
    new = {m: v for m, labels, v in series(f"dcgm-{release}-default.prom") if labels["gpu"] == "0"}
    column = d.RELEASES[release].renamed
    for row in d.renames():
        if row.up_to_4_8 in old:
            name = getattr(row, column)
            assert name in new, name
            if name != row.up_to_4_8:
                assert row.up_to_4_8 not in new, row.up_to_4_8  # renamed, not printed twice
            assert new[name] == pytest.approx(d.convert(old[row.up_to_4_8], row.convert), rel=1e-6), name
    assert new["DCGM_FI_DEV_SM_CLOCK_HERTZ"] == 1980e6 and new["DCGM_FI_DEV_GPU_UTIL_RATIO"] == 1.0
    assert new["DCGM_FI_DEV_FB_CAPACITY_BYTES"] == (121344 + 19703 + 523) * 2**20
    pcie = {"DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", "DCGM_FI_PROF_PCIE_TX_BYTES"}
    assert new.keys() & pcie == {
        "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND" if release == "4.10.0" else "DCGM_FI_PROF_PCIE_TX_BYTES"
    }
    for _, labels, _ in series(f"dcgm-{release}-default.prom"):
        assert "DCGM_FI_SYSTEM_DRIVER_VERSION" in labels and "DCGM_FI_DRIVER_VERSION" not in labels
        assert "hostname" in labels


def test_the_mixed_fleet_runs_every_release_and_one_node_twice() -> None:
    bodies = d.fleet(d.MIXED)
    assert sorted(bodies) == [
        "fleet-node-1-4.5.3-4.8.2",
        "fleet-node-2-4.6.0-4.8.3",
        "fleet-node-3-4.9.0",
        "fleet-node-4-4.10.0",
        "fleet-node-4-4.9.0",
    ]
    uuids = {
        name: set(re.findall(rb'UUID="([^"]+)"', body))
        for name, body in bodies.items()
        if name.startswith("fleet-node-4")
    }
    assert uuids["fleet-node-4-4.10.0"] == uuids["fleet-node-4-4.9.0"]  # the same GPUs from two exporter pods


def test_the_layers_dialect_table_says_what_the_rename_table_says() -> None:
    rows = {row.up_to_4_8: row for row in d.renames() if row.up_to_4_8}
    for figure in (*dialects.FIGURES, dialects.XID_WINDOW):
        old = [sp for sp in figure.spellings if sp.releases in (dialects.UP_TO_4_8, dialects.UP_TO_4_9)]
        newer = [sp for sp in figure.spellings if sp not in old]
        (oldest,) = old or newer
        row = rows[oldest.name]
        assert {sp.name for sp in figure.spellings} == {row.up_to_4_8, row.from_4_9, row.from_4_10}, figure.metric
        for sp in newer:
            # the record's unit is the newest spelling's; the old one is converted as the table says
            assert sp.convert == "" and oldest.convert == row.convert, figure.metric
            assert sp.confirmed == (row.status == "confirmed"), (figure.metric, sp.name)
    assert set(dialects.DRIVER_LABELS) == {
        rows["DCGM_FI_DRIVER_VERSION"].up_to_4_8,
        rows["DCGM_FI_DRIVER_VERSION"].from_4_9,
    }
