"""optimizer.reoptimize.migration on its own: the move-budgeted solve, its exact-rule safety net, per-namespace
limits, the protected child it solves in, and the neighbourhood of a large model; results are
optimizer.reoptimize.migration_result's."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from kso.core.safety import safe_overload_risk
from optimizer.reoptimize.migration_result import MigrationResult
from tests.optimizer.reoptimize_cluster import CPU_M, EPS, U_STAR, node, pod, spread_cluster, state_of


def test_move_cost_is_weighed_against_the_policy_gain() -> None:
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

    state = spread_cluster()
    movable = state.bound_pods()
    cheap = plan_migration(state, None, U_STAR, EPS, movable, MigrationOptions("binpack", 0.2, MoveLimits(), workers=1))
    assert isinstance(cheap, MigrationResult) and cheap.moves and all(m.reason == "policy" for m in cheap.moves)
    before, after = cheap.nodes_in_use()
    assert (before, after) == (4, 1)  # three pods of 1 cpu join the fourth: three nodes emptied, 3 moves
    # One move costs more than a node is worth: nothing moves.
    dear = plan_migration(state, None, U_STAR, EPS, movable, MigrationOptions("binpack", 1.5, MoveLimits(), workers=1))
    assert dear.moves == [] and dear.nodes_in_use() == (4, 4)
    # "none": only risk moves, and there is no risk here.
    assert plan_migration(state, None, U_STAR, EPS, movable, MigrationOptions("none", workers=1)).moves == []
    # A total budget of 2 empties two nodes at most.
    capped = plan_migration(state, None, U_STAR, EPS, movable, MigrationOptions("binpack", 0.2, MoveLimits(2), workers=1))
    assert len(capped.moves) == 2 and capped.nodes_in_use()[1] == 2
    # The plan of a subset of the moves has just those slots.
    sub = capped.plan_for(capped.moves[:1])
    assert sum(c.count for c in sub.classes.values()) == 1 and sub.plan_id != capped.plan.plan_id


def test_exact_rule_safety_net(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the linear bound let too much onto a node, the exact (Beta) check must catch it: the budgets of
    the idle nodes are inflated here, so the solver believes anything fits."""
    from optimizer.reoptimize import migration
    from optimizer.reoptimize.migration import MigrationOptions, plan_migration

    real = migration.compile_problem

    def loose(problem: Any) -> Any:
        comp = real(problem)
        comp.budget[:] = comp.budget + 10**6 * (comp.budget > 0)
        return comp

    monkeypatch.setattr(migration, "compile_problem", loose)
    # n1 is over its bound with four 2-cpu pods; n2 is at 80 %, so it can take one pod at most (safely none).
    nodes = [node("n1", load_cpu=7900), node("n2", load_cpu=6400, std_cpu=400)]
    pods = [pod(f"web-{i}", "n1", cpu="1500m") for i in range(4)]
    state = state_of(nodes, pods)
    # Re-solving with tightened budgets, and (no repair rounds) undoing the moves as the last resort.
    for rounds, note in ((3, ""), (0, "moves undone")):
        result = plan_migration(state, None, U_STAR, EPS, state.bound_pods(),
                                MigrationOptions("none", workers=1, repair_rounds=rounds))
        load = {"n1": 7900.0, "n2": 6400.0}
        for m in result.moves:
            load[m.from_node] -= 1500.0
            load[m.to_node] += 1500.0
        risk_n2 = safe_overload_risk(np.array([load["n2"] / CPU_M]), np.array([400 / CPU_M]), U_STAR)[0]
        assert risk_n2 <= EPS, (result.moves, result.notes)
        assert not next(n for n in result.nodes if n.name == "n2").over_after
        assert "n1" in result.over_after  # n1 cannot be relieved safely: it stays over, honestly reported
        assert note in " ".join(result.notes)


def test_ownerless_classes_in_two_namespaces_keep_their_limits() -> None:
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

    nodes = [node("n1", load_cpu=7900), node("n2", load_cpu=300), node("n3", load_cpu=300)]
    pods = [pod(f"a-{i}", "n1", namespace="ns-a", owner=None) for i in range(3)]
    pods += [pod(f"b-{i}", "n1", namespace="ns-b", owner=None) for i in range(3)]
    state = state_of(nodes, pods)
    result = plan_migration(state, None, U_STAR, EPS, state.bound_pods(),
                            MigrationOptions("none", limits=MoveLimits(max_per_namespace=1), workers=1))
    assert Counter(m.namespace for m in result.moves) == Counter({"ns-a": 1, "ns-b": 1})
    # Both namespaces' pods share the extender's class key ("shape@..."): one plan class with both slots.
    assert len(result.plan.classes) == 1 and next(iter(result.plan.classes.values())).count == 2


def test_the_solve_runs_in_the_protected_child_with_seed_retry() -> None:
    """kso reoptimize solves through the same protected child as kso plan: a child that dies (the test
    hook aborts the first one) is retried with another seed and the moves are those of an in-process solve."""
    from optimizer.plan.protected_solver import ORTOOLS_ABORT, ProtectedSolver
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

    state = spread_cluster()
    movable = state.bound_pods()
    options = MigrationOptions("binpack", 0.2, MoveLimits(), workers=1)
    crashes: list[str] = []
    got = plan_migration(state, None, U_STAR, EPS, movable, options,
                         solver=ProtectedSolver(on_crash=crashes.append, abort_attempts=1))
    assert len(crashes) == 1 and "killed by SIGABRT" in crashes[0] and ORTOOLS_ABORT in crashes[0]
    assert crashes[0] in got.notes
    assert got.nodes_in_use() == (4, 1) and len(got.moves) == 3
    # Every attempt dead: nothing moves, and the result says why.
    dead = plan_migration(state, None, U_STAR, EPS, movable, options, solver=ProtectedSolver(retries=0, abort_attempts=1,
                                                                                           on_crash=crashes.append))
    assert dead.moves == [] and dead.status == "SOLVER_DIED"
    assert "no solver process returned a re-optimisation; nothing moves" in dead.notes


def test_large_model_moves_pods_only_off_nodes_over_their_bound_or_small_enough_to_empty() -> None:
    """Above ``full_model_limit`` class x node pairs only a neighbourhood moves: pods leave nodes over their
    safe bound (n1) and nodes the move budget could empty (n3, one pod); n2's three pods stay."""
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

    nodes = [node("n1", load_cpu=7900), node("n2", load_cpu=3300), node("n3", load_cpu=1200), node("n4", load_cpu=300)]
    pods = [pod(f"web-{i}", "n1", cpu="1500m") for i in range(4)]
    pods += [pod(f"api-{i}", "n2", cpu="1", owner=("ReplicaSet", "api"), labels={"app": "api"}) for i in range(3)]
    pods += [pod("api-3", "n3", cpu="1", owner=("ReplicaSet", "api"), labels={"app": "api"})]
    state = state_of(nodes, pods)
    options = MigrationOptions("binpack", 0.2, MoveLimits(max_moves=2), workers=1, full_model_limit=0)
    result = plan_migration(state, None, U_STAR, EPS, state.bound_pods(), options)
    assert result.moves, (result.status, result.notes)
    assert {m.from_node for m in result.moves} <= {"n1", "n3"}
    assert any(m.from_node == "n1" and m.reason == "risk" for m in result.moves)
    assert any("pods leave only the 2 nodes" in n for n in result.notes), result.notes
