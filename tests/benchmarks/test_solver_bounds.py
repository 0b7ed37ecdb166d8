"""benchmarks.solver_bounds: the relaxation with whole-number caps per class and node lies between the LP bound and
any plan's nodes (it is a valid bound, only tighter)."""

from __future__ import annotations

from benchmarks.clusters import cluster_state, generate
from benchmarks.solver_bounds import capped_lp_bound
from optimizer.plan.cluster_problem import problem_from_state
from optimizer.plan.compiled import compile_problem
from optimizer.plan.heuristics import first_fit_decreasing, lp_bound_nodes


def test_the_capped_bound_lies_between_the_lp_bound_and_a_plan() -> None:
    comp = compile_problem(problem_from_state(cluster_state(generate(40, 300, seed=2, gpu_share=0.08)), None, 0.9, 0.3))
    ffd = first_fit_decreasing(comp)
    lp, capped = lp_bound_nodes(comp, ffd.unplaced), capped_lp_bound(comp, ffd.unplaced)
    assert lp - 1e-6 <= capped <= ffd.nodes_used + 1e-6
