"""The DCGM exposition fixtures are what ``tests/support/dcgm_exposition`` renders from the
released counter lists, and carry what released exporters print (and nothing they do not)."""

from __future__ import annotations

import re

from tests.support import dcgm_exposition as d


def test_the_fixtures_are_regenerated_byte_for_byte() -> None:
    on_disk = {p.name: p.read_bytes() for p in d.FIXTURES.glob("*.prom")}
    assert on_disk == d.fixtures(), "run: python -m tests.support.dcgm_exposition"


def series(name: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in d.fixtures()[name].decode().splitlines():
        if line.startswith("#"):
            continue
        metric, labels = re.match(r"^(\w+)\{(.*)\} ", line).groups()
        out.append((metric, dict(re.findall(r'(\w+)="([^"]*)"', labels))))
    return out


def test_the_released_dialect_and_counters() -> None:
    found = series(f"dcgm-{d.RELEASE}-gpu-operator.prom")
    names = {m for m, _ in found}
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in names and "DCGM_FI_DEV_XID_ERRORS" in names
    # commented out in the GPU Operator's list: a stock install does not export these
    assert not names & {"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_PROF_SM_ACTIVE"}
    for _, labels in found:
        assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"} <= set(labels)
        assert not {"hostname", "gpu_uuid", "model_name"} & set(labels)  # NVLink-only / unreleased spellings


def test_mig_instances_have_no_gpu_utilisation_and_the_main_branch_says_hostname() -> None:
    mig = series(f"dcgm-{d.RELEASE}-mig.prom")
    assert {m for m, _ in mig} & d.NOT_FOR_MIG == set()
    assert {labels["GPU_I_ID"] for _, labels in mig} == {"1", "2"}
    assert all(
        "hostname" in labels and "Hostname" not in labels for _, labels in series("dcgm-main-d5e5f51-hostname.prom")
    )


def test_the_windowed_xid_count_only_where_switched_on() -> None:
    counted = [labels for m, labels in series(f"dcgm-{d.RELEASE}-xid-count.prom") if m == d.XID_COUNT]
    assert {(labels.get("xid"), labels["window_size_in_ms"]) for labels in counted} == {
        (None, "300000"),
        ("31", "300000"),
    }
