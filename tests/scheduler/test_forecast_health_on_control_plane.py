"""kso scheduler's forecast health on the real control plane (etcd + kube-apiserver) with a Prometheus URL nothing
listens at: the failed refreshes counted by reason and the nodes without load data on its /metrics (as kso extender
has them), and "judging without load data since T" on its status page (/json)."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

from kubernetes import client

from kso.core.net import free_port
from scheduler.cli import start
from tests.support.fixtures import make_node, until


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:  # noqa: S310 - loopback
        return bytes(r.read())


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def test_failing_forecasts_show_on_metrics_and_the_status_page(control_plane: Any) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    node = make_node("fh-bare", cpu="4")
    node["metadata"].pop("resourceVersion")
    core.create_node(node)
    url = f"http://127.0.0.1:{free_port()}"
    env = {"KSO_PLAN_POLICY": "NONE", "KSO_SCHEDULER_RELIST_S": "0", "KSO_PROMETHEUS_URL": url,
           "KSO_PROMETHEUS_TIMEOUT": "1", "KSO_PROMETHEUS_RETRIES": "0", "KSO_FORECAST_REFRESH": "1"}
    sched = start(["kso-fh"], env=env, api_client=control_plane.api_client(), debug_address="127.0.0.1:0",
                  sync_timeout_s=30, leader_elect=False)
    try:
        health = sched.forecast_health
        assert health is not None
        until(lambda: health.store.status.consecutive_failures >= 2, 30, "two failed refreshes")
        text = _get(sched.debug_port, "/metrics").decode()
        assert _metric(text, 'kso_forecast_refresh_failures_total{reason="unreachable"}') >= 2
        assert _metric(text, "kso_forecast_consecutive_failures") >= 2
        assert _metric(text, "kso_forecast_age_seconds") == float("inf")
        assert _metric(text, "kso_forecast_nodes_without_load_data") >= 1  # fh-bare at least (the plane is shared)
        status = json.loads(_get(sched.debug_port, "/json"))["scheduler"]["forecasts"]
        assert status["condition"].startswith("judging without load data since "), status
        assert status["source"] == url and status["refresh_failures"]["unreachable"] >= 2
    finally:
        sched.close()
        core.delete_node("fh-bare")
