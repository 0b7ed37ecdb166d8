"""Forecast health in kso extender's /metrics and /readyz, on a real Prometheus (backfilled from real traces,
tests/support/prom_server.py) that answers, then dies, and on a URL nothing listens at: where each node's load data
comes from, the forecasts' age, refreshes failed by reason, and "judging without load data since T"; a source that
fails is logged once when it starts failing, counted after."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import orjson
import pytest

from extender.app import create_app
from extender.config import load_config
from extender.demo import BackgroundServer, Client
from extender.server import build
from kso.core.net import free_port
from tests.support import prom_server as ps
from tests.support.fixtures import make_node
from tests.support.kube_cases import wait_for

ANNOTATED = {"mean-free-cpu": "3000", "std-free-cpu": "100", "mean-free-memory": "6000", "std-free-memory": "100"}


def _snapshot(tmp_path: Path, *nodes: tuple[str, dict[str, str] | None]) -> dict[str, str]:
    """Settings serving a snapshot of just these nodes (as kubectl get nodes -o json)."""
    path = tmp_path / "cluster.json"
    path.write_bytes(orjson.dumps({"kind": "List", "items": [
        make_node(name, cpu="4000m", memory="8Gi", annotations=annotations) for name, annotations in nodes]}))
    return {"KSO_CLUSTER_SOURCE": "SNAPSHOT", "KSO_SNAPSHOT": str(path), "KSO_PLAN_POLICY": "none"}


def _metric(text: str, name: str, labels: str = "") -> float:
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    assert found, f"{name}{labels} not in /metrics:\n{text}"
    return float(found.group(1))


def test_a_source_that_never_answers_is_counted_logged_once_and_said_in_readyz(caplog: pytest.LogCaptureFixture,
                                                                              tmp_path: Path) -> None:
    caplog.set_level(logging.DEBUG, logger="kso.forecasting.store")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    nodes = _snapshot(tmp_path, ("bare-1", None), ("bare-2", None), ("annotated", ANNOTATED))
    config = load_config({**nodes, "KSO_PROMETHEUS_URL": url, "KSO_PROMETHEUS_TIMEOUT": "1",
                          "KSO_PROMETHEUS_RETRIES": "0", "KSO_FORECAST_REFRESH": "1"})
    started = time.time()
    running = build(config)
    try:
        ext = running.extender
        assert wait_for(lambda: ext.forecast_status.consecutive_failures >= 3, 30)
        with BackgroundServer(create_app(ext)) as srv:
            c = Client(srv.port)
            text = c.get("/metrics")[1].decode()
            assert _metric(text, "kso_forecast_refresh_failures_total", '{reason="unreachable"}') >= 3
            assert _metric(text, "kso_forecast_refresh_failures_total", '{reason="timeout"}') == 0
            assert _metric(text, "kso_forecast_nodes_without_load_data") == 2
            assert _metric(text, "kso_forecast_nodes", '{source="annotations"}') == 1
            assert _metric(text, "kso_forecast_nodes", '{source="forecast"}') == 0
            since = _metric(text, "kso_forecast_no_fresh_forecast_since_timestamp_seconds")
            assert started - 5 <= since <= time.time()
            status, body = c.get("/readyz")
            assert status == 200  # kso still answers safely: ready, but the body says what it judges with
            fc = orjson.loads(body)["forecasts"]
            assert fc["condition"].startswith("judging without load data since ") and "on 2 of 3 nodes" in fc["condition"]
            assert "unreachable" in fc["condition"] and fc["nodes_without_load_data"] == 2
            assert fc["without_load_data_since"] and fc["refresh_failures"]["unreachable"] >= 3
    finally:
        running.close()
    failed = [r for r in caplog.records if r.name == "kso.forecasting.store" and "failed" in r.getMessage()]
    loud = [r for r in failed if r.levelno >= logging.WARNING]
    assert len(loud) == 1 and loud[0].levelno == logging.ERROR and url in loud[0].getMessage(), \
        [(r.levelname, r.getMessage()) for r in failed]
    assert len(failed) >= 3  # the rest at DEBUG


@pytest.mark.skipif(ps.prometheus_binaries() is None, reason="prometheus/promtool not installed")
def test_forecast_age_and_nodes_then_prometheus_dies(prom: ps.PromServer, caplog: pytest.LogCaptureFixture,
                                                     tmp_path: Path) -> None:
    caplog.set_level(logging.INFO, logger="kso.forecasting.store")
    # Forecasts go stale KSO_FORECAST_STALE_AFTER after their newest step (the one a scrape interval after the last
    # scrape: its rate window is whole): here 45 s after this test starts.
    stale_after = time.time() - float(prom.scrapes[-1] + ps.STEP) + 45.0
    nodes = _snapshot(tmp_path, ("worker-0", None), ("worker-3", None), ("not-in-prometheus", None))
    config = load_config({**nodes, "KSO_PROMETHEUS_URL": prom.url, "KSO_PROMETHEUS_TIMEOUT": "5",
                          "KSO_PROMETHEUS_HISTORY": str(13 * 3600), "KSO_FORECAST_REFRESH": "1",
                          "KSO_FORECAST_STALE_AFTER": f"{stale_after:.0f}", "KSO_PROMETHEUS_RETRIES": "0"})
    running = build(config)
    try:
        ext = running.extender
        store = ext.forecast_health.store
        assert wait_for(lambda: store.status.successes >= 2, 60), store.describe()
        with BackgroundServer(create_app(ext)) as srv:
            c = Client(srv.port)
            text = c.get("/metrics")[1].decode()
            assert _metric(text, "kso_forecast_nodes", '{source="forecast"}') == 2
            assert _metric(text, "kso_forecast_nodes_without_load_data") == 1
            oldest = _metric(text, "kso_forecast_node_age_seconds", '{stat="max"}')
            assert 0 <= _metric(text, "kso_forecast_node_age_seconds", '{stat="min"}') <= oldest < stale_after
            assert _metric(text, "kso_forecast_refreshes_total") >= 2
            assert 0 < _metric(text, "kso_forecast_refresh_duration_seconds") < 5
            fc = orjson.loads(c.get("/readyz")[1])["forecasts"]
            assert fc["condition"] == "forecasts for 2 of 3 nodes; 1 without load data (no forecast, no annotations)"
            assert fc["without_load_data_since"] is None and fc["last_read"] == "incremental"
            prom.stop()
            try:
                assert wait_for(lambda: store.status.consecutive_failures >= 2, 30)
                text = c.get("/metrics")[1].decode()
                assert _metric(text, "kso_forecast_refresh_failures_total", '{reason="unreachable"}') >= 2
                # the last forecasts stay in use until they are stale, then nothing is fresh
                assert wait_for(lambda: orjson.loads(c.get("/readyz")[1])["forecasts"]["nodes_by_load_data"]["forecast"] == 0,
                             120)
                status, body = c.get("/readyz")
                fc = orjson.loads(body)["forecasts"]
                assert status == 200 and fc["condition"].startswith("judging without load data since "), fc
                assert "refreshes failing since" in fc["condition"] and fc["nodes_without_load_data"] == 3
                since = _metric(c.get("/metrics")[1].decode(), "kso_forecast_no_fresh_forecast_since_timestamp_seconds")
                assert since == pytest.approx(store.fresh_until(), abs=1.0)  # when the freshest forecast went stale
            finally:
                prom.start()
            assert wait_for(lambda: store.status.consecutive_failures == 0, 60)
    finally:
        running.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "kso.forecasting.store" and r.levelno >= logging.WARNING]
    assert sum(" failed (" in m for m in lines) == 1 and sum("works again" in m for m in lines) == 1, lines
