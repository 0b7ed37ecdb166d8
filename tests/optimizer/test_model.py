"""optimizer.plan.model (the solve) on hand-made problems whose right answer can be counted, and on generated ones.

Every plan is checked against the problem itself (canonical units, placement rules, the exact Beta rule
recomputed here from the classes' usage), not against the compiled model the solver saw.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kso.core.objects import NodeInfo, PodInfo, Taint, Toleration
from kso.core.placement import rule_violation
from kso.core.resources import CPU, MEMORY, MIB, PODS
from optimizer.plan.chance import plan_risk
from optimizer.plan.heuristics import first_fit_decreasing
from optimizer.plan.model import POLICIES, SolveResult, SolverOptions, compile_problem, solve
from optimizer.plan.openb import openb_problem
from optimizer.plan.problem import (
    LOAD_RESOURCES,
    NodeLoad,
    PlacementProblem,
    PlanNode,
    ProblemError,
    UsageModel,
    WorkloadClass,
)

GIB = 1024 * MIB
needs_openb = pytest.mark.usefixtures("openb_trace")  # fails naming KSO_TRACE_DIR when the trace is missing


def node(name: str, cpu: float = 4000, mem_gib: float = 16, pods: float = 110, labels: dict[str, str] | None = None,
         taints: list[Taint] | None = None, unschedulable: bool = False, cost: float = 1.0,
         load: tuple[float, float, float, float] | None = None, requested: dict[str, float] | None = None) -> PlanNode:
    """A node; ``load`` = (cpu mean, cpu std, memory mean, memory std) of what already runs there."""
    alloc = {CPU: float(cpu), MEMORY: mem_gib * GIB, PODS: float(pods)}
    info = NodeInfo(name, alloc, dict(labels or {}), {}, list(taints or []), {}, (), unschedulable=unschedulable)
    lm = load or (0.0, 0.0, 0.0, 0.0)
    return PlanNode(name, alloc, dict(requested or {}), {CPU: NodeLoad(lm[0], lm[1]), MEMORY: NodeLoad(lm[2], lm[3])},
                    cost=cost, info=info, has_pods=bool(requested))


def wclass(key: str, cpu: float, mem_mib: float = 256, count: int = 1, mu_cpu: float | None = None, sd_cpu: float = 0.0,
           mu_mem_mib: float | None = None, sd_mem_mib: float = 0.0, selector: dict[str, str] | None = None,
           tolerations: tuple[Toleration, ...] = ()) -> WorkloadClass:
    """A class of ``count`` pods requesting ``cpu`` millicores and ``mem_mib``; usage = request unless given."""
    req = {CPU: float(cpu), MEMORY: mem_mib * MIB, PODS: 1.0}
    pod = PodInfo(key, "test", key, "", req, req[CPU], req[MEMORY], (), (), node_selector=dict(selector or {}),
                  tolerations=tolerations)
    usage = UsageModel({CPU: cpu if mu_cpu is None else mu_cpu, MEMORY: (mem_mib if mu_mem_mib is None else mu_mem_mib) * MIB},
                       {CPU: sd_cpu, MEMORY: sd_mem_mib * MIB}, "history")
    return WorkloadClass(key, req, count, usage, pod)


def problem(nodes: list[PlanNode], classes: list[WorkloadClass], u_star: float = 0.9, eps: float = 0.3) -> PlacementProblem:
    return PlacementProblem(nodes, classes, u_star, eps)


def run(prob: PlacementProblem, policy: str = "binpack", time_limit: float = 10.0) -> SolveResult:
    return solve(prob, SolverOptions(policy=policy, time_limit_s=time_limit, workers=2, relative_gap=0.0))


def check_plan(prob: PlacementProblem, r: SolveResult) -> None:
    """Everything a plan must satisfy, judged on the problem (not the compiled model)."""
    x = r.x
    n_c, n_n = len(prob.classes), len(prob.nodes)
    assert x.shape == (n_c, n_n)
    assert (x >= 0).all() and (r.unplaced >= 0).all()
    assert (x.sum(axis=1) + r.unplaced == np.array([c.count for c in prob.classes])).all()
    for ni, n in enumerate(prob.nodes):
        resources = set(n.allocatable) | {r for c in prob.classes for r in c.requests}
        for res in resources:
            used = n.requested.get(res, 0.0) + sum(x[ci, ni] * c.requests.get(res, 0.0) for ci, c in enumerate(prob.classes))
            if any(x[:, ni]):
                assert used <= n.allocatable.get(res, 0.0) + 1e-6, f"{n.name}: {res} {used} > {n.allocatable.get(res, 0.0)}"
        for ci, c in enumerate(prob.classes):
            if x[ci, ni] and c.example is not None and n.info is not None:
                assert rule_violation(c.example, n.info) is None, f"{c.key} on {n.name}: {rule_violation(c.example, n.info)}"
    risk = exact_risk(prob, x)
    used_nodes = x.sum(axis=0) > 0
    assert (risk[:, used_nodes] <= prob.eps + 1e-9).all(), f"exact rule broken: {risk[:, used_nodes]} > {prob.eps}"
    assert r.violations == 0


def exact_risk(prob: PlacementProblem, x: np.ndarray) -> np.ndarray:
    """(2, N) Beta overload risk after the plan, recomputed from the problem's own numbers."""
    out = np.zeros((2, len(prob.nodes)))
    for ri, res in enumerate(LOAD_RESOURCES):
        mean = np.array([n.load[res].mean for n in prob.nodes], dtype=float)
        var = np.array([n.load[res].std ** 2 for n in prob.nodes], dtype=float)
        mean += np.array([c.usage.mean[res] for c in prob.classes]) @ x
        var += np.array([c.usage.std[res] ** 2 for c in prob.classes]) @ x
        cap = np.array([n.allocatable[res] for n in prob.nodes], dtype=float)
        out[ri] = plan_risk(mean, var, cap, prob.u_star)
    return out


def per_node(r: SolveResult) -> list[int]:
    return [int(v) for v in r.x.sum(axis=0)]


# --- fit and placement rules -------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_requests_never_exceed_allocatable(policy: str) -> None:
    # Memory is the tight resource on n2 and the pods count on n3; usage is low so only requests bind.
    nodes = [node("n1", cpu=8000, mem_gib=32), node("n2", cpu=8000, mem_gib=2), node("n3", cpu=16000, mem_gib=64, pods=3)]
    classes = [wclass("big", 3000, 1024, 4, mu_cpu=300), wclass("mem", 500, 900, 5, mu_cpu=50),
               wclass("small", 250, 128, 8, mu_cpu=25)]
    prob = problem(nodes, classes)
    r = run(prob, policy, 5)
    check_plan(prob, r)
    assert per_node(r)[2] <= 3
    mem_on_n2 = sum(r.x[ci, 1] * c.requests[MEMORY] for ci, c in enumerate(classes))
    assert mem_on_n2 <= 2 * GIB


def test_untolerated_taint_keeps_pods_off() -> None:
    # n-open fits 2 pods, the tainted node 10: without a toleration only 2 are placed, the rest unplaced.
    taint = Taint("dedicated", "gpu", "NoSchedule")
    nodes = [node("n-open", cpu=2000), node("n-taint", cpu=10000, taints=[taint])]
    plain = wclass("plain", 900, count=5, mu_cpu=100)
    tolerant = wclass("tolerant", 900, count=3, mu_cpu=100, tolerations=(Toleration("dedicated", "Equal", "gpu", "NoSchedule"),))
    prob = problem(nodes, [plain, tolerant])
    r = run(prob)
    check_plan(prob, r)
    assert r.x[0, 1] == 0
    assert r.x[0, 0] + r.unplaced[0] == 5 and r.unplaced[0] >= 3
    assert r.unplaced[1] == 0  # the tolerating class may use the tainted node


def test_prefer_no_schedule_taint_does_not_block() -> None:
    nodes = [node("soft", cpu=4000, taints=[Taint("k", "v", "PreferNoSchedule")])]
    prob = problem(nodes, [wclass("a", 1000, count=2, mu_cpu=100)])
    r = run(prob)
    check_plan(prob, r)
    assert r.unplaced.sum() == 0


def test_node_selector_mismatch_keeps_pods_off() -> None:
    nodes = [node("hdd", cpu=16000, labels={"disk": "hdd"}), node("ssd", cpu=4000, labels={"disk": "ssd"})]
    prob = problem(nodes, [wclass("db", 1000, count=6, mu_cpu=100, selector={"disk": "ssd"})])
    r = run(prob, "load-balance")
    check_plan(prob, r)
    assert r.x[0, 0] == 0  # never on hdd, even though load-balance would like the big empty node
    assert r.x[0, 1] == 4 and r.unplaced[0] == 2


def test_unschedulable_node_keeps_pods_off() -> None:
    nodes = [node("cordoned", cpu=16000, unschedulable=True), node("ok", cpu=4000)]
    prob = problem(nodes, [wclass("a", 1000, count=6, mu_cpu=100)])
    r = run(prob, "load-balance")
    check_plan(prob, r)
    assert r.x[0, 0] == 0 and r.x[0, 1] == 4 and r.unplaced[0] == 2


# --- policies on cases counted by hand -------------------------------------------------------------------------


def test_binpack_uses_the_minimum_number_of_nodes() -> None:
    # 3 pods of 2500m and 3 of 1500m on 4000m nodes: 12,000m of requests = exactly 3 full nodes, and only
    # the pairing 2500 + 1500 achieves it (two 2500s never share a node). Usage is low: only requests bind.
    nodes = [node(f"n{i}", cpu=4000) for i in range(6)]
    classes = [wclass("large", 2500, count=3, mu_cpu=500), wclass("medium", 1500, count=3, mu_cpu=300)]
    prob = problem(nodes, classes)
    r = run(prob)
    check_plan(prob, r)
    assert r.nodes_used == 3 and r.unplaced.sum() == 0
    for ni in np.nonzero(r.x.sum(axis=0))[0]:
        assert list(r.x[:, ni]) == [1, 1]


def test_binpack_opens_no_node_when_nothing_to_place() -> None:
    prob = problem([node("a"), node("b")], [wclass("none", 1000, count=0)])
    r = run(prob)
    assert r.nodes_used == 0 and r.x.sum() == 0


def test_load_balance_equal_loads_on_identical_nodes() -> None:
    nodes = [node(f"n{i}", cpu=8000) for i in range(4)]
    prob = problem(nodes, [wclass("a", 1000, count=8, mu_cpu=600, sd_cpu=50)])
    r = run(prob, "load-balance")
    check_plan(prob, r)
    assert per_node(r) == [2, 2, 2, 2]


def test_load_balance_evens_out_existing_load() -> None:
    # n0 already carries 3000m of load: the 6 pods of 1000m go 1/2.5/2.5 -> the integer optimum puts fewer on n0.
    nodes = [node("n0", cpu=8000, load=(3000, 0, 0, 0)), node("n1", cpu=8000), node("n2", cpu=8000)]
    prob = problem(nodes, [wclass("a", 1000, count=6)])
    r = run(prob, "load-balance")
    check_plan(prob, r)
    loads = [3000 + 1000 * per_node(r)[0], 1000 * per_node(r)[1], 1000 * per_node(r)[2]]
    assert max(loads) == 3000  # perfect balance: 9,000m over three nodes


def test_cost_prefers_cheap_nodes() -> None:
    nodes = [node("pricey-1", cost=5.0), node("cheap-1", cost=1.0), node("pricey-2", cost=5.0), node("cheap-2", cost=1.0)]
    prob = problem(nodes, [wclass("a", 1000, count=6, mu_cpu=100)])
    r = run(prob, "cost")
    check_plan(prob, r)
    assert r.x[0, 0] == 0 and r.x[0, 2] == 0
    assert r.x[0, 1] + r.x[0, 3] == 6


def test_cost_uses_one_expensive_node_rather_than_three_cheap_ones() -> None:
    # 3 x 4000m pods: one big node of cost 2 holds all, or three small ones at cost 1 each (total 3).
    nodes = [node("small-1", cpu=4000, cost=1.0), node("small-2", cpu=4000, cost=1.0), node("small-3", cpu=4000, cost=1.0),
             node("big", cpu=16000, cost=2.0)]
    prob = problem(nodes, [wclass("a", 4000, count=3, mu_cpu=500)])
    r = run(prob, "cost")
    check_plan(prob, r)
    assert per_node(r) == [0, 0, 0, 3]


def test_consolidate_fills_the_busy_node_before_opening_an_empty_one() -> None:
    busy = node("busy", cpu=8000, requested={CPU: 2000.0, MEMORY: float(GIB), PODS: 2.0}, load=(1000, 100, GIB, 0))
    prob = problem([node("empty", cpu=8000), busy], [wclass("a", 1000, count=3, mu_cpu=200)])
    r = run(prob, "consolidate")
    check_plan(prob, r)
    assert per_node(r) == [0, 3]


# --- the safe bound ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.05, 0.3, 0.6])
def test_plan_respects_exact_beta_rule_with_large_std(eps: float) -> None:
    # Requests would let 20 pods share a 4000m node; their usage (mean 150m, std 400m) limits it far more.
    nodes = [node(f"n{i}", cpu=4000) for i in range(6)]
    prob = problem(nodes, [wclass("spiky", 200, count=60, mu_cpu=150, sd_cpu=400)], eps=eps)
    r = run(prob, "binpack", 10)
    check_plan(prob, r)
    assert max(per_node(r)) < 20  # the bound, not the requests, decided
    assert r.x.sum() > 0


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_respects_exact_rule(policy: str) -> None:
    nodes = [node(f"n{i}", cpu=6000, mem_gib=8, load=(800 * i, 300, GIB, 0.2 * GIB)) for i in range(4)]
    classes = [wclass("spiky", 400, 512, 12, mu_cpu=350, sd_cpu=300, sd_mem_mib=200),
               wclass("steady", 800, 1024, 6, mu_cpu=700, sd_cpu=20)]
    prob = problem(nodes, classes, eps=0.1)
    r = run(prob, policy, 5)
    check_plan(prob, r)


def test_node_already_over_its_bound_gets_nothing() -> None:
    hot = node("hot", cpu=4000, load=(3900, 50, 0, 0))
    prob = problem([hot, node("cool", cpu=4000)], [wclass("a", 100, count=3, mu_cpu=50)])
    r = run(prob, "load-balance")
    check_plan(prob, r)
    assert r.x[0, 0] == 0 and r.x[0, 1] == 3


# --- what cannot be placed ---------------------------------------------------------------------------------------


def test_pods_that_cannot_fit_are_reported_unplaced() -> None:
    nodes = [node("n1", cpu=4000), node("n2", cpu=4000)]
    classes = [wclass("huge", 8000, count=2), wclass("fits", 1000, count=2, mu_cpu=100)]
    prob = problem(nodes, classes)
    r = run(prob)
    check_plan(prob, r)
    assert list(r.unplaced) == [2, 0]
    assert r.status in ("OPTIMAL", "FEASIBLE")


def test_over_subscribed_problem_still_returns_a_plan() -> None:
    # 2 nodes of 4000m, 20 pods of 1000m: 4 per node by requests (usage 700m: the bound alone would allow 5).
    nodes = [node("n1", cpu=4000), node("n2", cpu=4000)]
    prob = problem(nodes, [wclass("a", 1000, count=20, mu_cpu=700)])
    r = run(prob)
    check_plan(prob, r)
    assert r.status in ("OPTIMAL", "FEASIBLE")
    assert r.x.sum() == 8 and r.unplaced[0] == 12


def test_no_nodes_returns_everything_unplaced() -> None:
    prob = problem([], [wclass("a", 1000, count=4)])
    r = run(prob)
    assert r.x.shape == (1, 0) and list(r.unplaced) == [4]


def test_full_cluster_with_a_large_model_returns_unplaced() -> None:
    # 400 busy nodes with 500m free, 101 pending classes of >= 1000m: 40,400 class-node pairs > full_model_limit,
    # so LNS runs; nothing fits anywhere, and the answer should be "all unplaced", not an exception.
    nodes = [node(f"n{i}", cpu=4000, requested={CPU: 3500.0, MEMORY: float(GIB), PODS: 5.0}) for i in range(400)]
    prob = problem(nodes, [wclass(f"c{k}", 1000 + k, count=1) for k in range(101)])
    r = solve(prob, SolverOptions(time_limit_s=5))
    assert r.unplaced.sum() == 101


def test_decomposed_load_balance_spreads_over_busy_nodes() -> None:
    # Eight identical nodes that already host pods; 16 new pods. The full model gives 2 per node.
    nodes = [node(f"n{i}", cpu=8000, requested={CPU: 1000.0, MEMORY: float(GIB), PODS: 1.0}, load=(1000, 100, GIB, 0))
             for i in range(8)]
    prob = problem(nodes, [wclass("a", 500, count=16, mu_cpu=400)])
    full = run(prob, "load-balance", 5)
    assert per_node(full) == [2] * 8
    lns = solve(prob, SolverOptions(policy="load-balance", time_limit_s=2, full_model_limit=0, lns_nodes=4, lns_step_s=0.3))
    check_plan(prob, lns)
    assert max(per_node(lns)) <= 3, per_node(lns)


def test_decomposed_load_balance_spreads_over_empty_nodes() -> None:
    # The same with empty nodes: the LNS does reach the balanced plan (the control for the test above).
    prob = problem([node(f"n{i}", cpu=8000) for i in range(8)], [wclass("a", 500, count=16, mu_cpu=400)])
    lns = solve(prob, SolverOptions(policy="load-balance", time_limit_s=2, full_model_limit=0, lns_nodes=4, lns_step_s=0.3))
    check_plan(prob, lns)
    assert max(per_node(lns)) <= 3, per_node(lns)


def test_skipping_the_lp_bound_changes_only_the_reported_bound() -> None:
    # A decomposed binpack plan (its LNS has no time for a step here: the heuristic start, held to the exact
    # rule) gets its bound from the LP relaxation; lp_bound=False skips that and nothing else.
    prob = problem([node(f"n{i}", cpu=8000) for i in range(8)], [wclass("a", 500, count=16, mu_cpu=400)])
    opts = dict(policy="binpack", time_limit_s=1.0, workers=1, full_model_limit=0, lns_nodes=4, lns_step_s=3.0)
    with_lp = solve(prob, SolverOptions(**opts))  # type: ignore[arg-type]
    without = solve(prob, SolverOptions(**opts, lp_bound=False))  # type: ignore[arg-type]
    assert math.isfinite(with_lp.bound) and math.isnan(without.bound) and math.isnan(without.gap)
    assert (with_lp.x == without.x).all() and (with_lp.unplaced == without.unplaced).all()
    assert with_lp.nodes_used == without.nodes_used and with_lp.violations == without.violations


def test_near_zero_mean_with_spread_does_not_crash() -> None:
    prob = problem([node("n1", cpu=4000)], [wclass("idle", 100, count=1, mu_cpu=1e-40, sd_cpu=100)])
    r = run(prob)
    check_plan(prob, r)


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda p: setattr(p, "eps", 0.0), id="eps=0"),
    pytest.param(lambda p: setattr(p, "eps", 1.0), id="eps=1"),
    pytest.param(lambda p: setattr(p, "u_star", 0.0), id="u_star=0"),
    pytest.param(lambda p: setattr(p, "u_star", math.nan), id="u_star=nan"),
    pytest.param(lambda p: setattr(p.classes[0], "count", -1), id="negative-count"),
    pytest.param(lambda p: p.classes[0].requests.__setitem__(CPU, math.nan), id="nan-request"),
    pytest.param(lambda p: p.classes[0].requests.__setitem__(MEMORY, -1.0), id="negative-request"),
    pytest.param(lambda p: p.classes[0].requests.__setitem__(CPU, math.inf), id="inf-request"),
    pytest.param(lambda p: p.nodes.append(node("n1")), id="duplicate-node"),
    pytest.param(lambda p: p.classes.append(wclass("a", 10)), id="duplicate-class"),
])
def test_bad_input_raises_problem_error(mutate: Callable[[PlacementProblem], object]) -> None:
    prob = problem([node("n1")], [wclass("a", 1000, count=2)])
    mutate(prob)
    with pytest.raises(ProblemError):
        compile_problem(prob)
    with pytest.raises(ProblemError):
        solve(prob, SolverOptions(time_limit_s=2))


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        solve(problem([node("n1")], [wclass("a", 1000)]), SolverOptions(policy="fastest"))


# --- generated problems ------------------------------------------------------------------------------------------


@st.composite
def small_problems(draw: st.DrawFn, max_nodes: int = 4, max_classes: int = 4, max_count: int = 8
                   ) -> tuple[PlacementProblem, str]:
    n_nodes = draw(st.integers(1, max_nodes))
    labels = ("a", "b")
    nodes = []
    for i in range(n_nodes):
        cpu = draw(st.integers(500, 16000))
        mem = draw(st.sampled_from([0.5, 1, 4, 16]))
        busy = draw(st.booleans())
        load = None
        requested = None
        if busy:
            frac = draw(st.integers(0, 95)) / 100
            sd_cpu, sd_mem = draw(st.integers(0, 30)) / 100, draw(st.integers(0, 20)) / 100
            load = (frac * cpu, sd_cpu * cpu, frac * mem * GIB, sd_mem * mem * GIB)
            requested = {CPU: frac * cpu, MEMORY: frac * mem * GIB, PODS: 1.0}
        taints = [Taint("t", "x", "NoSchedule")] if draw(st.integers(0, 4)) == 0 else []
        zone = draw(st.sampled_from(labels))
        nodes.append(node(f"n{i}", cpu=cpu, mem_gib=mem, pods=draw(st.integers(1, 12)), labels={"zone": zone},
                          taints=taints, unschedulable=draw(st.integers(0, 6)) == 0, cost=draw(st.sampled_from([0.5, 1, 3])),
                          load=load, requested=requested))
    classes = []
    for k in range(draw(st.integers(1, max_classes))):
        cpu = draw(st.integers(0, 4000))
        mem = draw(st.integers(0, 4096))
        # Usage as whole percentages of the request: a forecast, not float dust (see the overflow test).
        mu = draw(st.integers(0, 150)) / 100 * cpu
        sd = draw(st.integers(0, 100)) / 100 * max(cpu, 100)
        selector = {"zone": draw(st.sampled_from(labels))} if draw(st.integers(0, 3)) == 0 else None
        tol = (Toleration("t", "Exists", "", ""),) if draw(st.booleans()) else ()
        classes.append(wclass(f"c{k}", cpu, mem, draw(st.integers(0, max_count)), mu_cpu=mu, sd_cpu=sd,
                              mu_mem_mib=draw(st.integers(0, 120)) / 100 * mem, sd_mem_mib=draw(st.integers(0, 50)) / 100 * mem,
                              selector=selector, tolerations=tol))
    eps = draw(st.sampled_from([0.02, 0.1, 0.3, 0.5, 0.7]))
    u_star = draw(st.sampled_from([0.6, 0.8, 0.9, 1.0]))
    return problem(nodes, classes, u_star=u_star, eps=eps), draw(st.sampled_from(POLICIES))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_generated_problems_fit_and_respect_exact_rule(case: tuple[PlacementProblem, str]) -> None:
    prob, policy = case
    r = solve(prob, SolverOptions(policy=policy, time_limit_s=2, workers=2))
    check_plan(prob, r)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(max_nodes=8, max_classes=5, max_count=15))
def test_generated_problems_decomposed_fit_and_respect_exact_rule(case: tuple[PlacementProblem, str]) -> None:
    # The large-model path (LNS) forced on small problems, including fewer nodes than a neighbourhood and
    # clusters where every node already hosts pods.
    prob, policy = case
    r = solve(prob, SolverOptions(policy=policy, time_limit_s=0.8, workers=2, full_model_limit=0, lns_nodes=4, lns_step_s=0.2))
    check_plan(prob, r)


@needs_openb
def test_a_binpack_places_at_least_as_many_pods_as_ffd() -> None:
    prob = openb_problem(200, 1000, seed=0)
    ffd = first_fit_decreasing(compile_problem(prob))
    r = solve(prob, SolverOptions(policy="a-binpack", time_limit_s=3, workers=2))
    check_plan(prob, r)
    assert r.unplaced.sum() <= ffd.unplaced.sum(), (int(r.unplaced.sum()), int(ffd.unplaced.sum()))
