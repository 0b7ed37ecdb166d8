"""See before you pack (decisions/sight.py): kso's packing priority and the plan pull pods only onto nodes whose
load is measured and not past KSO_PACK_UNSEEN_MAX of allocatable bound since; the filter is untouched."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from decisions.sight import seen_nodes, unseen_share
from extender.config import load_config
from extender.protocol import parse_extender_args
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from tests.support.fixtures import make_node, make_pod

# 4 cores / 8 GiB, 1 core and 2 GiB of measured use (mean-free in millicores and MB), a little spread
MEASURED = {"mean-free-cpu": "3000", "std-free-cpu": "100", "mean-free-memory": "6144", "std-free-memory": "100"}
PACKING_ONLY = {"KSO_PLAN_POLICY": "NONE", "KSO_WEIGHTS": "pigeon-holing=10"}


def extender(nodes: list[dict[str, Any]], bound: dict[str, int], env: dict[str, str] | None = None) -> Extender:
    """An extender over ``nodes`` with ``bound[node]`` 500m pods running there (bound before the test: seen)."""
    state = ClusterState()
    for node in nodes:
        state.upsert_node(node_from_k8s(node))
    for name, k in bound.items():
        for j in range(k):
            state.upsert_pod(pod_from_k8s(make_pod(f"{name}-b{j}", cpu="500m", memory="512Mi", node=name)))
    state.mark_synced("test")
    return Extender(load_config({**PACKING_ONLY, **(env or {})}), state, RecordingBinder())


def scores(ext: Extender, names: list[str], pod: str = "new") -> dict[str, int]:
    args = parse_extender_args(orjson.dumps({"Pod": make_pod(pod, cpu="500m", memory="512Mi"), "NodeNames": names}))
    return {row["Host"]: row["Score"] for row in ext.prioritize(args)}


def test_no_statistics_anywhere_packing_adds_no_score() -> None:
    """The empty cluster at start-up: requests differ (pigeon would prefer the fuller node) but nothing is measured,
    so kso adds the same score everywhere and kube-scheduler's own scores decide."""
    nodes = [make_node(f"n{i}") for i in range(4)]
    ext = extender(nodes, {"n0": 4, "n1": 1})
    assert set(scores(ext, [f"n{i}" for i in range(4)]).values()) == {0}
    assert ext.metrics.packing_withheld._value.get() == 4
    # the same cluster measured: pigeon-holing ranks the nodes (1..10), as before
    measured = extender([make_node(f"n{i}", annotations=MEASURED) for i in range(4)], {"n0": 4, "n1": 1})
    got = scores(measured, [f"n{i}" for i in range(4)])
    assert min(got.values()) > 0 and len(set(got.values())) > 1
    assert measured.metrics.packing_withheld._value.get() == 0


def test_a_node_without_statistics_gets_no_pull_while_measured_nodes_keep_theirs() -> None:
    """A node the autoscaler just added (no statistics yet), already holding pods: packing would pull there most;
    it gets no pull until its load is measured."""
    nodes = [make_node("old-0", annotations=MEASURED), make_node("old-1", annotations=MEASURED), make_node("added")]
    ext = extender(nodes, {"old-0": 1, "added": 5})
    got = scores(ext, ["old-0", "old-1", "added"])
    assert got["added"] == 0 and min(got["old-0"], got["old-1"]) > 0
    explained = ext.explain(pod_from_k8s(make_pod("new", cpu="500m", memory="512Mi")), ext.state.view(["added"]))
    assert any("load not measured" in note for note in explained["nodes"][0]["notes"])
    assert explained["nodes"][0]["scores"]["pigeon-holing"] == 0


def test_recent_binds_past_the_share_stop_the_pull_until_the_statistics_see_them() -> None:
    """A burst (a Job): binds the statistics have not seen yet. Up to KSO_PACK_UNSEEN_MAX of allocatable the node
    keeps its pull; past it, none; the filter still judges it."""
    nodes = [make_node(f"n{i}", annotations=MEASURED) for i in range(3)]
    ext = extender(nodes, {"n0": 2}, {"KSO_PACK_UNSEEN_MAX": "25"})
    names = ["n0", "n1", "n2"]
    assert scores(ext, names)["n0"] > 0
    for j in range(2):  # 1 core of 4 bound since the statistics: 25%, at the bound
        ext.place(pod_from_k8s(make_pod(f"burst-{j}", cpu="500m", memory="512Mi")), "n0")
    assert scores(ext, names)["n0"] > 0
    ext.place(pod_from_k8s(make_pod("burst-2", cpu="500m", memory="512Mi")), "n0")  # 37.5%: past it
    got = scores(ext, names)
    assert got["n0"] == 0 and got["n1"] > 0
    # with the share at 100%, only the statistics' existence counts
    wide = extender(nodes, {"n0": 2}, {"KSO_PACK_UNSEEN_MAX": "100"})
    for j in range(3):
        wide.place(pod_from_k8s(make_pod(f"burst-{j}", cpu="500m", memory="512Mi")), "n0")
    assert scores(wide, names)["n0"] > 0


def test_a_spreading_policy_is_never_withheld() -> None:
    nodes = [make_node(f"n{i}") for i in range(3)]
    ext = extender(nodes, {"n0": 3}, {"POLICY_OBJECTIVE": "LOAD_BALANCE"})
    assert ext.packing == frozenset()
    got = scores(ext, ["n0", "n1", "n2"])
    assert got["n1"] == got["n2"] > got["n0"]


@pytest.mark.parametrize("share", [0.0, 0.1, 0.25, 1.0])
def test_seen_nodes_is_the_rule_of_the_docstring(share: float) -> None:
    state = ClusterState(recent_window_s=1e9)
    for i in range(5):
        state.upsert_node(node_from_k8s(make_node(f"n{i}", annotations=MEASURED if i != 4 else None)))
    for i, cpu in enumerate(["0", "400m", "1", "2", "1"]):
        if cpu != "0":
            state.assume(pod_from_k8s(make_pod(f"p{i}", cpu=cpu, memory="64Mi")), f"n{i}")
    view = state.view([f"n{i}" for i in range(5)])
    measured = ~np.isnan(view.mean_free).any(axis=1)
    want = [measured[i] and max(c / 4000, 64 / 8192 if c else 0.0) <= share
            for i, c in enumerate([0, 400, 1000, 2000, 1000])]
    assert seen_nodes(measured, view, share).tolist() == want
    assert unseen_share(view)[3] == pytest.approx(0.5)


class FixedPlan:
    """A plan with free slots on the named nodes for every pod (the engine's use of a plan is under test, not the
    plan cache)."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes

    def slots_for(self, pod: Any) -> dict[str, int]:
        return dict.fromkeys(self.nodes, 3)

    def consume(self, pod: Any, node: str) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {}

    def age_s(self) -> float:
        return 0.0


def test_the_plan_pulls_only_onto_measured_nodes() -> None:
    """A plan solved before any statistics (or naming a node added since) does not pull onto an unmeasured node."""
    state = ClusterState()
    for node in (make_node("seen", annotations=MEASURED), make_node("blind")):
        state.upsert_node(node_from_k8s(node))
    state.mark_synced("test")
    ext = Extender(load_config(PACKING_ONLY), state, RecordingBinder(), plan=FixedPlan(["seen", "blind"]))
    got = scores(ext, ["seen", "blind"])
    assert got == {"seen": 10, "blind": 0}
    only_blind = Extender(load_config(PACKING_ONLY), state, RecordingBinder(), plan=FixedPlan(["blind"]))
    assert only_blind.plan_nodes(only_blind.call_of(parse_extender_args(orjson.dumps(
        {"Pod": make_pod("p"), "NodeNames": ["seen", "blind"]})))) is None
