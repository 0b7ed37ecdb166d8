"""optimizer.plan.pipeline: plan_cluster, the one problem -> compiled -> solve -> plan pipeline every caller uses,
and plan_once, what ``kso plan`` does with it (typed request in, report out, nothing printed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forecasting.forecast_source import ForecastRequest
from kso.core.cluster_source import ClusterSource, InputError
from kso.core.snapshot import load_snapshot
from optimizer.plan.cluster_problem import problem_from_state
from optimizer.plan.compiled import SolverOptions
from optimizer.plan.pipeline import PlanRequest, plan_cluster, plan_once
from optimizer.plan.placement_plan import load_plan
from optimizer.plan.protected_solver import ProtectedSolver

OPTIONS = SolverOptions(time_limit_s=5, workers=1)


def test_plan_cluster_in_process_and_in_the_protected_child_make_the_same_plan() -> None:
    problem = problem_from_state(load_snapshot(None), None, 0.9, 0.3)
    here = plan_cluster(problem, OPTIONS)
    child = plan_cluster(problem, OPTIONS, ProtectedSolver(on_crash=pytest.fail))
    assert here.problem is problem and child.problem is problem
    assert here.result.status == child.result.status == "OPTIMAL"
    assert {k: c.slots for k, c in here.plan.classes.items()} == {k: c.slots for k, c in child.plan.classes.items()}
    placed = sum(sum(c.slots.values()) for c in here.plan.classes.values())
    assert placed == int(here.result.x.sum()) > 0
    assert here.plan.policy == OPTIONS.policy and here.plan.u_star == 0.9


def test_plan_once_writes_the_plan_and_reports_without_printing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    said: list[str] = []
    out = tmp_path / "plan.json"
    report = plan_once(PlanRequest(ClusterSource(demo=True), ForecastRequest(trace="embedded"), time_limit_s=5, workers=1,
                                   policy="load-balance", out=str(out)), said.append)
    assert capsys.readouterr() == ("", "") and said == []
    assert load_plan(out).plan_id == report.planned.plan.plan_id and report.out == str(out)
    assert report.policy == "load-balance" and "synthetic join" in report.load_from
    summary = report.summary()
    assert summary["plan_file"] == str(out) and summary["pods_planned"] + summary["pods_unplaced"] == 36


def test_plan_once_openb_needs_no_cluster(tmp_path: Path) -> None:
    report = plan_once(PlanRequest(openb=(20, 60), time_limit_s=3, workers=1, out=str(tmp_path / "p.json")), print)
    assert len(report.planned.problem.nodes) == 20 and "openb" in report.load_from.lower()


def test_plan_once_raises_for_an_unusable_cluster(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="/no/such/file"):
        plan_once(PlanRequest(ClusterSource(snapshot="/no/such/file"), out=str(tmp_path / "p.json")), print)
