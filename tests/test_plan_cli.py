"""``kso plan`` end to end on the embedded demo cluster, and its guard against OR-Tools aborting the
process (google/or-tools#5288): the solve runs in a spawned child; a child that dies (for real: the
test-only KSO_TEST_SOLVER_ABORT=N makes the first N children call os.abort()) is retried with another
seed, and when every attempt dies the plan is first-fit-decreasing's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from kso.cli import main
from optimizer.plan import PlacementPlan, load_plan
from optimizer.planner import FFD_STATUS, ORTOOLS_ABORT, TEST_ABORT_ENV, solve_in_child

ARGS = ["--demo", "--time-limit", "5", "--workers", "1"]


def assert_within_safe_bounds(plan: PlacementPlan) -> None:
    """Every node the plan puts pods on stays within its safe bound (nodes over it already get none)."""
    targets = {node for c in plan.classes.values() for node, k in c.slots.items() if k > 0}
    assert targets
    assert all(risk <= plan.eps + 1e-9 for node in targets for risk in plan.nodes[node].risk.values())


@pytest.fixture(autouse=True)
def _no_abort(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEST_ABORT_ENV, raising=False)


def test_plan_demo_writes_a_valid_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    assert main(["plan", *ARGS, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    plan = load_plan(out)
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    assert plan.policy == "binpack"
    assert sum(c.count for c in plan.classes.values()) == 36  # the demo's pending pods
    assert sum(sum(c.slots.values()) for c in plan.classes.values()) > 0
    assert_within_safe_bounds(plan)
    assert "kso plan: binpack, 16 nodes" in printed.out
    assert f"plan {plan.plan_id} written to {out}" in printed.out
    assert "died" not in printed.err and ORTOOLS_ABORT not in printed.err


def test_a_dead_solver_process_is_retried_with_another_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(TEST_ABORT_ENV, "1")  # the first child aborts, the retry solves
    out = tmp_path / "plan.json"
    assert main(["plan", *ARGS, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    crash = ("kso plan: attempt 1 (seed 0): the solver process died (killed by SIGABRT); an OR-Tools abort, "
             f"see {ORTOOLS_ABORT}; retrying with seed 1")
    assert crash in printed.err.splitlines()
    assert "attempt 2" not in printed.err and "first-fit-decreasing" not in printed.err
    assert "Traceback" not in printed.err
    plan = load_plan(out)
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    assert any(n.startswith("attempt 1 (seed 0): the solver process died") for n in plan.notes)
    assert f"plan {plan.plan_id} written to {out}" in printed.out


def test_every_attempt_dead_falls_back_to_ffd(tmp_path: Path) -> None:
    # A separate process, so that the terminal's stderr (fd 2, the children's included) is what is checked.
    out = tmp_path / "plan.json"
    proc = subprocess.run([sys.executable, "-m", "kso.cli", "plan", *ARGS, "--out", str(out), "--json"], cwd=tmp_path,
                          env={**os.environ, TEST_ABORT_ENV: "2"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    assert err == [
        f"kso plan: attempt 1 (seed 0): the solver process died (killed by SIGABRT); an OR-Tools abort, see {ORTOOLS_ABORT}; "
        "retrying with seed 1",
        f"kso plan: attempt 2 (seed 1): the solver process died (killed by SIGABRT); an OR-Tools abort, see {ORTOOLS_ABORT}; "
        "given up",
        "kso plan: the solver process died on every attempt; the plan is first-fit-decreasing's (no CP-SAT)",
    ]
    summary = orjson.loads(proc.stdout)
    assert summary["status"] == FFD_STATUS
    assert summary["nodes_over_safe_bound"] == 0
    plan = load_plan(out)
    assert plan.status == FFD_STATUS
    assert plan.notes[-1] == err[-1].removeprefix("kso plan: ")
    assert sum(sum(c.slots.values()) for c in plan.classes.values()) > 0
    assert_within_safe_bounds(plan)
    assert not list(tmp_path.glob("core*"))


def test_an_exception_in_the_child_is_raised_not_retried() -> None:
    from kso.snapshot import load_snapshot
    from optimizer.inputs import problem_from_state
    from optimizer.model import SolverOptions

    problem = problem_from_state(load_snapshot(None), None, 0.9, 0.3)
    crashes: list[str] = []
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        solve_in_child(problem, SolverOptions(policy="nope"), on_crash=crashes.append)
    assert crashes == []
