"""The whole chain on real parts: the real Prometheus (backfilled from real traces) -> PrometheusSource
-> the default forecaster -> ForecastStore (APScheduler job) -> the safe agent of a real extender over
HTTP. When Prometheus dies, the extender keeps answering from the last forecasts and then from the
annotations, never failing a node for a missing metric."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from extender.app import create_app
from extender.config import load_config
from extender.demo import BackgroundServer, Client
from extender.server import build
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s
from tests.support import prom_server as ps
from tests.support.fixtures import make_node, make_pod

pytestmark = pytest.mark.skipif(ps.prometheus_binaries() is None,
                                reason="prometheus/promtool not installed (Debian: apt-get install -y prometheus)")


def _wait(pred, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_safe_agent_uses_prometheus_forecasts(prom: ps.PromServer, tmp_path: Path) -> None:
    # worker-0 has annotations that would reject the pod; its forecast (from its real trace) decides.
    annotated = {"mean-free-cpu": "100", "std-free-cpu": "50", "mean-free-memory": "100", "std-free-memory": "10"}
    state = ClusterState()
    for name in ("worker-0", "worker-3"):
        state.upsert_node(node_from_k8s(make_node(name, cpu="4000m", memory="8Gi", annotations=annotated)))
    state.upsert_node(node_from_k8s(make_node("not-in-prometheus", cpu="4000m", annotations=annotated)))
    state.mark_synced("test")

    def config_with(stale_after_s: float) -> Any:
        return load_config({"KSO_CLUSTER_SOURCE": "DEMO", "KSO_PROMETHEUS_URL": prom.url,
                            "KSO_PROMETHEUS_HISTORY": str(13 * 3600), "KSO_PROMETHEUS_TIMEOUT": "5",
                            "KSO_FORECAST_REFRESH": "2", "KSO_FORECAST_STALE_AFTER": str(math.ceil(stale_after_s))})

    # Staleness counts the age of the newest sample behind a forecast, which depends on when the fixture was built
    # and on the query's windows: a first extender measures it, then the one under test keeps its forecasts fresh
    # for 40 s more (the first refresh on a loaded machine) and stale soon after, so the test waits for staleness,
    # not for a fixed margin.
    probe = build(config_with(24 * 3600), state=state)
    try:
        probe_store = probe.extender.agents["safe"].stats.store  # type: ignore[attr-defined]
        assert _wait(lambda: probe_store.last_success is not None, 60), probe_store.describe()
        age = max(probe_store.age_s(n, r) for n in ("worker-0", "worker-3") for r in ("cpu", "memory"))
    finally:
        probe.close()
    assert math.isfinite(age), "the fixture's workers have no forecast"
    config = config_with(age + 40)
    running = build(config, state=state)
    try:
        store = running.extender.agents["safe"].stats.store  # type: ignore[attr-defined]
        assert _wait(lambda: store.last_success is not None, 60), store.describe()
        with BackgroundServer(create_app(running.extender)) as srv:
            c = Client(srv.port)
            body = {"Pod": make_pod("p", cpu="100m", memory="64Mi"), "NodeNames": ["worker-0", "worker-3", "not-in-prometheus"]}
            _, ex = c.post("/debug/explain", body)
            by = {n["node"]: n for n in ex["nodes"]}
            for node in ("worker-0", "worker-3"):
                assert by[node]["details"]["safe"]["stats_source"].startswith("forecast:"), by[node]
            assert by["not-in-prometheus"]["details"]["safe"]["stats_source"] == "annotations"
            assert not by["not-in-prometheus"]["passed"]  # its annotations say it is full
            # The forecast mean is the node's real utilisation, not the annotation's 97.5%.
            mu = by["worker-0"]["details"]["safe"]["cpu_mu"]
            assert 0.0 <= mu < 0.9, mu
            # Prometheus dies: refreshes fail and the last forecasts stay in use until their newest sample is
            # older than KSO_FORECAST_STALE_AFTER (the backfilled slice ends a minute before now), then the
            # annotations take over; answers stay 200 throughout.
            prom.stop()
            assert _wait(lambda: store.last_error is not None, 30)
            status, ex = c.post("/debug/explain", body)
            assert status == 200 and ex["nodes"][0]["details"]["safe"]["stats_source"] != "none"

            def annotations_only() -> bool:
                ex = c.post("/debug/explain", body)[1]
                return {n["details"]["safe"]["stats_source"] for n in ex["nodes"]} == {"annotations"}

            assert _wait(annotations_only, 120)
            status, flt = c.post("/filter", body)
            assert status == 200 and flt["Error"] == ""
    finally:
        running.close()


def test_without_prometheus_there_are_no_forecasts() -> None:
    """Forecasts are off unless Prometheus is configured: no store, no job, the safe agent reads the annotations."""
    from decisions.forecasts import start_forecasts
    from extender.config import load_config

    assert start_forecasts(load_config({})) is None
    assert start_forecasts(load_config({"KSO_FORECAST_SOURCE": "NONE", "KSO_PROMETHEUS_URL": "http://127.0.0.1:9"})) is None
