"""optimizer.plan.protected_solver.ProtectedSolver, the one protected solve of ``kso plan``, the extender's
re-solve and ``kso reoptimize``: the solve runs in a child process; an exception there is raised here, not
retried; a child past its wall-clock limit is stopped and the plan is first-fit-decreasing's held to the exact
bound. (Children that die: tests/optimizer/test_plan_cli.py and test_migration.py.)"""

from __future__ import annotations

import time

import pytest

from optimizer.plan.protected_solver import FFD_STATUS, ProtectedSolver


def test_an_exception_in_the_child_is_raised_not_retried() -> None:
    from kso.core.snapshot import load_snapshot
    from optimizer.plan.cluster_problem import problem_from_state
    from optimizer.plan.model import SolverOptions

    problem = problem_from_state(load_snapshot(None), None, 0.9, 0.3)
    crashes: list[str] = []
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        ProtectedSolver(on_crash=crashes.append).solve_plan(problem, SolverOptions(policy="nope"))
    assert crashes == []


def test_a_solve_past_its_wall_clock_limit_is_stopped_and_ffd_used() -> None:
    from optimizer.plan.compiled import SolverOptions
    from optimizer.plan.openb import openb_problem

    problem = openb_problem(60, 400, seed=0)
    # Decomposed search runs until its own time limit (120 s); the wall-clock limit stops it first.
    options = SolverOptions(time_limit_s=120, full_model_limit=0, lns_nodes=8, lns_step_s=0.5)
    crashes: list[str] = []
    t0 = time.perf_counter()
    result = ProtectedSolver(on_crash=crashes.append, timeout_s=10).solve_plan(problem, options)
    assert time.perf_counter() - t0 < 60
    assert crashes[0] == "attempt 1 (seed 0): the solver process ran past its wall-clock limit of 10 s and was stopped; given up"
    assert result.status == FFD_STATUS and result.violations == 0
    assert result.x.sum() > 0
