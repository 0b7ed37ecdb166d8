"""optimizer.plan.cluster_problem's build from a copy of the state (ClusterState.plan_copy, taken under the lock; the
build without it): the problem the build under the lock made, a statistics check that agrees with the built
problem's, a build that needs no lock, and a plan solve that builds nothing when no node has load statistics."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from benchmarks.clusters import cluster_state, generate
from extender.plan_cache import PlanCache, PlanSolver, has_load_statistics
from forecasting.types import NodeForecast
from kso.core.cluster import ClusterState
from kso.core.node_costs import DEFAULT_COST_KEY
from kso.core.settings import load_settings
from optimizer.plan.cluster_problem import (
    DEFAULT_SCHEDULER,
    FORECAST_NAMES,
    copy_has_statistics,
    node_cost,
    problem_from_copy,
    problem_from_state,
)
from optimizer.plan.problem import LOAD_RESOURCES, NodeLoad, PlacementProblem, group_classes
from optimizer.settings import PlanSettings

NOW = 1_800_000_000.0


def built_under_the_lock(state: ClusterState, forecasts: dict[str, Any], names: tuple[str, ...] = ()) -> PlacementProblem:
    """The build as it was, every pod's requests summed per node under the state's lock: the reference."""
    pods = state.pending_pods()
    nodes: list[Any] = []
    ages: list[float] = []
    from optimizer.plan.problem import PlanNode

    with state.lock:
        for name in state.node_names():
            info = state.node(name)
            if info is None or not info.ready:
                continue
            on_node = state.pods_on(name)
            requested: dict[str, float] = {}
            for p in on_node:
                for r, v in p.requests.items():
                    requested[r] = requested.get(r, 0.0) + v
            load = {}
            view = state.view([name])
            for ri, r in enumerate(LOAD_RESOURCES):
                f = forecasts.get(name, {}).get(FORECAST_NAMES[r])
                cap = info.allocatable.get(r, 0.0)
                scale = (1.0, 1.0 / 2**20)[ri]
                free_mean, free_std = view.mean_free[0, ri] / scale, view.std_free[0, ri] / scale
                if f is not None and not f.stale and f.age_s(NOW) <= 900 and math.isfinite(f.mean):
                    load[r] = NodeLoad(f.mean * cap, f.std * cap if math.isfinite(f.std) else 0.0, "forecast")
                    ages.append(f.age_s(NOW))
                elif math.isfinite(free_mean):
                    load[r] = NodeLoad(max(cap - free_mean, 0.0), free_std if math.isfinite(free_std) else 0.0,
                                       "annotations")
                else:
                    load[r] = NodeLoad(source="requests")
            nodes.append(PlanNode(name, dict(info.allocatable), requested, load,
                                  node_cost(info.labels, info.annotations, DEFAULT_COST_KEY), info, bool(on_node)))
        baseline = list(state.pods)
    ours = [p for p in pods if not names or (p.scheduler_name or DEFAULT_SCHEDULER) in names]
    classes = group_classes([p for p in ours if not p.node_name and not p.terminal])
    return PlacementProblem(nodes, classes, 0.9, 0.3, {"forecast_max_s": max(ages) if ages else math.nan}, baseline)


def forecast(node: str, resource: str, mean: float, *, stale: bool = False, age_s: float = 60.0) -> NodeForecast:
    return NodeForecast(node, resource, mean, 0.05, mean, mean, mean, mean, 900.0, "test", NOW, age_s, stale)


LOAD_ANNOTATIONS = ("mean-free-cpu", "mean-free-memory", "std-free-cpu", "std-free-memory")


def bare_state(nodes: int, pods: int, seed: int) -> ClusterState:
    """A generated cluster without kube-safe-scheduler's load annotations (no statistics of any kind)."""
    state = cluster_state(generate(nodes, pods, seed=seed))
    for name in state.node_names():
        info = state.node(name)
        assert info is not None
        state.upsert_node(replace(info, annotations={k: v for k, v in info.annotations.items()
                                                     if k not in LOAD_ANNOTATIONS}))
    return state


def varied_state() -> tuple[ClusterState, dict[str, Any]]:
    """A generated cluster (GPU nodes and pods, DaemonSets, BestEffort pods, Jobs), with kube-safe-scheduler's
    annotations on some nodes, one node not ready, pods on a node the store does not know, pods moved and deleted."""
    from kso.core.objects import NodeInfo

    state = cluster_state(generate(40, 120, seed=3, bound_pods=300))
    names = state.node_names()
    for i, name in enumerate(names[:8]):
        info = state.node(name)
        assert info is not None
        ann = {**info.annotations, "mean-free-cpu": str(1000 + i), "mean-free-memory": "2048"}
        if i % 2:
            ann["std-free-cpu"] = "250"
        state.upsert_node(replace(info, annotations=ann))
    down = state.node(names[9])
    assert isinstance(down, NodeInfo)
    state.upsert_node(replace(down, ready=False))
    bound = state.bound_pods()
    state.upsert_pod(replace(bound[0], uid="ghost", node_name="not-a-node"))
    for pod in bound[1:40:3]:
        state.remove_pod(pod.uid)
    for pod in bound[40:60]:
        state.upsert_pod(replace(pod, node_name=names[-1]))
    forecasts = {names[10]: {"cpu": forecast(names[10], "cpu", 0.4), "memory": forecast(names[10], "memory", 0.3)},
                 names[11]: {"cpu": forecast(names[11], "cpu", 0.5, stale=True)},
                 names[12]: {"memory": forecast(names[12], "memory", 0.6, age_s=5000)}}
    return state, forecasts


@pytest.mark.parametrize("scheduler_names", [(), ("default-scheduler",), ("kso-scheduler",)])
def test_the_build_from_a_copy_is_the_build_under_the_lock(scheduler_names: tuple[str, ...]) -> None:
    state, forecasts = varied_state()
    want = built_under_the_lock(state, forecasts, scheduler_names)
    got = problem_from_state(state, forecasts, 0.9, 0.3, now=NOW, scheduler_names=scheduler_names)
    assert [n.name for n in got.nodes] == [n.name for n in want.nodes]
    for g, w in zip(got.nodes, want.nodes, strict=True):
        # The copy's requests are the store's columns (zero columns left out); the reference summed each pod.
        assert g.requested == {r: v for r, v in w.requested.items() if v != 0.0}, g.name
        assert (g.allocatable, g.load, g.cost, g.info, g.has_pods) == (w.allocatable, w.load, w.cost, w.info,
                                                                       w.has_pods), g.name
    assert any(n.has_pods for n in got.nodes) and not all(n.has_pods for n in got.nodes)
    assert {n.load["cpu"].source for n in got.nodes} == {"forecast", "annotations", "requests"}
    assert [(c.key, c.count, c.members) for c in got.classes] == [(c.key, c.count, c.members) for c in want.classes]
    assert got.baseline_pods == want.baseline_pods and "ghost" in got.baseline_pods
    assert got.input_ages["forecast_max_s"] == want.input_ages["forecast_max_s"]


def test_statistics_are_known_from_the_copy_as_from_the_built_problem() -> None:
    state, forecasts = varied_state()
    names = state.node_names()
    cases = {
        "annotations and forecasts": (state, forecasts),
        "no statistics": (bare_state(12, 20, seed=1), {}),
        "stale and old forecasts only": (bare_state(12, 20, seed=1), {
            "node-0001": {"cpu": forecast("node-0001", "cpu", 0.5, stale=True)},
            "node-0002": {"memory": forecast("node-0002", "memory", 0.5, age_s=5000)}}),
        "a fresh forecast": (bare_state(12, 20, seed=1), {
            "node-0003": {"memory": forecast("node-0003", "memory", 0.5)}}),
    }
    annotated_down = bare_state(4, 6, seed=2)
    info = state.node(names[0])
    assert info is not None and "mean-free-cpu" in info.annotations
    annotated_down.upsert_node(replace(info, ready=False))
    cases["annotations on a node that is not ready"] = (annotated_down, {})
    seen = {}
    for label, (st, fc) in cases.items():
        copy = st.plan_copy()
        seen[label] = copy_has_statistics(copy, fc, now=NOW)
        assert seen[label] == has_load_statistics(problem_from_copy(copy, fc, 0.9, 0.3, now=NOW)), label
    assert seen == {"annotations and forecasts": True, "no statistics": False, "stale and old forecasts only": False,
                    "a fresh forecast": True, "annotations on a node that is not ready": False}


def test_the_build_needs_no_lock() -> None:
    state, forecasts = varied_state()
    copy = state.plan_copy()
    want = problem_from_copy(copy, forecasts, 0.9, 0.3, now=NOW)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with state.lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        built: list[PlacementProblem] = []
        builder = threading.Thread(target=lambda: built.append(problem_from_copy(copy, forecasts, 0.9, 0.3, now=NOW)))
        builder.start()
        builder.join(10)
        assert built and built[0] == want  # built while another thread holds the lock
    finally:
        release.set()
        holder.join()


def test_no_problem_is_built_while_no_node_has_load_statistics() -> None:
    state = bare_state(8, 12, seed=0)
    assert state.pending_pods()
    asked: list[str] = []
    outcomes: list[str] = []

    def usage(seen: object) -> dict[str, Any]:
        asked.append("usage")
        return {}

    cache = PlanCache(load_settings(PlanSettings, {"KSO_SOLVER_TIME_LIMIT_S": "3"}), state)
    solver = PlanSolver(cache, usage=usage, on_solved=lambda result, seconds: outcomes.append(result))
    try:
        started = time.perf_counter()
        assert solver.solve() is None
        assert time.perf_counter() - started < 5
    finally:
        solver.close()
    assert outcomes == ["no-statistics"] and asked == []  # neither the class usage nor a problem was asked for
