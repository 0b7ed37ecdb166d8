"""Every risk a plan file reports is recomputed from the file and the cluster's objects alone
(benchmarks.plan_checker, which imports no optimizer code): the file states its risk model, each node's
capacity and where its load before the plan comes from, and each class's usage model.

A node whose load is a forecast is not in the objects: a plan that did not say so was recomputed from the
annotations instead, and disagreed with itself (e.g. 0.197 stated, 1.0 recomputed)."""

from __future__ import annotations

import copy
import time
from typing import Any

import orjson
import pytest

from benchmarks.clusters import cluster_state, generate
from benchmarks.plan_checker import check_plan
from forecasting.types import NodeForecast
from optimizer.plan.cluster_problem import problem_from_state
from optimizer.plan.compiled import SolverOptions
from optimizer.plan.pipeline import plan_cluster

FORECAST_NODES = 9


def _forecast(node: str, resource: str, mean: float, std: float, now: float) -> NodeForecast:
    return NodeForecast(node, resource, mean, std, mean, mean + 1.3 * std, mean + 1.6 * std, mean + 2.3 * std,
                        300.0, "test", now, 0.0)


@pytest.fixture(scope="module")
def planned() -> tuple[dict[str, Any], dict[str, Any], set[str]]:
    """A generated cluster whose first nodes' load comes from forecasts that differ from their annotations,
    planned with binpack: (objects, plan file as JSON, the nodes with a forecast)."""
    doc = generate(40, 300, seed=7, best_effort_share=0.2, over_bound_nodes=3)
    state = cluster_state(doc)
    now = time.time()
    names = sorted(state.node_names())[-FORECAST_NODES:]  # the hot nodes (first) keep their annotations
    forecasts = {n: {r: _forecast(n, r, 0.55 + 0.02 * i, 0.1, now) for r in ("cpu", "memory")}
                 for i, n in enumerate(names)}
    problem = problem_from_state(state, forecasts, 0.9, 0.3, now=now)
    plan = plan_cluster(problem, SolverOptions(time_limit_s=3, workers=1)).plan
    return doc, orjson.loads(plan.to_json()), set(names)


def test_every_risk_is_recomputed_from_the_file_and_the_objects(planned: Any) -> None:
    doc, plan, forecast_nodes = planned
    report = check_plan(doc, plan)
    assert report.ok, report.examples
    assert report.max_risk_difference <= 1e-4
    # cpu and memory, before and after, on every node the plan lists
    assert report.risks_recomputed == 4 * len(plan["nodes"])
    in_plan = forecast_nodes & set(plan["nodes"])
    assert in_plan and report.loads_stated == 2 * len(in_plan)
    assert {plan["nodes"][n]["loadSource"]["cpu"] for n in in_plan} == {"forecast"}
    others = {plan["nodes"][n]["loadSource"]["cpu"] for n in set(plan["nodes"]) - forecast_nodes}
    assert others == {"annotations", "requests"}
    assert plan["riskModel"]["bestEffortPrior"] == {"cpu": 100.0, "memory": 200.0 * 2**20}
    assert any(c["usage"]["source"] == "request+prior" and c["slots"] for c in plan["classes"].values())
    assert plan["maxRisk"]["alreadyOver"] > 0.3 and plan["maxRisk"]["nodesAlreadyOver"]


def test_a_plan_that_does_not_state_its_model_is_rejected(planned: Any) -> None:
    doc, plan, _ = planned
    old = copy.deepcopy(plan)  # what plans said before: no risk model, capacity or load source
    del old["riskModel"]
    for info in old["nodes"].values():
        del info["capacity"], info["loadSource"]
    report = check_plan(doc, old)
    assert report.problems["risk-model"] == 1 and not report.ok
    no_source = copy.deepcopy(plan)
    for info in no_source["nodes"].values():
        del info["loadSource"]
    assert check_plan(doc, no_source).problems["load-before"] == 2 * len(plan["nodes"])


def _given_node(plan: dict[str, Any], source: str) -> tuple[str, str]:
    """(class key, node) of a slot on a node whose load comes from ``source``."""
    for key, c in plan["classes"].items():
        for node in c["slots"]:
            if plan["nodes"][node]["loadSource"]["cpu"] == source:
                return key, node
    raise AssertionError(f"no slot on a node with load from {source}")


@pytest.mark.parametrize("change", ["usage", "forecast-load", "before-risk", "already-over", "prior", "capacity"])
def test_what_the_file_states_is_what_the_risks_are_recomputed_from(planned: Any, change: str) -> None:
    doc, plan, _ = planned
    bad = copy.deepcopy(plan)
    key, node = _given_node(bad, "forecast" if change == "forecast-load" else "annotations")
    if change == "usage":  # a class said to use more than the plan counted it at
        bad["classes"][key]["usage"]["mean"]["cpu"] *= 3
        want = "risk-mismatch" if bad["classes"][key]["usage"]["source"] == "history" else "usage"
    elif change == "forecast-load":  # the forecast is the plan's word: its risks must follow from it
        bad["nodes"][node]["before"]["mean"]["cpu"] *= 1.3
        want = "risk-mismatch"
    elif change == "before-risk":
        bad["nodes"][node]["before"]["risk"]["cpu"] = 0.5
        want = "risk-mismatch"
    elif change == "already-over":
        bad["maxRisk"]["alreadyOver"] = 0.0
        want = "max-risk"
    elif change == "prior":
        bad["riskModel"]["bestEffortPrior"]["cpu"] = 10.0
        want = "risk-model"
    else:
        bad["nodes"][node]["capacity"]["memory"] *= 2
        want = "capacity-stated"
    report = check_plan(doc, bad)
    assert report.problems[want] >= 1, (change, dict(report.problems))
