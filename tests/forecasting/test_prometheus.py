"""PrometheusSource against a real Prometheus backfilled from the real traces (see tests/support/prom_server.py)."""

from __future__ import annotations

import math
import socket
import threading
import time

import numpy as np
import pytest
import requests

from forecasting.models import get_forecaster
from forecasting.prometheus import (
    PrometheusMappingError,
    PrometheusQueryError,
    PrometheusSettings,
    PrometheusSource,
    PrometheusUnavailable,
)
from forecasting.quality import LAGGING_SAMPLES
from forecasting.store import ForecastStore, StoreSettings
from tests.support import prom_server as ps

pytestmark = pytest.mark.skipif(ps.prometheus_binaries() is None,
                                reason="prometheus/promtool not installed (Debian: apt-get install -y prometheus)")


def _source(prom: ps.PromServer, **kw: object) -> PrometheusSource:
    # 13 h covers the 12 h slice even if the module runs a while after the backfill.
    # Step = the backfill's scrape interval, so values can be checked sample by sample.
    args: dict[str, object] = {"url": prom.url, "history_s": 13 * 3600, "timeout_s": 5.0, "step_s": ps.STEP, **kw}
    return PrometheusSource(PrometheusSettings(**args))  # type: ignore[arg-type]


def _closed_windows(prom: ps.PromServer) -> bool:
    """Prometheus 2.x range selectors include the window's left edge ([t-5m, t]); 3.x excludes it."""
    info = requests.get(f"{prom.url}/api/v1/status/buildinfo", timeout=5).json()["data"]
    return int(info["version"].split(".")[0]) < 3


def _expected_cpu(prom: ps.PromServer, node: str, t: np.ndarray, closed: bool) -> np.ndarray:
    if not closed:
        return prom.expected_cpu(node, t)
    truth = prom.nodes[node]
    k = np.rint((t - prom.scrapes[0]) / ps.STEP).astype(int)
    return np.array([truth.cpu_interval[kk - 4: kk + 1].mean() if kk >= 5 and truth.present[kk - 5: kk + 1].all()
                     else np.nan for kk in k])


def test_recovers_trace_utilisation(prom: ps.PromServer) -> None:
    src = _source(prom)
    out = src.node_series()
    assert sorted(out) == ["worker-0", "worker-1", "worker-2", "worker-3", "worker-4"]
    closed = _closed_windows(prom)
    for node, per in out.items():
        cpu, mem = per["cpu"], per["memory"]
        assert np.all(np.diff(cpu.t) == ps.STEP)
        exp = _expected_cpu(prom, node, cpu.t, closed)
        both = np.isfinite(exp) & np.isfinite(cpu.y)
        assert both.sum() > 600, node
        np.testing.assert_allclose(cpu.y[both], exp[both], atol=1e-9, err_msg=f"{node} cpu")
        exp_m = prom.expected_mem(node, mem.t)
        both = np.isfinite(exp_m) & np.isfinite(mem.y)
        assert both.sum() > 600
        np.testing.assert_allclose(mem.y[both], exp_m[both], atol=1e-9, err_msg=f"{node} memory")
        # Capacity from the instant queries: cpus x 1000 millicores, MemTotal bytes.
        assert cpu.capacity == prom.nodes[node].cpus * 1000
        assert mem.capacity == pytest.approx(prom.nodes[node].mem_total)
    # The newest sample is at most a couple of steps old: the slice ends a minute before the backfill.
    assert time.time() - out["worker-0"]["cpu"].t[-1] < 600


def test_node_name_mappings(prom: ps.PromServer) -> None:
    uname = _source(prom, node_mapping="UNAME")
    assert sorted(uname.node_series()) == ["worker-0", "worker-1", "worker-2", "worker-3", "worker-4"]
    # worker-3 is exported twice (10.0.0.4:9100 and :9101): merged into one series, and said so.
    assert any("worker-3/memory: merged 2 series" in n for n in uname.notes)

    label = _source(prom, node_mapping="LABEL", node_label="node")
    by_label = label.node_series()
    assert sorted(by_label) == ["worker-0", "worker-1", "worker-2", "worker-3", "worker-4"]
    np.testing.assert_allclose(by_label["worker-2"]["cpu"].y, uname.node_series()["worker-2"]["cpu"].y,
                               equal_nan=True)

    regex = _source(prom, node_mapping="REGEX", node_regex=r"^([\d.]+):\d+$", node_regex_label="instance")
    by_ip = regex.node_series()
    assert sorted(by_ip) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]
    assert any("10.0.0.4/cpu: merged 2 series" in n for n in regex.notes)


def test_uname_falls_back_to_regex_for_instances_without_uname_info(prom: ps.PromServer) -> None:
    src = _source(prom, query_node_uname='last_over_time(node_uname_info{nodename!="worker-1"}[$window])')
    out = src.node_series()
    assert "10.0.0.2" in out and "worker-1" not in out
    assert any("10.0.0.2:9100 has no node_uname_info" in n for n in src.notes)


def test_unknown_node_label_is_a_clear_error(prom: ps.PromServer) -> None:
    src = _source(prom, node_mapping="LABEL", node_label="kubernetes_node")
    with pytest.raises(PrometheusMappingError) as err:
        src.node_series()
    msg = str(err.value)
    assert "kubernetes_node" in msg and "instance" in msg and prom.url in msg


def test_series_with_a_gap(prom: ps.PromServer) -> None:
    cpu = _source(prom).node_series()[ps.GAP_NODE]["cpu"]
    gap_start = prom.scrapes[ps.GAP_START_MIN]
    gap_end = prom.scrapes[ps.GAP_START_MIN + ps.GAP_MINUTES - 1]
    inside = (cpu.t > gap_start + 300) & (cpu.t <= gap_end)  # past the 5 min lookback
    assert inside.sum() >= ps.GAP_MINUTES - 6
    assert np.isnan(cpu.y[inside]).all()
    after = cpu.t > gap_end + 600
    assert np.isfinite(cpu.y[after]).all()


def test_counter_reset(prom: ps.PromServer) -> None:
    cpu = _source(prom).node_series()[ps.RESET_NODE]["cpu"]
    t_reset = prom.scrapes[ps.RESET_MIN]
    near = np.abs(cpu.t - t_reset) <= 900
    assert near.sum() >= 25
    exp = _expected_cpu(prom, ps.RESET_NODE, cpu.t[near], _closed_windows(prom))
    # rate() corrects the reset: no spike, no negative rate, the trace's value throughout.
    np.testing.assert_allclose(cpu.y[near], exp, atol=1e-9)
    assert (cpu.y[np.isfinite(cpu.y)] >= 0).all() and (cpu.y[np.isfinite(cpu.y)] <= 1 + 1e-9).all()


def test_nan_and_inf_samples_become_missing(prom: ps.PromServer) -> None:
    mem = _source(prom).node_series()[ps.NAN_NODE]["memory"]
    k = np.rint((mem.t - prom.scrapes[0]) / ps.STEP).astype(int)
    bad = np.isin(k, list(ps.INF_MINUTES) + list(ps.NAN_MINUTES))
    assert bad.sum() == 4
    assert np.isnan(mem.y[bad]).all()
    assert np.isfinite(mem.y[~bad]).all()


def test_pod_usage(prom: ps.PromServer) -> None:
    pods = _source(prom).pod_series()
    web = pods[f"{ps.POD[0]}/{ps.POD[1]}"]
    assert web["cpu"].capacity == 1.0  # absolute usage: millicores
    # Steps after the last scrape repeat it (lookback delta): compare within the slice only.
    k = np.rint((web["memory"].t - prom.scrapes[0]) / ps.STEP).astype(int)
    ok = k < len(prom.scrapes)
    assert ok.sum() > 600
    np.testing.assert_allclose(web["memory"].y[ok], prom.pod_mem_bytes[k[ok]], rtol=1e-9)  # containers summed
    cpu = web["cpu"]
    k = np.rint((cpu.t - prom.scrapes[0]) / ps.STEP).astype(int)
    width = 5 if _closed_windows(prom) else 4
    ok = (k >= width) & (k < len(prom.scrapes))
    exp = np.array([prom.pod_cpu_cores[kk - width + 1: kk + 1].mean() * 1000 for kk in k[ok]])
    np.testing.assert_allclose(cpu.y[ok], exp, rtol=1e-9, atol=1e-6)


def test_bad_query_is_a_query_error(prom: ps.PromServer) -> None:
    src = _source(prom, query_node_cpu="rate(node_cpu_seconds_total[5m]")
    with pytest.raises(PrometheusQueryError):
        src.node_series()


def test_unreachable_url_fails_fast() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    src = PrometheusSource(PrometheusSettings(url=url, timeout_s=2.0, retries=1))
    t0 = time.monotonic()
    with pytest.raises(PrometheusUnavailable) as err:
        src.node_series()
    assert time.monotonic() - t0 < 3.0
    assert err.value.url == url and url in str(err.value) and "Connection" in err.value.cause


def test_slow_prometheus_times_out() -> None:
    """A server that accepts connections and never answers must not hang a refresh."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        src = PrometheusSource(PrometheusSettings(url=url, timeout_s=0.5, retries=2))
        t0 = time.monotonic()
        with pytest.raises(PrometheusUnavailable) as err:
            src.node_series()
        assert time.monotonic() - t0 < 3.0
        assert "timed out" in err.value.cause.lower() or "timeout" in err.value.cause.lower()
    finally:
        stop.set()
        th.join(2)
        for c in held:
            c.close()
        listener.close()


def test_prometheus_stopped_mid_run_keeps_last_forecasts(prom: ps.PromServer) -> None:
    store = ForecastStore(StoreSettings(stale_after_s=3600.0, horizon_s=600.0))
    src = _source(prom, timeout_s=2.0)
    forecaster = get_forecaster("last-value")
    assert store.refresh(src, forecaster)
    before = store.get("worker-0", "cpu")
    assert before is not None and not before.stale and store.last_error is None
    ok_at = store.last_success
    prom.stop()
    try:
        t0 = time.monotonic()
        assert not store.refresh(src, forecaster)
        assert time.monotonic() - t0 < 5.0
        assert store.last_error is not None and "PrometheusUnavailable" in store.last_error
        assert prom.url in store.last_error
        assert store.last_success == ok_at
        after = store.get("worker-0", "cpu")
        assert after is not None and after.stale and after.mean == before.mean
        assert any("refresh failing" in n for n in after.notes)
        assert store.describe()["consecutive_failures"] == 1
    finally:
        prom.start()
    assert store.refresh(src, forecaster)
    fresh = store.get("worker-0", "cpu")
    assert fresh is not None and not fresh.stale and store.last_error is None


def test_long_history_widens_the_step_instead_of_failing(prom: ps.PromServer) -> None:
    """8 days at a 60 s step is 11,520 points per series: Prometheus answers HTTP 400 ("exceeded maximum
    resolution of 11,000 points"). The source widens the step to stay under the limit."""
    src = _source(prom, history_s=8 * 86400, step_s=60)
    assert src.step_s() == 63
    out = src.node_series()
    cpu = out[sorted(out)[0]]["cpu"]
    assert np.all(np.diff(cpu.t[:-1]) % 63 == 0)  # whole steps, then the step at "now" (a whole minute)
    assert np.isfinite(cpu.y).sum() > 100


def test_default_history_is_long_enough_for_the_default_model() -> None:
    from forecasting.models import DEFAULT_FORECASTER
    from forecasting.models._base import STEP_S

    model = get_forecaster(DEFAULT_FORECASTER)
    settings = PrometheusSettings()
    assert settings.history_s >= model.min_bins * STEP_S  # else every node silently falls back to EWMA
    assert settings.history_s / settings.step_s <= 11_000


def test_class_usage_from_the_pods_cadvisor_history(prom: ps.PromServer) -> None:
    """kso plan --prometheus: a workload class's usage is its running pods' measured usage over the last hour
    (pooled samples: mean and spread), read from the real server."""
    from kso.core.objects import pod_from_k8s
    from optimizer.plan.cluster_problem import MIN_USAGE_SAMPLES, class_usage_from_history, pod_usage_samples
    from optimizer.plan.problem import class_key
    from tests.support.fixtures import make_pod

    raw = make_pod(ps.POD[1], cpu="2", memory="4Gi", namespace=ps.POD[0], node="worker-0")
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9",
                                           "uid": "rs-1", "controller": True}]
    pod = pod_from_k8s(raw)
    end = float(prom.scrapes[-1])
    series = _source(prom, history_s=3600).pod_series(now=end)
    model = class_usage_from_history([pod], pod_usage_samples(series))[class_key(pod)]
    t = series[pod.key]["memory"].t
    k = np.rint((t - prom.scrapes[0]) / ps.STEP).astype(int)
    truth = prom.pod_mem_bytes[k]
    assert len(truth) >= MIN_USAGE_SAMPLES
    assert model.source == "history"
    assert model.mean["memory"] == pytest.approx(truth.mean(), rel=1e-9)
    assert model.std["memory"] == pytest.approx(truth.std(), rel=1e-9)
    assert 0 < model.mean["cpu"] < 2000  # millicores, below the 2-core request this pod never reaches
    # a pod without history gives nothing (its class counts at its requests)
    assert class_usage_from_history([pod], {}) == {}


def test_lagging_node_is_not_read_as_busy(prom: ps.PromServer) -> None:
    """An idle node whose newest scrapes are 2-3 minutes older than the query end read
    30-70 % busy (rate() over a partial window, extrapolated). Steps whose newest raw sample is more than one
    scrape interval old are dropped, and the node's series and forecast are marked."""
    now = float(prom.scrapes[-1]) + ps.STEP + 1.0  # query end: one minute after the healthy nodes' last scrape
    end = math.floor(now / ps.STEP) * ps.STEP
    unchecked = _source(prom, query_node_cpu_newest="", query_node_memory_newest="").node_series(now)[ps.LAG_NODE]
    assert unchecked["cpu"].y[-1] > 0.2, unchecked["cpu"].y[-5:]  # the failure the check exists for

    src = _source(prom)
    out = src.node_series(now)
    for res, truth in (("cpu", ps.LAG_CPU), ("memory", ps.LAG_MEM)):
        s = out[ps.LAG_NODE][res]
        fin = np.isfinite(s.y)
        np.testing.assert_allclose(s.y[fin][-30:], truth, atol=1e-6, err_msg=res)
        # newest scrape at end - 3 min: steps end and end - 1 min are partial; end - 2 min is the newest kept
        assert s.t[-1] == end - ps.LAG_SCRAPES * ps.STEP, (s.t[-1] - end)
        assert LAGGING_SAMPLES in s.flags and any("behind the query end" in n for n in s.notes)
    assert any(f"{ps.LAG_NODE}/cpu:" in n and "partial windows" in n for n in src.notes)
    for node in ("worker-0", "worker-3"):  # scraped up to a minute before the end: untouched, unmarked
        assert out[node]["cpu"].t[-1] == end and LAGGING_SAMPLES not in out[node]["cpu"].flags

    store = ForecastStore(StoreSettings(stale_after_s=900.0, horizon_s=1800.0, refresh_s=60.0))
    assert store.refresh(src, get_forecaster(), 1800.0, now=now)
    fc = store.get(ps.LAG_NODE, "cpu")
    assert fc is not None and not fc.stale and LAGGING_SAMPLES in fc.flags
    assert fc.p95 < ps.LAG_CPU + 0.01 and fc.mean < ps.LAG_CPU + 0.01, fc
    healthy = store.get("worker-0", "cpu")
    assert healthy is not None and LAGGING_SAMPLES not in healthy.flags


@pytest.mark.parametrize("step", [ps.STEP, 300])
def test_incremental_reads_give_what_a_whole_read_gives(prom: ps.PromServer, step: int) -> None:
    """A refresh reads only the steps since the last one (plus KSO_PROMETHEUS_OVERLAP) and keeps the rest: the series
    are the same, step for step, as a read of the whole history at the same "now" (the fixture's lagging node, gap,
    counter reset, NaN and duplicate series included)."""
    kept = _source(prom, step_s=step, overlap_s=600.0)
    t0 = float(prom.scrapes[-1]) - 3600.0 + 30.0  # half a minute past a whole minute: a step at "now" of its own
    for k in range(8):
        now = t0 + 60.0 * k + (240.0 if k == 7 else 0.0)  # the last one skips 4 minutes
        got = kept.node_series(now)
        assert kept.last_read == ("full" if k == 0 else "incremental"), k
        whole = _source(prom, step_s=step, overlap_s=0.0).node_series(now)
        assert sorted(got) == sorted(whole)
        for node, per in whole.items():
            for res, s in per.items():
                g = got[node][res]
                np.testing.assert_array_equal(g.t, s.t, err_msg=f"{node}/{res} at {k}")
                np.testing.assert_allclose(g.y, s.y, rtol=0, atol=1e-12, equal_nan=True, err_msg=f"{node}/{res} at {k}")
                assert g.flags == s.flags and g.capacity == s.capacity
    # "now" going back, or the mapping changed: the whole history again
    kept.node_series(t0)
    assert kept.last_read == "full"


def test_freshness_is_not_read_over_the_whole_history(prom: ps.PromServer) -> None:
    """The newest-sample query (timestamp() per raw series) took 12-18 s as a range query over 7 days at 80 series: it
    is evaluated over the newest steps only, so a refresh costs Prometheus about as much as the utilisation queries."""
    seen: list[tuple[str, float]] = []
    src = _source(prom, step_s=300, history_s=13 * 3600)
    real = src._range

    def spy(query: str, start: float, end: float) -> list:  # type: ignore[type-arg]
        seen.append((query, end - start))
        return real(query, start, end)

    src._range = spy  # type: ignore[method-assign]
    src.node_series()
    newest = [span for q, span in seen if q in (src.settings.query_node_cpu_newest, src.settings.query_node_memory_newest)]
    assert len(newest) == 2 and max(newest) <= max(src.settings.overlap_s, 900.0), seen


def test_series_without_a_node_name_are_warned_about_once(prom: ps.PromServer, caplog: pytest.LogCaptureFixture) -> None:
    """A running kso reads every minute: series its mapping cannot name are a WARNING the first time, DEBUG after."""
    import logging

    src = _source(prom, node_mapping="REGEX", node_regex=r"^(10\.0\.0\.[12]):9100$")
    with caplog.at_level(logging.DEBUG, logger="kso.forecasting.prometheus"):
        for _ in range(3):
            assert sorted(src.node_series()) == ["10.0.0.1", "10.0.0.2"] and src.unmapped
    said = [r for r in caplog.records if "without a node name" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG], said
