"""What keeps plans fast on large clusters without changing them: identical classes solved as one and split
back, first-fit placing a class's pods on a node at once, no search when the start cannot be beaten, and every
pending pod of a large listing kept."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from benchmarks.clusters import cluster_state, generate
from benchmarks.plan_checker import check_plan
from kso.core.cluster_source import ClusterSource, load_cluster
from kso.core.resources import CPU, MEMORY, PODS
from optimizer.plan.cluster_problem import problem_from_state
from optimizer.plan.compiled import Compiled, SolverOptions, compile_problem, merge_identical_classes, split_merged
from optimizer.plan.heuristics import _pod_order, first_fit_decreasing
from optimizer.plan.pipeline import plan_cluster
from optimizer.plan.problem import NodeLoad, PlacementProblem, PlanNode, WorkloadClass, request_usage


def _comp(doc: dict) -> Compiled:
    return compile_problem(problem_from_state(cluster_state(doc), None, 0.9, 0.3))


def test_identical_classes_merge_and_split_back_to_the_same_node_totals() -> None:
    comp = _comp(generate(30, 250, seed=3, singleton_share=0.2, best_effort_share=0.2))
    merged, group = merge_identical_classes(comp)
    assert merged.n_classes < comp.n_classes
    assert (np.bincount(group, weights=comp.counts) == merged.counts).all()
    x_m = first_fit_decreasing(merged).x
    x = split_merged(x_m, group, comp.counts)
    assert (x >= 0).all() and (x.sum(axis=1) <= comp.counts).all()
    assert x.sum() == x_m.sum()
    for g in range(merged.n_classes):  # each node gets the same pods of each merged class
        assert (x[group == g].sum(axis=0) == x_m[g]).all()
    assert (x[comp.eligible == 0] == 0).all()


def _first_fit_one_by_one(comp: Compiled) -> np.ndarray:
    """First-fit-decreasing as its definition says: one pod at a time, the first node in order that takes it."""
    free, budget = comp.free.copy(), comp.budget.copy()
    order = np.lexsort((-comp.free[:, 1], -comp.free[:, 0], ~comp.has_pods))
    x = np.zeros((comp.n_classes, comp.n_nodes), dtype=np.int64)
    for ci in _pod_order(comp):
        for _ in range(int(comp.counts[ci])):
            for ni in order:
                if comp.eligible[ci, ni] and (free[ni] >= comp.req[ci]).all() and (budget[:, ni] >= comp.a[:, ci, ni]).all():
                    x[ci, ni] += 1
                    free[ni] -= comp.req[ci]
                    budget[:, ni] -= comp.a[:, ci, ni]
                    break
    return x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_fit_places_a_class_at_once_exactly_as_one_by_one(seed: int) -> None:
    comp = _comp(generate(25, 200, seed=seed, best_effort_share=0.2, daemonset_pods=4))
    assert (first_fit_decreasing(comp).x == _first_fit_one_by_one(comp)).all()


def test_pods_pinned_to_one_node_are_placed_before_others_fill_it() -> None:
    # A DaemonSet's pod (small, so last by size) may go on its own node only; larger pods that may go anywhere
    # filled that node first and left it out (2 of 83 at 5,000 nodes).
    alloc = {CPU: 4000.0, MEMORY: 16.0 * 2**30, PODS: 110.0}
    nodes = [PlanNode(f"n{i}", dict(alloc), {}, {CPU: NodeLoad(0.0, 0.0), MEMORY: NodeLoad(0.0, 0.0)}) for i in range(2)]
    big = {CPU: 1200.0, MEMORY: 2.0**30, PODS: 1.0}  # three fill a node to its bound (U* x 4000)
    small = {CPU: 100.0, MEMORY: 2.0**27, PODS: 1.0}
    classes = [WorkloadClass("big", big, 5, request_usage(big)), WorkloadClass("agent", small, 1, request_usage(small))]
    comp = compile_problem(PlacementProblem(nodes, classes, 0.9, 0.3))
    comp.eligible[1] = [True, False]  # the agent's node affinity: n0 only
    ffd = first_fit_decreasing(comp)
    assert ffd.unplaced.sum() == 0 and ffd.x[1, 0] == 1 and ffd.x[0].sum() == 5


def test_pending_pods_on_a_busy_cluster_are_planned_without_search() -> None:
    doc = generate(200, 150, seed=1, bound_pods=5000, singleton_share=0.1)
    problem = problem_from_state(cluster_state(doc), None, 0.9, 0.3)
    planned = plan_cluster(problem, SolverOptions(time_limit_s=20, workers=2))
    result = planned.result
    assert result.status == "OPTIMAL" and result.gap == 0.0
    assert not result.unplaced[compile_problem(problem).ub().sum(axis=1) > 0].any()
    assert result.wall_s < 10  # no search: the start is optimal
    assert any("no search" in n for n in result.notes)
    report = check_plan(doc, orjson.loads(planned.plan.to_json()))
    assert report.ok, report.examples


def test_a_listing_with_more_pending_pods_than_the_cache_keeps_is_read_whole(tmp_path) -> None:  # noqa: ANN001
    doc = generate(3, 10_050, seed=0, best_effort_share=0.0, gpu_share=0.0, job_share=0.0, daemonset_pods=0)
    path = tmp_path / "cluster.json"
    path.write_bytes(orjson.dumps(doc))
    state = load_cluster(ClusterSource(snapshot=str(path))).state
    assert len(state.pending_pods()) == 10_050


def test_a_cluster_planned_whole_starts_from_the_lp_relaxation_rounded() -> None:
    # Every pod of a busy cluster re-planned on empty nodes: first-fit-decreasing fills the big nodes with the big
    # pods (cpu-bound, pod slots left) and the rest with small ones (slot-bound, cpu left); the LP mixes them.
    from benchmarks.solver_clusters import parse_cluster_cell
    from optimizer.plan.heuristics import close_nodes, lp_bound_nodes, lp_rounded

    doc = parse_cluster_cell("60x2000/20:replan").generate(0)
    problem = problem_from_state(cluster_state(doc), None, 0.9, 0.3)
    comp = compile_problem(problem)
    ffd = first_fit_decreasing(comp)
    closed = ffd.x.copy()
    close_nodes(comp, closed)
    ffd_nodes = int((closed.sum(axis=0) > 0).sum())
    lp = lp_bound_nodes(comp, ffd.unplaced)
    rounded = lp_rounded(comp, ffd.unplaced)
    assert rounded is not None and rounded.unplaced.sum() == ffd.unplaced.sum() == 0
    assert (rounded.x.T @ comp.req <= comp.free).all() and (rounded.x[~comp.eligible] == 0).all()
    assert rounded.nodes_used <= np.ceil(lp) + 1 < ffd_nodes
    planned = plan_cluster(problem, SolverOptions(time_limit_s=10, workers=2))
    assert planned.result.nodes_used <= rounded.nodes_used and planned.result.violations == 0
    report = check_plan(doc, orjson.loads(planned.plan.to_json()))
    assert report.ok, report.examples
