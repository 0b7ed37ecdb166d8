"""Recent binds count at their requests until the load statistics can have seen them: the hold is derived from the
statistics source's window (decisions.recent), not a fixed 300 s."""

from __future__ import annotations

import time

import pytest

from decisions.recent import range_seconds, recent_bind_hold_s
from extender.config import load_config
from extender.server import build
from kso.core.objects import pod_from_k8s
from tests.support.fixtures import make_node, make_pod, make_state


def test_range_seconds_reads_the_widest_range_selector() -> None:
    assert range_seconds('1 - avg by ($by) (rate(node_cpu_seconds_total{mode="idle"}[5m]))') == 300
    assert range_seconds("1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes") == 0
    assert range_seconds("max_over_time(x[1h30m]) + rate(y[90s]) + avg_over_time(z[10m:1m])") == 5400


def test_the_annotations_window_by_default() -> None:
    assert recent_bind_hold_s(load_config({})) == 900.0
    assert recent_bind_hold_s(load_config({"KSO_ANNOTATION_WINDOW_S": "600"})) == 600.0


def test_forecasts_add_scrape_rate_window_step_and_refresh() -> None:
    config = load_config({"KSO_PROMETHEUS_URL": "http://127.0.0.1:9", "KSO_ANNOTATION_WINDOW_S": "0"})
    # one scrape (60) + rate(...[5m]) (300) + one step (300) + one refresh (60)
    assert recent_bind_hold_s(config) == 720.0
    config = load_config({"KSO_PROMETHEUS_URL": "http://127.0.0.1:9", "KSO_PROMETHEUS_STEP": "60",
                          "KSO_FORECAST_REFRESH": "30", "KSO_ANNOTATION_WINDOW_S": "0"})
    assert recent_bind_hold_s(config) == 450.0
    # a node without a fresh forecast is judged by its annotations: the longer window holds
    assert recent_bind_hold_s(load_config({"KSO_PROMETHEUS_URL": "http://127.0.0.1:9"})) == 900.0


@pytest.mark.parametrize(("value", "hold"), [("120", 120.0), ("0", 0.0)])
def test_an_explicit_window_overrides_and_zero_is_off(value: str, hold: float) -> None:
    assert recent_bind_hold_s(load_config({"KSO_RECENT_BIND_WINDOW_S": value})) == hold


def test_the_extender_holds_a_bind_until_the_window_has_seen_it() -> None:
    """The extender's node cache keeps a pod it bound in the node's load for the derived hold (900 s from the
    annotations), not 300 s: 400 s later it still counts, after 900 s it does not."""
    running = build(load_config({"KSO_CLUSTER_SOURCE": "DEMO"}))
    try:
        state = running.extender.state
        assert state.recent_window_s == 900.0
    finally:
        running.close()
    state = make_state([make_node("n1")])
    state.recent_window_s = recent_bind_hold_s(load_config({}))
    state.assume(pod_from_k8s(make_pod("p", cpu="1", memory="1Gi")), "n1")
    now = time.time()
    row = state.row_of["n1"]
    state.expire_recent(now + 400)
    assert state.recent[row].tolist() == [1000.0, 1024.0]
    state.expire_recent(now + 901)
    assert state.recent[row].tolist() == [0.0, 0.0]


def test_a_placeholder_bound_by_kube_scheduler_is_not_recent_load() -> None:
    """The capacity signal's placeholders run a pause container: their binds add nothing to kso's view of the node."""
    # a placeholder is known by its owner, a kso capacity Lease (kso.core.capacity.is_placeholder)
    owner = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": "kso-capacity-kso-a", "uid": "l",
              "controller": True}]

    state = make_state([make_node("n1")])
    pending = make_pod("kso-capacity-x", cpu="2", memory="2Gi", namespace="kso-capacity")
    pending["metadata"]["ownerReferences"] = owner
    state.upsert_pod(pod_from_k8s(pending))
    bound = make_pod("kso-capacity-x", cpu="2", memory="2Gi", namespace="kso-capacity", node="n1")
    bound["metadata"]["ownerReferences"] = owner
    state.upsert_pod(pod_from_k8s(bound), observed_binding=True)
    assert state.recent[state.row_of["n1"]].tolist() == [0.0, 0.0]
    other = make_pod("web-1", cpu="2", memory="2Gi", node="n1")
    state.upsert_pod(pod_from_k8s(make_pod("web-1", cpu="2", memory="2Gi")))
    state.upsert_pod(pod_from_k8s(other), observed_binding=True)
    assert state.recent[state.row_of["n1"]].tolist() == [2000.0, 2048.0]
