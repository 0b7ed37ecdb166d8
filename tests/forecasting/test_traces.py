"""TraceSource on the real traces, the embedded excerpt, and ``kso forecast --trace``."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from forecasting import traces
from forecasting.traces import TraceError, TraceSource, write_embedded_excerpt

BITBRAINS = traces.DATA_DIR / traces.TRACE_FILES["bitbrains"]
ALIBABA = traces.DATA_DIR / traces.TRACE_FILES["alibaba"]
EMBEDDED = Path(traces.__file__).resolve().parent.parent / "kso" / "data" / traces.EMBEDDED

needs_data = pytest.mark.usefixtures("real_traces")  # fails naming KSO_TRACE_DIR when the traces are missing


def test_embedded_excerpt_is_20_vms_by_3_days_and_names_its_source() -> None:
    with gzip.open(EMBEDDED, "rt") as f:
        first = f.readline()
    assert first.startswith("#") and "Bitbrains" in first and "CCGrid 2015" in first
    src = TraceSource("embedded", n_series=None)
    out = src.node_series()
    assert len(out) == 20 and sorted(out)[0] == "vm-001"
    span = max(s["cpu"].t[-1] for s in out.values()) - min(s["cpu"].t[0] for s in out.values())
    assert 2.9 * 86400 < span <= 3 * 86400
    assert src.now() == max(s["cpu"].t[-1] for s in out.values())


@needs_data
def test_embedded_excerpt_is_reproducible_and_unchanged_from_the_trace(tmp_path: Path) -> None:
    dest = write_embedded_excerpt(tmp_path / "x.csv.gz")
    assert dest.read_bytes() == EMBEDDED.read_bytes()  # deterministic, and the committed file is current
    raw = pd.read_csv(BITBRAINS, nrows=200)
    vm1 = TraceSource("embedded", n_series=1).node_series()["vm-001"]
    rows = raw[raw.vm == "vm-001"].head(50)
    np.testing.assert_allclose(vm1["cpu"].y[:50], (rows.cpu_usage_mhz / rows.cpu_capacity_mhz).to_numpy(), rtol=1e-9)


@needs_data
def test_bitbrains_first_n_with_window_and_offset() -> None:
    src = TraceSource("bitbrains", n_series=3, window_s=86400, start_offset_s=86400)
    out = src.node_series()
    assert sorted(out) == ["vm-001", "vm-002", "vm-003"]
    raw = pd.read_csv(BITBRAINS, nrows=30_000)
    t0 = raw.timestamp.min() + 86400
    for vm, per in out.items():
        cpu, mem = per["cpu"], per["memory"]
        assert np.all(np.diff(cpu.t) > 0)
        assert cpu.t[0] >= t0 and cpu.t[-1] <= t0 + 86400
        rows = raw[(raw.vm == vm) & (raw.timestamp >= t0) & (raw.timestamp <= t0 + 86400)].drop_duplicates(
            "timestamp", keep="last")
        np.testing.assert_allclose(cpu.y, (rows.cpu_usage_mhz / rows.cpu_capacity_mhz).to_numpy(), rtol=1e-12)
        np.testing.assert_allclose(mem.y, (rows.mem_usage_kb / rows.mem_capacity_kb).to_numpy(), rtol=1e-12)
        assert cpu.capacity == rows.cpu_cores.iloc[-1] * 1000
        assert mem.capacity == rows.mem_capacity_kb.iloc[-1] * 1024


@needs_data
def test_alibaba_machines() -> None:
    out = TraceSource("alibaba", n_series=None).node_series()
    assert len(out) == 16 and "m_1932" in out and "m_1947" in out
    raw = pd.read_csv(ALIBABA, usecols=["machine_id", "time_stamp", "cpu_util_percent"])
    r = raw[raw.machine_id == "m_1933"].sort_values("time_stamp").drop_duplicates("time_stamp", keep="last")
    m = out["m_1933"]
    np.testing.assert_allclose(m["cpu"].y, r.cpu_util_percent.to_numpy() / 100)
    assert m["cpu"].capacity == 96_000 and np.isnan(m["memory"].capacity)


@needs_data
def test_named_nodes() -> None:
    out = TraceSource("alibaba", n_series=None, nodes=["m_1940", "m_1935"]).node_series()
    assert sorted(out) == ["m_1935", "m_1940"]


def test_csv_path_with_duplicates_zero_capacity_and_unsorted_rows(tmp_path: Path) -> None:
    p = tmp_path / "mine.csv"
    p.write_text("vm,timestamp,cpu_cores,cpu_capacity_mhz,cpu_usage_mhz,mem_capacity_kb,mem_usage_kb\n"
                 "a,300,2,1000,500,1024,512\n"
                 "a,0,2,1000,100,1024,256\n"
                 "a,300,2,1000,600,1024,512\n"  # duplicate timestamp: the later row wins
                 "a,600,2,0,100,1024,256\n"  # zero capacity: missing, not infinite
                 "b,0,4,2000,2000,2048,2048\n")
    out = TraceSource(str(p), n_series=None).node_series()
    a = out["a"]["cpu"]
    np.testing.assert_array_equal(a.t, [0, 300, 600])
    np.testing.assert_allclose(a.y, [0.1, 0.6, np.nan])
    assert out["b"]["memory"].y.tolist() == [1.0]


def test_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        TraceSource(str(tmp_path / "nope.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,2\n")
    with pytest.raises(TraceError, match="neither"):
        TraceSource(str(bad))
    with pytest.raises(TraceError, match="no samples"):
        TraceSource("embedded", n_series=2, start_offset_s=30 * 86400).node_series()
