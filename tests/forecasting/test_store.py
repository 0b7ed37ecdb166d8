"""ForecastStore (outages, staleness, threads), ForecastStats (fallback to annotations) and ``kso annotate``."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from forecasting.cli import annotations_for
from forecasting.models import get_forecaster
from forecasting.stats_source import ForecastStats
from forecasting.store import ForecastStore, StoreSettings
from forecasting.traces import TraceSource
from forecasting.types import NodeForecast, UtilisationSeries
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s
from kso.core.stats import AnnotationStats
from tests.support.fixtures import make_node


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FixedForecaster:
    """Test double: a known forecast per (node, resource), so the free numbers can be checked exactly."""

    name = "fixed"

    def __init__(self, table: dict[tuple[str, str], tuple[float, float]], age_s: float = 30.0) -> None:
        self.table = table
        self.age_s = age_s

    def forecast_many(self, series: list[UtilisationSeries], horizon_s: float,
                      now: float | None = None) -> list[NodeForecast]:
        out = []
        for s in series:
            mean, std = self.table.get((s.key, s.resource), (math.nan, math.nan))
            out.append(NodeForecast(s.key, s.resource, mean, std, mean, mean, mean, mean, horizon_s, self.name,
                                    now or 0.0, self.age_s))
        return out


class DictSource:
    name = "dict"

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.fail: Exception | None = None
        self.notes: list[str] = []

    def node_series(self, now: float | None = None) -> dict[str, dict[str, UtilisationSeries]]:
        if self.fail is not None:
            raise self.fail
        t = np.arange(10.0) * 60
        return {n: {r: UtilisationSeries(n, r, t, np.full(10, 0.5)) for r in ("cpu", "memory")} for n in self.nodes}


def test_refresh_with_a_real_model_on_the_embedded_trace() -> None:
    store = ForecastStore(StoreSettings(stale_after_s=600, horizon_s=600))
    src = TraceSource("embedded", n_series=4)
    assert store.refresh(src, get_forecaster("last-value"))
    snap = store.snapshot()
    assert sorted(snap) == ["vm-001", "vm-002", "vm-003", "vm-004"]
    fc = snap["vm-001"]["cpu"]
    assert fc.model == "last-value" and not fc.stale and 0 <= fc.mean <= fc.p95
    assert store.last_error is None and store.last_success is not None


def test_failure_keeps_last_forecasts_marked_stale_then_too_old_falls_back() -> None:
    clock = Clock()
    store = ForecastStore(StoreSettings(stale_after_s=300, horizon_s=600), clock=clock)
    src = DictSource(["n1"])
    fc = FixedForecaster({("n1", "cpu"): (0.25, 0.05), ("n1", "memory"): (0.5, 0.1)}, age_s=30)
    assert store.refresh(src, fc)
    clock.t += 60
    src.fail = ConnectionError("Prometheus at http://prom:9090 unavailable: refused")
    assert not store.refresh(src, fc)
    assert "ConnectionError" in store.last_error and "http://prom:9090" in store.last_error  # type: ignore[operator]
    got = store.get("n1", "cpu")
    assert got is not None and got.stale and got.mean == 0.25
    assert store.age_s("n1", "cpu") == pytest.approx(90)  # 30 s old when computed + 60 s since
    mean, _, age, _ = store.lookup(["n1", "other"])
    assert mean[0, 0] == 0.25 and math.isnan(mean[1, 0]) and math.isinf(age[1, 0])
    # Still within the threshold: ForecastStats keeps using it. Past it: falls back.
    state = ClusterState()
    state.upsert_node(node_from_k8s(make_node("n1", cpu="4", memory="8Gi",
                                              annotations={"mean-free-cpu": "1000", "mean-free-memory": "2000"})))
    stats = ForecastStats(store, clock=clock)
    assert stats.free_stats(state.view(["n1"])).source == ["forecast:fixed"]
    clock.t += 300
    fs = stats.free_stats(state.view(["n1"]))
    assert fs.source == ["annotations"] and fs.mean_free[0].tolist() == [1000, 2000]
    # Recovery clears the error and the stale mark.
    src.fail = None
    assert store.refresh(src, fc)
    assert store.last_error is None and not store.get("n1", "cpu").stale  # type: ignore[union-attr]


def test_source_returning_nothing_counts_as_failure() -> None:
    store = ForecastStore(StoreSettings())
    assert store.refresh(DictSource(["a"]), FixedForecaster({("a", "cpu"): (0.1, 0.0)}))
    assert not store.refresh(DictSource([]), FixedForecaster({}))
    assert "no series" in (store.last_error or "")
    assert store.get("a", "cpu") is not None


def test_forecast_stats_falls_back_per_node_and_resource() -> None:
    clock = Clock()
    store = ForecastStore(StoreSettings(stale_after_s=600), clock=clock)
    table = {("fresh", "cpu"): (0.25, 0.05), ("fresh", "memory"): (0.5, 0.1),
             ("halfnan", "cpu"): (0.4, 0.02),  # memory forecast NaN
             ("over", "cpu"): (1.3, 0.1), ("over", "memory"): (0.2, 0.0)}
    assert store.refresh(DictSource(["fresh", "halfnan", "over", "old"]), FixedForecaster(table))
    ann = {"mean-free-cpu": "1500", "std-free-cpu": "100", "mean-free-memory": "3000", "std-free-memory": "50",
           "forcasted-free-cpu": "1400", "forcasted-free-memory": "2900"}
    state = ClusterState()
    for name in ("fresh", "halfnan", "over", "annotated", "bare"):
        state.upsert_node(node_from_k8s(make_node(name, cpu="4", memory="8Gi",
                                                  annotations=ann if name != "bare" else {})))
    names = ["fresh", "halfnan", "over", "annotated", "bare", "unknown"]
    fs = ForecastStats(store, AnnotationStats(), clock=clock).free_stats(state.view(names))
    assert fs.source == ["forecast:fixed", "forecast:fixed+annotations", "forecast:fixed", "annotations", "none",
                         "none"]
    np.testing.assert_allclose(fs.mean_free[0], [4000 * 0.75, 8192 * 0.5])
    np.testing.assert_allclose(fs.std_free[0], [4000 * 0.05, 8192 * 0.1])
    assert np.isnan(fs.forecast_free[0]).all()
    np.testing.assert_allclose(fs.mean_free[1], [4000 * 0.6, 3000])  # cpu forecast, memory annotation
    assert np.isnan(fs.forecast_free[1, 0]) and fs.forecast_free[1, 1] == 2900
    assert fs.mean_free[2, 0] == 0.0  # overcommitted: nothing free, never negative
    np.testing.assert_allclose(fs.mean_free[3], [1500, 3000])
    assert np.isnan(fs.mean_free[4:]).all()


def test_concurrent_readers_and_refreshes() -> None:
    store = ForecastStore(StoreSettings())
    names = [f"n{i}" for i in range(50)]
    state = ClusterState()
    for n in names:
        state.upsert_node(node_from_k8s(make_node(n)))
    view = state.view(names)
    stats = ForecastStats(store)
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                fs = stats.free_stats(view)
                assert fs.mean_free.shape == (50, 2)
                # A reader sees one refresh's table, never a mix: all nodes share the same mean.
                finite = fs.mean_free[:, 0][np.isfinite(fs.mean_free[:, 0])]
                assert finite.size in (0, 50) and np.unique(finite).size <= 1
                store.snapshot()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for th in threads:
        th.start()
    for i in range(30):
        u = (i % 10) / 10
        store.refresh(DictSource(names), FixedForecaster({(n, r): (u, 0.01) for n in names for r in ("cpu", "memory")}))
    stop.set()
    for th in threads:
        th.join(5)
    assert not errors


def test_annotations_round_trip_through_annotation_stats() -> None:
    """kso annotate's numbers, read back by AnnotationStats, equal ForecastStats' (rounded to units)."""
    store = ForecastStore(StoreSettings())
    store.refresh(DictSource(["n1"]), FixedForecaster({("n1", "cpu"): (0.3, 0.07), ("n1", "memory"): (0.45, 0.02)}))
    node = node_from_k8s(make_node("n1", cpu="8", memory="16Gi"))
    ann = annotations_for(node, store.snapshot()["n1"], "test")
    assert ann["mean-free-cpu"] == "5600" and ann["std-free-cpu"] == "560"
    assert ann["mean-free-memory"] == f"{16384 * 0.55:.0f}" and ann["forcasted-free-memory"] == ann["mean-free-memory"]
    state = ClusterState()
    state.upsert_node(node_from_k8s(make_node("n1", cpu="8", memory="16Gi", annotations=ann)))
    view = state.view(["n1"])
    via_ann = AnnotationStats().free_stats(view)
    via_fc = ForecastStats(store).free_stats(view)
    np.testing.assert_allclose(via_ann.mean_free, via_fc.mean_free, atol=0.5)
    np.testing.assert_allclose(via_ann.std_free, via_fc.std_free, atol=0.5)
