"""The node-counting starts and the LP relaxation they read: first-fit with the pods that may go on few nodes
first, the relaxation bounded in time (a plan keeps its limit) and solved once for the start and the bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.clusters import cluster_state, generate
from optimizer.plan import heuristics
from optimizer.plan.cluster_problem import problem_from_state
from optimizer.plan.compiled import Compiled, SolverOptions, compile_problem
from optimizer.plan.heuristics import _pod_order, first_fit_decreasing, lp_bound_nodes
from optimizer.plan.model import solve


def _comp(n_nodes: int, n_pods: int, seed: int) -> Compiled:
    return compile_problem(problem_from_state(cluster_state(generate(n_nodes, n_pods, seed=seed, gpu_share=0.06)),
                                              None, 0.9, 0.3))


def test_restricted_pods_come_first_and_the_start_still_fits() -> None:
    comp = _comp(60, 500, 2)
    eligible = comp.eligible.sum(axis=1)
    order = _pod_order(comp, restricted_first=True)
    rank = np.argsort(order)
    pinned, restricted = eligible <= 1, (eligible > 1) & (eligible < 0.5 * comp.n_nodes)
    anywhere = eligible >= 0.5 * comp.n_nodes
    assert pinned.any() and restricted.any() and anywhere.any()
    assert rank[pinned].max() < rank[restricted].min() and rank[restricted].max() < rank[anywhere].min()
    x = first_fit_decreasing(comp, restricted_first=True).x
    assert (x <= comp.ub()).all() and (x.sum(axis=1) <= comp.counts).all()
    assert (np.einsum("cr,cn->nr", comp.req, x) <= comp.free).all()
    assert (x[~comp.eligible] == 0).all()


def test_the_relaxation_stops_at_its_time_limit_and_is_solved_once(monkeypatch: pytest.MonkeyPatch) -> None:
    comp = _comp(300, 2000, 0)
    left = first_fit_decreasing(comp).unplaced  # the pods no node takes stay out of the relaxation
    heuristics._LP_MEMO.clear()
    heuristics._LP_TIMED_OUT.clear()
    assert math.isnan(lp_bound_nodes(comp, left, time_limit_s=1e-3))  # stopped by HiGHS: no bound, none remembered
    assert not heuristics._LP_MEMO and list(heuristics._LP_TIMED_OUT.values()) == [1e-3]
    solves = []
    solve_lp = heuristics._solve_lp_relaxation
    monkeypatch.setattr(heuristics, "_solve_lp_relaxation", lambda *a: solves.append(a) or solve_lp(*a))
    assert math.isnan(lp_bound_nodes(comp, left, time_limit_s=1e-3)) and not solves  # no more time: not tried
    first = heuristics._lp_relaxation(comp, left, None)  # no limit: solved
    assert first is not None and len(solves) == 1 and heuristics._lp_relaxation(comp, left, None) is first
    assert len(solves) == 1
    assert lp_bound_nodes(comp, left) == first.value
    more = left.copy()
    more[int(np.argmax(comp.counts))] += 1
    assert heuristics._lp_relaxation(comp, more, None) is not first  # other pods: another relaxation


def test_a_solve_states_its_phases_and_keeps_its_bound() -> None:
    problem = problem_from_state(cluster_state(generate(40, 300, seed=5)), None, 0.9, 0.3)
    result = solve(problem, SolverOptions(time_limit_s=3, workers=1, full_model_limit=0))  # decomposed: LP bound
    assert any(n.startswith("seconds: start") for n in result.notes)
    assert math.isfinite(result.bound) and result.bound <= result.nodes_used
