"""A ``kso reoptimize`` target plan is checked as a ``kso plan`` plan is (benchmarks.plan_checker, which
imports no optimizer code), against the cluster as the extender sees it while it follows the plan: the
moved pods evicted and their replacements pending.

Each node states its load before the plan (after the evictions), after it, its capacity and where the
load comes from; each class its pods, rules and usage model. A node no pod leaves keeps its own source
(annotations, requests), checked against the objects; a node pods leave states the re-optimiser's
what-if load ("given"): its load less the evicted pods' usage estimate, which no object holds."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.plan_checker import check_plan
from tests.optimizer.reoptimize_cluster import MOVABLE, U_STAR, node, pod, run_json, state_of
from tests.support.kube_standin import make_node


def _items() -> list[dict[str, Any]]:
    """n1 over its safe bound with three movable web pods; n2 and n3 nearly idle (annotations); n4 without
    annotations (its load is its pods' requests) holding a pod that never moves."""
    nodes = [node("n1", 7900), node("n2", 500), node("n3", 600),
             make_node("n4", cpu="8", memory="16Gi")]
    pods = [pod(f"web-{i}", "n1") for i in range(3)] + [pod("web-3", "n2"),
                                                        pod("solo-0", "n4", owner=("ReplicaSet", "solo"))]
    return ([{"kind": "Node", "apiVersion": "v1", **n} for n in nodes]
            + [{"kind": "Pod", "apiVersion": "v1", **p} for p in pods])


def after_evictions(items: list[dict[str, Any]], evicted: set[tuple[str, str]]) -> dict[str, Any]:
    """The cluster while the plan is followed: each evicted pod's replacement pending (same spec, and for
    the checker's bookkeeping the same name), every other pod where it is."""
    out = []
    for obj in copy.deepcopy(items):
        meta = obj["metadata"]
        if obj["kind"] == "Pod" and (meta.get("namespace", "default"), meta["name"]) in evicted:
            obj["spec"].pop("nodeName", None)
            obj["status"] = {"phase": "Pending"}
        out.append(obj)
    return {"apiVersion": "v1", "kind": "List", "items": out}


def test_a_reoptimize_plan_passes_the_independent_checker(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KSO_PLAN_POLICY", raising=False)
    items = _items()
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code, doc, err = run_json(capsys, "--snapshot", str(path), "--policy", "none")
    assert code == 0, err
    moves = doc["moves"]
    assert moves and {m["pod"] for m in moves} <= MOVABLE and {m["from"] for m in moves} == {"n1"}
    plan = doc["plan"]
    report = check_plan(after_evictions(items, {(m["namespace"], m["pod"]) for m in moves}), plan)
    assert report.ok, report.examples
    assert report.pods_planned == len(moves) and report.pods_pending == len(moves)
    # cpu and memory, before and after, on every node the plan lists
    assert report.risks_recomputed == 4 * len(plan["nodes"]) == 16
    sources = {n: info["loadSource"]["cpu"] for n, info in plan["nodes"].items()}
    assert sources == {"n1": "given", "n2": "annotations", "n3": "annotations", "n4": "requests"}
    assert report.loads_stated == 2  # n1's cpu and memory: its annotated load less the evicted pods'
    n1 = plan["nodes"]["n1"]
    assert n1["before"]["risk"]["cpu"] <= plan["eps"] and n1["after"]["mean"]["cpu"] == n1["before"]["mean"]["cpu"]
    by_node = {n["name"]: n for n in doc["nodes"]}
    for name, info in plan["nodes"].items():  # the plan's risk after is the outcome the command reports
        assert max(info["risk"].values()) == pytest.approx(by_node[name]["riskAfter"], abs=1e-9)


def test_the_plan_of_some_moves_states_the_loads_of_just_those(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan published after some evictions failed: its loads and risks are those of the moves made,
    not of all the planned ones; with measured usage (history) a node whose movable pods stay counts them
    at it, so its load is stated ("given"), not claimed to be its pods' requests."""
    from forecasting.types import NodeForecast
    from optimizer.plan.problem import UsageModel, class_key
    from optimizer.reoptimize.migration import MigrationOptions, plan_migration

    items = _items()
    items.insert(3, {"kind": "Node", "apiVersion": "v1", **make_node("n6", cpu="8", memory="16Gi")})
    items.append({"kind": "Pod", "apiVersion": "v1", **pod("web-4", "n6")})
    state = state_of([o for o in items if o["kind"] == "Node"], [o for o in items if o["kind"] == "Pod"])
    web = next(p for p in state.bound_pods() if p.name == "web-0")
    history = {class_key(web): UsageModel({"cpu": 300.0, "memory": 200.0 * 2**20}, {"cpu": 80.0, "memory": 2**24},
                                          "history")}
    now = 1_700_000_000.0
    forecast = {r: NodeForecast("n3", r, m, s, m, m, m, m, 300.0, "test", now, 0.0)  # share of capacity
                for r, m, s in (("cpu", 0.1, 0.02), ("memory", 0.2, 0.02))}
    result = plan_migration(state, {"n3": forecast}, U_STAR, 0.3,
                            [p for p in state.bound_pods() if p.name.startswith("web-")],
                            MigrationOptions("none", workers=1), class_usage=history, now=now)
    assert len(result.moves) >= 2, result.notes
    done = result.moves[:1]
    plan = orjson.loads(result.plan_for(done, now).to_json())
    report = check_plan(after_evictions(items, {(m.namespace, m.pod) for m in done}), plan)
    assert report.ok, report.examples
    assert report.risks_recomputed == 4 * len(plan["nodes"])
    sources = {n: info["loadSource"]["cpu"] for n, info in plan["nodes"].items()}
    # web-3 stays on n2: counted out at its history and in again, n2's load is its annotations'
    assert sources["n1"] == "given" and sources["n2"] == "annotations" and sources["n3"] == "forecast"
    assert sources["n4"] == "requests" and sources["n6"] == "given"  # web-4 stays, counted at its history
    full = result.plan.nodes["n1"]
    assert plan["nodes"]["n1"]["risk"]["cpu"] > full.risk["cpu"]  # fewer pods left n1 than planned
    assert plan["classes"][done[0].class_key]["pods"] == [f"{done[0].namespace}/{done[0].pod}"]
