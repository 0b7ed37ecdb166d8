"""Bounded holding in the safe filter: a pod the safe rule refuses on every node it is offered, pending at
least KSO_SAFE_MAX_HOLD_S since its creationTimestamp, is passed to the least-risk node(s); nothing else changes.

Hand-made nodes with annotated load (cpu millicores, memory MB) on 4-core / 8 GiB nodes; the clock is injected."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from extender.config import load_config
from extender.protocol import parse_extender_args
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.objects import parse_timestamp, pod_from_k8s
from kso.core.safety import held_past, least_risk
from tests.support.fixtures import make_node, make_pod, make_state

CREATED = "2026-11-23T18:00:00Z"
T0 = parse_timestamp(CREATED)


def loaded(name: str, free_cpu: int, std_cpu: int = 200) -> dict[str, Any]:
    """A 4-core node with ``free_cpu`` millicores free on average (std ``std_cpu``) and memory idle."""
    return make_node(name, annotations={"mean-free-cpu": str(free_cpu), "std-free-cpu": str(std_cpu),
                                        "mean-free-memory": "8000", "std-free-memory": "10"})


def pod(created: Any = CREATED, name: str = "held") -> dict[str, Any]:
    body = make_pod(name, cpu="200m", memory="64Mi")
    if created is not None:
        body["metadata"]["creationTimestamp"] = created
    return body


def extender(nodes: list[dict[str, Any]], now: float, **env: str) -> Extender:
    ext = Extender(load_config({"KSO_AGENTS": "safe", "KSO_CLUSTER_SOURCE": "SNAPSHOT", **env}), make_state(nodes),
                   RecordingBinder())
    ext.agents["safe"].clock = lambda: now
    return ext


def filter_call(ext: Extender, body: dict[str, Any], names: list[str]) -> dict[str, Any]:
    import orjson

    return ext.filter(parse_extender_args(orjson.dumps({"Pod": body, "NodeNames": names})))


def released(ext: Extender) -> float:
    return ext.metrics.registry.get_sample_value("kso_extender_safe_released_total") or 0.0


# hot-a is the least loaded of the hot nodes (free 500m of 4000 with the pod's 200m: ~92% util), hot-b and hot-c
# hotter; every one is above U* = 90% on average, so the rule refuses all three.
HOT = [loaded("hot-a", 500), loaded("hot-b", 300), loaded("hot-c", 300)]
NAMES = ["hot-a", "hot-b", "hot-c"]


def test_held_less_than_the_hold_is_refused_everywhere() -> None:
    ext = extender(HOT, now=T0 + 299.0)
    reply = filter_call(ext, pod(), NAMES)
    assert reply["NodeNames"] == []
    assert set(reply["FailedNodes"]) == set(NAMES)
    assert released(ext) == 0


def test_held_past_the_hold_passes_only_the_least_risk_node() -> None:
    ext = extender(HOT, now=T0 + 300.0)
    reply = filter_call(ext, pod(), NAMES)
    assert reply["NodeNames"] == ["hot-a"]
    assert set(reply["FailedNodes"]) == {"hot-b", "hot-c"}  # the others keep their reasons
    assert all(r.startswith("safe-overload: cpu P(util > 90%)") for r in reply["FailedNodes"].values())
    assert released(ext) == 1
    # the note says why, in explain
    rows = {r["node"]: r for r in ext.explain(pod_from_k8s(pod()), ext.state.view(NAMES))["nodes"]}
    assert rows["hot-a"]["passed"] and not rows["hot-b"]["passed"]
    (note,) = rows["hot-a"]["notes"]
    assert "held 300 s >= KSO_SAFE_MAX_HOLD_S 300 s" in note and "least risk P(util > 90%) = " in note


def test_ties_at_the_least_risk_all_pass() -> None:
    ext = extender([loaded("hot-b", 300), loaded("hot-c", 300), loaded("hot-d", 100)], now=T0 + 3600.0)
    reply = filter_call(ext, pod(), ["hot-b", "hot-c", "hot-d"])
    assert reply["NodeNames"] == ["hot-b", "hot-c"]
    assert list(reply["FailedNodes"]) == ["hot-d"]


@pytest.mark.parametrize("created", [None, "", "yesterday", 12345, "2026-13-45T99:00:00Z"])
def test_no_usable_timestamp_is_never_released(created: Any) -> None:
    ext = extender(HOT, now=T0 + 10**9)
    reply = filter_call(ext, pod(created), NAMES)
    assert reply["NodeNames"] == [] and set(reply["FailedNodes"]) == set(NAMES)
    assert released(ext) == 0


def test_a_node_that_passes_leaves_the_call_unchanged() -> None:
    nodes = [*HOT, loaded("cool", 3000)]
    held = filter_call(extender(nodes, now=T0 + 10**6), pod(), [*NAMES, "cool"])
    fresh = filter_call(extender(nodes, now=T0), pod(), [*NAMES, "cool"])
    assert held == fresh
    assert held["NodeNames"] == ["cool"] and set(held["FailedNodes"]) == set(NAMES)


def test_zero_releases_at_once_and_inf_never() -> None:
    now = filter_call(extender(HOT, now=T0, KSO_SAFE_MAX_HOLD_S="0"), pod(), NAMES)
    assert now["NodeNames"] == ["hot-a"]
    never = extender(HOT, now=T0 + 10**9, KSO_SAFE_MAX_HOLD_S="inf")
    assert never.agents["safe"].params.max_hold_s == float("inf")
    assert filter_call(never, pod(), NAMES)["NodeNames"] == []


def test_the_pod_memo_keys_on_the_creation_timestamp() -> None:
    from kso.core.objects import PodMemo

    memo = PodMemo()
    a, b = pod(), pod("2026-11-23T19:00:00Z")
    for body in (a, b):
        body["metadata"]["resourceVersion"] = "7"
    assert memo.parse(a).created == CREATED
    assert memo.parse(b).created == "2026-11-23T19:00:00Z"


def test_the_rule() -> None:
    assert held_past(100.0, 400.0, 300.0) and not held_past(100.0, 399.0, 300.0) and not held_past(None, 1e12, 0.0)
    assert held_past(100.0, 100.0, 0.0) and not held_past(100.0, 1e18, float("inf"))
    assert least_risk(np.array([0.5, 0.4, 0.4 + 1e-12, 0.41])).tolist() == [False, True, True, False]
    assert parse_timestamp("2026-11-23T18:00:00+01:00") == T0 - 3600.0
