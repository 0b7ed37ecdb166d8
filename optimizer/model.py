"""The placement model: integer counts of each workload class on each node, solved with OR-Tools CP-SAT.

    x[c, n] >= 0           pods of class c planned on node n (only where c may go on n at all)
    u[c]    >= 0           pods of class c left unplaced;  sum_n x[c, n] + u[c] = count[c]
    y[n]    in {0, 1}      node n in use (fixed to 1 when it already hosts pods)
    fit     sum_c req[c, r] x[c, n] <= free[n, r] * y[n]     every resource r (cpu, memory, pods, extended)
    safe    sum_c a[c, n, r] x[c, n] <= budget[n, r] * y[n] r in (cpu, memory): the linearised chance
                                                            constraint of optimizer.chance
    T       >= 1000 * load_after[n, r] / (U* cap[n, r])     the worst node's load against its bound
Objective (minimise), lexicographic through weights, policy first, then overload risk (T):
    binpack       nodes in use
    consolidate   capacity of the nodes in use (opens small nodes last, keeps busy ones)
    cost          sum of node cost over nodes in use
    load-balance  T, then sum_n |t[n] - mean t| (spread of per-node load)
    a-binpack     |dispersion of node cpu request share - demand dispersion| (ICAC'19 adaptive binpack,
                  L1 form), then nodes in use
and always, above everything: unplaced pods.
Units in the model are integers: cpu millicores, memory MiB (requests rounded up, capacities down).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from kso.placement import rule_violation
from kso.resources import CPU, MEMORY, MIB, PODS
from optimizer.chance import beta_max_mean, linear_safe_bound, plan_risk, z_value
from optimizer.problem import LOAD_RESOURCES, PlacementProblem

log = logging.getLogger("kso.optimizer")

POLICIES = ("binpack", "load-balance", "consolidate", "a-binpack", "cost")
SCALE = {MEMORY: 1.0 / MIB}  # canonical unit -> model unit; everything else 1:1
T_MAX = 1000
T_CEIL = T_MAX * 100  # domain of the load indexes; nodes already far over their bound are clamped


@dataclass(slots=True)
class SolverOptions:
    policy: str = "binpack"
    time_limit_s: float = 30.0
    workers: int = 2
    relative_gap: float = 0.01
    repair_rounds: int = 3
    seed: int = 0
    hint: str = "ffd"  # "ffd" | "none": start CP-SAT from the first-fit-decreasing placement
    # Above this many (class, node) pairs one CP-SAT model is too slow on a few cores (measured: 1,500
    # nodes x 103 classes, 2 workers: no improvement on the hint in 60 s), so the plan is improved by
    # large-neighbourhood search instead: CP-SAT re-solves a few dozen nodes at a time.
    full_model_limit: int = 40_000
    lns_nodes: int = 48
    lns_step_s: float = 3.0


@dataclass
class Compiled:
    """The problem as integer arrays, shared by CP-SAT, the heuristics and the LP bound."""

    resources: list[str]
    node_names: list[str]
    class_keys: list[str]
    counts: np.ndarray  # (C,)
    req: np.ndarray  # (C, R) int model units
    free: np.ndarray  # (N, R) int
    eligible: np.ndarray  # (C, N) bool: rules allow it and one pod fits
    a: np.ndarray  # (2, C, N) int: per-pod term of the safe bound (cpu, memory)
    budget: np.ndarray  # (2, N) int: safe budget (may be negative = node already over its bound)
    bound_cap: np.ndarray  # (2, N) float: U* cap in model units
    bound_const: np.ndarray  # (2, N) float: U* cap - budget, the load already there (with spread)
    mean0: np.ndarray  # (2, N) canonical: current load mean
    var0: np.ndarray  # (2, N)
    cap: np.ndarray  # (2, N) canonical allocatable of cpu, memory
    mu: np.ndarray  # (2, C) canonical per-pod usage mean
    var: np.ndarray  # (2, C)
    has_pods: np.ndarray  # (N,) bool
    cost: np.ndarray  # (N,) float
    reasons: dict[str, int] = field(default_factory=dict)  # why (class, node) pairs were excluded

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_classes(self) -> int:
        return len(self.class_keys)

    def subset(self, nodes: np.ndarray, counts: np.ndarray) -> Compiled:
        """The same problem restricted to ``nodes`` with ``counts`` pods of each class to place there."""
        return Compiled(self.resources, [self.node_names[i] for i in nodes], self.class_keys, counts.astype(np.int64),
                        self.req, self.free[nodes], self.eligible[:, nodes], self.a[:, :, nodes], self.budget[:, nodes],
                        self.bound_cap[:, nodes], self.bound_const[:, nodes], self.mean0[:, nodes], self.var0[:, nodes],
                        self.cap[:, nodes], self.mu, self.var, self.has_pods[nodes], self.cost[nodes])

    def ub(self) -> np.ndarray:
        """(C, N) most pods of each class that fit on each node alone (resources and safe bound)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            per_r = np.where(self.req[:, None, :] > 0, self.free[None, :, :] // np.maximum(self.req[:, None, :], 1),
                             np.iinfo(np.int64).max)
            by_fit = per_r.min(axis=2)
            per_s = np.where(self.a > 0, np.maximum(self.budget[:, None, :], 0) // np.maximum(self.a, 1),
                             np.iinfo(np.int64).max)
            by_safe = per_s.min(axis=0)
        ub = np.minimum(np.minimum(by_fit, by_safe), self.counts[:, None])
        return np.where(self.eligible, np.maximum(ub, 0), 0).astype(np.int64)


def _units(resource: str, value: float, up: bool) -> int:
    v = value * SCALE.get(resource, 1.0)
    return int(math.ceil(v - 1e-9)) if up else int(math.floor(v + 1e-9))


def compile_problem(problem: PlacementProblem) -> Compiled:
    problem.validate()
    nodes, classes = problem.nodes, problem.classes
    resources = [CPU, MEMORY, PODS]
    for c in classes:
        for r, v in c.requests.items():
            if v > 0 and r not in resources:
                resources.append(r)
    n_n, n_c, n_r = len(nodes), len(classes), len(resources)
    req = np.array([[_units(r, c.requests.get(r, 0.0), up=True) for r in resources] for c in classes],
                   dtype=np.int64).reshape(n_c, n_r)
    free = np.array([[_units(r, n.allocatable.get(r, 0.0) - n.requested.get(r, 0.0), up=False) for r in resources]
                     for n in nodes], dtype=np.int64).reshape(n_n, n_r)
    free = np.maximum(free, 0)
    counts = np.array([c.count for c in classes], dtype=np.int64)

    reasons: dict[str, int] = {}
    eligible = np.ones((n_c, n_n), dtype=bool)
    for ci, c in enumerate(classes):
        if c.example is None:
            continue
        for ni, n in enumerate(nodes):
            if n.info is None:
                continue
            why = rule_violation(c.example, n.info)
            if why:
                eligible[ci, ni] = False
                reason = why.split(" ")[0]
                reasons[reason] = reasons.get(reason, 0) + 1
    fits = (req[:, None, :] <= free[None, :, :]).all(axis=2)
    reasons["requests-do-not-fit"] = int((eligible & ~fits).sum())
    eligible &= fits

    # Safe bound per node and load resource, on the forecast load (or, without a forecast, the bound
    # pods' requests as a stand-in for their load, with no spread).
    mu = np.array([[c.usage.mean.get(r, c.requests.get(r, 0.0)) for c in classes] for r in LOAD_RESOURCES]).reshape(2, n_c)
    sd = np.array([[c.usage.std.get(r, 0.0) for c in classes] for r in LOAD_RESOURCES]).reshape(2, n_c)
    var = sd * sd
    weights = np.maximum(counts, 0).astype(float)
    z = z_value(problem.eps)
    a = np.zeros((2, n_c, n_n), dtype=np.int64)
    budget = np.zeros((2, n_n), dtype=np.int64)
    bound_cap = np.zeros((2, n_n))
    bound_const = np.zeros((2, n_n))
    mean0 = np.zeros((2, n_n))
    var0 = np.zeros((2, n_n))
    cap = np.zeros((2, n_n))
    for ri, r in enumerate(LOAD_RESOURCES):
        scale = SCALE.get(r, 1.0)
        fill_mu = float(np.average(mu[ri], weights=weights)) if weights.sum() else 0.0
        fill_var = float(np.average(var[ri], weights=weights)) if weights.sum() else 0.0
        for ni, n in enumerate(nodes):
            c_n = n.allocatable.get(r, 0.0)
            load = n.load.get(r)
            if load is not None and math.isfinite(load.mean):
                m, s = load.mean, (load.std if math.isfinite(load.std) else 0.0)
            else:
                m, s = n.requested.get(r, 0.0), 0.0
            coeff, bud = linear_safe_bound(m, s, c_n, mu[ri], var[ri], problem.u_star,
                                           _z_for(z, s, c_n, fill_mu, fill_var, problem), fill_mu, fill_var)
            a[ri, :, ni] = np.ceil(np.clip(coeff * scale, 0.0, 2.0**40) - 1e-9).astype(np.int64)
            budget[ri, ni] = int(math.floor(min(max(bud * scale, -2.0**52), 2.0**52) + 1e-9)) if math.isfinite(bud) else -1
            bound_cap[ri, ni] = problem.u_star * c_n * scale
            bound_const[ri, ni] = bound_cap[ri, ni] - budget[ri, ni]
            mean0[ri, ni], var0[ri, ni], cap[ri, ni] = m, s * s, c_n
    return Compiled(resources, [n.name for n in nodes], [c.key for c in classes], counts, req, free, eligible,
                    a, budget, bound_cap, bound_const, mean0, var0, cap, mu, var,
                    np.array([n.has_pods for n in nodes], dtype=bool), np.array([n.cost for n in nodes]), reasons)


# The normal z can be looser than the Beta rule (at eps = 0.3 the Beta is skewed towards U*), so each
# node gets the larger of the two, the Beta one read at the spread the node would have when full:
#     z_beta = (U* - beta_max_mean(sigma_full)) / sigma_full.
def _z_for(z: float, s: float, cap: float, fill_mu: float, fill_var: float, problem: PlacementProblem) -> float:
    if cap <= 0:
        return z
    fill_mu = max(fill_mu, 1e-3 * cap)  # as in linear_safe_bound
    full_var = s * s + (problem.u_star * cap / fill_mu * fill_var if fill_mu > 0 else 0.0)
    sigma = math.sqrt(full_var) / cap
    if sigma <= 1e-6:
        return z
    return max(z, (problem.u_star - beta_max_mean(sigma, problem.u_star, problem.eps)) / sigma)


@dataclass
class SolveResult:
    x: np.ndarray  # (C, N) pods planned
    unplaced: np.ndarray  # (C,)
    status: str
    objective: float
    bound: float
    gap: float
    wall_s: float
    first_feasible_s: float | None
    gap_1pct_s: float | None
    nodes_used: int
    violations: int  # nodes above their safe bound under the exact (Beta) rule
    repair_rounds: int
    risk: np.ndarray  # (2, N) Beta risk after the plan
    headroom: np.ndarray  # (2, N) canonical: mean load the node can still take under its bound
    notes: list[str] = field(default_factory=list)
    progress: list[tuple[float, float, float]] = field(default_factory=list)  # (t, objective, bound)


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, t0: float) -> None:
        super().__init__()
        self.t0 = t0
        self.points: list[tuple[float, float, float]] = []

    def on_solution_callback(self) -> None:
        self.points.append((time.perf_counter() - self.t0, self.objective_value, self.best_objective_bound))


def _gap(obj: float, bound: float) -> float:
    if obj == bound:
        return 0.0
    return abs(obj - bound) / max(abs(obj), 1e-9)


def evaluate(comp: Compiled, x: np.ndarray, u_star: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(risk, headroom, mean, var) per load resource and node after placing x, under the exact rule."""
    mean = comp.mean0 + np.einsum("rc,cn->rn", comp.mu, x)
    var = comp.var0 + np.einsum("rc,cn->rn", comp.var, x)
    risk = plan_risk(mean, var, comp.cap, u_star)
    headroom = comp.budget / np.array([[SCALE.get(r, 1.0)] for r in LOAD_RESOURCES]) - np.einsum(
        "rcn,cn->rn", comp.a / np.array([SCALE.get(r, 1.0) for r in LOAD_RESOURCES])[:, None, None], x)
    return risk, headroom, mean, var


def solve(problem: PlacementProblem, options: SolverOptions, comp: Compiled | None = None) -> SolveResult:
    """Solve; then hold every node to the exact Beta rule: nodes the linear form let through get a
    tightened budget and one more solve (small models), and as a last resort lose pods until they pass."""
    if options.policy not in POLICIES:
        raise ValueError(f"unknown policy {options.policy!r} (known: {', '.join(POLICIES)})")
    comp = comp or compile_problem(problem)
    t0 = time.perf_counter()
    hint: np.ndarray | None = None
    if options.hint == "ffd" or comp.n_classes * comp.n_nodes > options.full_model_limit:
        from optimizer.heuristics import first_fit_decreasing

        hint = first_fit_decreasing(comp).x
    if comp.n_classes * comp.n_nodes > options.full_model_limit and options.policy != "a-binpack":
        assert hint is not None
        result = _solve_lns(comp, options, problem.u_star, hint, t0)
    else:
        result = _solve_once(comp, options, problem.u_star, hint, t0)
        if hint is not None and int((comp.counts - hint.sum(axis=1)).sum()) < int(result.unplaced.sum()):
            # CP-SAT stopped on a plan that places fewer pods than its own (feasible) hint: keep the hint.
            risk, headroom, _, _ = evaluate(comp, hint, problem.u_star)
            result = SolveResult(hint.copy(), comp.counts - hint.sum(axis=1), "FEASIBLE", math.nan, math.nan, math.nan,
                                 0.0, result.first_feasible_s, None, 0, 0, 0, risk, headroom,
                                 [f"CP-SAT's plan placed fewer pods than first-fit-decreasing ({result.status}); "
                                  "the FFD placement is used"], result.progress)
        for rounds in range(1, options.repair_rounds + 1):
            over = _over(result, problem.eps)
            if not over.any() or time.perf_counter() - t0 > options.time_limit_s:
                break
            _tighten(comp, result.x, over, problem)
            log.info("repair round %d: %d node-resources over the exact bound; re-solving", rounds, int(over.sum()))
            again = _solve_once(comp, options, problem.u_star, result.x, t0)
            if again.status in ("OPTIMAL", "FEASIBLE"):
                again.repair_rounds = rounds
                result = again
    removed = _enforce_exact(comp, result, problem)
    if removed:
        result.notes.append(f"{removed} pods taken out of the plan on nodes the exact (Beta) rule rejects")
    result.violations = int(_over(result, problem.eps).any(axis=0).sum())
    result.nodes_used = int(((result.x.sum(axis=0) > 0) | comp.has_pods).sum())
    result.wall_s = time.perf_counter() - t0
    return result


def _over(result: SolveResult, eps: float) -> np.ndarray:
    return (result.risk > eps + 1e-9) & (result.x.sum(axis=0) > 0)[None, :]


def _tighten(comp: Compiled, x: np.ndarray, over: np.ndarray, problem: PlacementProblem) -> None:
    """Lower each offending node's budget by the mean load the Beta rule says is too much."""
    _, _, mean, var = evaluate(comp, x, problem.u_star)
    for ri, ni in zip(*np.nonzero(over), strict=True):
        sigma = math.sqrt(var[ri, ni]) / comp.cap[ri, ni]
        excess = mean[ri, ni] - beta_max_mean(sigma, problem.u_star, problem.eps) * comp.cap[ri, ni]
        comp.budget[ri, ni] -= int(math.ceil(max(excess, 0.0) * SCALE.get(LOAD_RESOURCES[ri], 1.0))) + 1


def _enforce_exact(comp: Compiled, result: SolveResult, problem: PlacementProblem) -> int:
    """Take pods (largest mean first) off nodes over the exact bound until each passes."""
    removed = 0
    for ni in np.nonzero(_over(result, problem.eps).any(axis=0))[0]:
        while result.x[:, ni].sum() > 0:
            risk = _node_risk(comp, result.x, ni, problem.u_star)
            if (risk <= problem.eps + 1e-9).all():
                break
            present = np.nonzero(result.x[:, ni])[0]
            ci = present[np.argmax(comp.mu[:, present].max(axis=0))]
            result.x[ci, ni] -= 1
            result.unplaced[ci] += 1
            removed += 1
    result.risk, result.headroom, _, _ = evaluate(comp, result.x, problem.u_star)
    return removed


def _node_risk(comp: Compiled, x: np.ndarray, ni: int, u_star: float) -> np.ndarray:
    mean = comp.mean0[:, ni] + comp.mu @ x[:, ni]
    var = comp.var0[:, ni] + comp.var @ x[:, ni]
    return plan_risk(mean, var, comp.cap[:, ni], u_star)


def _solve_lns(comp: Compiled, options: SolverOptions, u_star: float, start: np.ndarray, t0: float) -> SolveResult:
    """Large-neighbourhood search from ``start``: free the pods of a few dozen nodes (the emptiest in
    use, some at random, some unused) plus the unplaced ones, and let CP-SAT re-place them on those
    nodes; the previous placement is the hint, so no step makes the plan worse on those nodes."""
    rng = np.random.default_rng(options.seed)
    x = start.copy()
    steps = improved = 0
    first = time.perf_counter() - t0
    progress: list[tuple[float, float, float]] = []
    cpu = comp.resources.index(CPU)
    while time.perf_counter() - t0 + options.lns_step_s < options.time_limit_s:
        # "In use" includes nodes that already host pods but got none in the plan: load-balance must be
        # able to move planned pods onto them.
        in_use = (x.sum(axis=0) > 0) | comp.has_pods
        used = np.nonzero(in_use)[0]
        unused = np.nonzero(~in_use)[0]
        if len(used) == 0 and len(unused) == 0:
            break
        fill = (comp.req[:, cpu] @ x[:, used]) / np.maximum(comp.free[used, cpu], 1)
        k = min(options.lns_nodes, comp.n_nodes)
        emptiest = used[np.argsort(fill)[: k // 2]]
        rest = np.setdiff1d(used, emptiest)
        pick = list(emptiest) + (list(rng.choice(rest, size=min(k // 3, len(rest)), replace=False)) if len(rest) else [])
        if len(unused):
            pick += list(rng.choice(unused, size=min(k - len(pick), len(unused)), replace=False))
        nodes = np.unique(np.array(pick, dtype=np.int64))
        if len(nodes) == 0:
            break
        unplaced = comp.counts - x.sum(axis=1)
        counts = x[:, nodes].sum(axis=1) + unplaced
        sub = comp.subset(nodes, counts)
        sub_opts = SolverOptions(options.policy, options.lns_step_s, options.workers, 0.0, 0, options.seed + steps, "none")
        res = _solve_once(sub, sub_opts, u_star, x[:, nodes], time.perf_counter())
        steps += 1
        if res.status in ("OPTIMAL", "FEASIBLE"):
            before = int((x[:, nodes].sum(axis=0) > 0).sum()), int(unplaced.sum())
            x[:, nodes] = res.x
            after = int((res.x.sum(axis=0) > 0).sum()), int((comp.counts - x.sum(axis=1)).sum())
            improved += (after[1], after[0]) < (before[1], before[0])
        progress.append((time.perf_counter() - t0, float((x.sum(axis=0) > 0).sum()), math.nan))
    risk, headroom, _, _ = evaluate(comp, x, u_star)
    unplaced = comp.counts - x.sum(axis=1)
    used_n = int(((x.sum(axis=0) > 0) | comp.has_pods).sum())
    return SolveResult(x, unplaced, "FEASIBLE", math.nan, math.nan, math.nan, 0.0, first, None, used_n, 0, 0, risk,
                       headroom, [f"decomposed: {steps} CP-SAT neighbourhood solves of {options.lns_nodes} nodes, "
                                  f"{improved} improved the plan; no global solver bound"], progress)


def _solve_once(comp: Compiled, options: SolverOptions, u_star: float, hint: np.ndarray | None,
                t0: float) -> SolveResult:
    model = cp_model.CpModel()
    n_c, n_n = comp.n_classes, comp.n_nodes
    ub = comp.ub()
    xs: dict[tuple[int, int], cp_model.IntVar] = {}
    by_node: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(n_n)]
    by_class: list[list[cp_model.IntVar]] = [[] for _ in range(n_c)]
    for ci, ni in zip(*np.nonzero(ub), strict=True):
        v = model.new_int_var(0, int(ub[ci, ni]), f"x{ci}_{ni}")
        xs[(ci, ni)] = v
        by_node[ni].append((ci, v))
        by_class[ci].append(v)
    unplaced = [model.new_int_var(0, int(comp.counts[ci]), f"u{ci}") for ci in range(n_c)]
    for ci in range(n_c):
        model.add(sum(by_class[ci]) + unplaced[ci] == int(comp.counts[ci]))

    needs_y = options.policy in ("binpack", "consolidate", "cost", "a-binpack")
    ys: list[Any] = []
    t_max = model.new_int_var(0, T_CEIL, "T")
    node_t: list[cp_model.IntVar] = []
    for ni in range(n_n):
        terms = by_node[ni]
        if needs_y and not comp.has_pods[ni]:
            y: Any = model.new_bool_var(f"y{ni}")
            if not terms:
                model.add(y == 0)
        else:
            y = 1
        ys.append(y)
        if not terms:
            continue
        vars_ = [v for _, v in terms]
        cls = [ci for ci, _ in terms]
        for ri in range(len(comp.resources)):
            coeffs = [int(comp.req[ci, ri]) for ci in cls]
            if any(coeffs):
                model.add(cp_model.LinearExpr.weighted_sum(vars_, coeffs) <= int(comp.free[ni, ri]) * y)
        t_n = model.new_int_var(0, T_CEIL, f"t{ni}") if options.policy == "load-balance" else None
        for ri in range(2):
            coeffs = [int(comp.a[ri, ci, ni]) for ci in cls]
            expr = cp_model.LinearExpr.weighted_sum(vars_, coeffs)
            model.add(expr <= max(int(comp.budget[ri, ni]), 0) * y)
            # Load index of the node against its bound (1000 = at U* cap): T >= index, t_n >= index.
            cap_i = int(max(comp.bound_cap[ri, ni], 1.0))
            const = int(math.ceil(T_MAX * min(max(comp.bound_const[ri, ni], 0.0), 50.0 * cap_i)))
            scaled = cp_model.LinearExpr.weighted_sum(vars_, [T_MAX * c for c in coeffs])
            model.add(scaled + const <= cap_i * t_max)
            if t_n is not None:
                model.add(scaled + const <= cap_i * t_n)
        if t_n is not None:
            node_t.append(t_n)
    # Identical empty nodes are interchangeable: open them in order (symmetry breaking).
    if needs_y:
        groups: dict[tuple[Any, ...], list[int]] = {}
        for ni in range(n_n):
            if not comp.has_pods[ni] and not isinstance(ys[ni], int):
                sig = (tuple(comp.free[ni]), tuple(comp.budget[:, ni]), comp.cost[ni], tuple(comp.eligible[:, ni]))
                groups.setdefault(sig, []).append(ni)
        for members in groups.values():
            for i, j in zip(members, members[1:], strict=False):
                model.add(ys[i] >= ys[j])

    w_unplaced, objective = _objective(model, comp, options.policy, ys, t_max, node_t, by_node, unplaced)
    model.minimize(objective)

    if hint is not None:
        _add_hint(model, comp, hint, ub, xs, unplaced, ys, t_max)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(options.time_limit_s - (time.perf_counter() - t0), 1.0)
    solver.parameters.num_workers = options.workers
    solver.parameters.relative_gap_limit = options.relative_gap
    solver.parameters.random_seed = options.seed
    if n_c * n_n > 20_000:
        # Large models: CP-SAT's full presolve (probing, symmetry detection) costs more than it gives
        # within a plan's time budget (measured: ~25 s of presolve at 1,500 nodes x 100 classes).
        solver.parameters.cp_model_probing_level = 0
        solver.parameters.symmetry_level = 0
        solver.parameters.max_presolve_iterations = 1
    progress = _Progress(t0)
    status = solver.solve(model, progress)
    name = solver.status_name(status)
    x = np.zeros((n_c, n_n), dtype=np.int64)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        risk, headroom, _, _ = evaluate(comp, x, u_star)
        return SolveResult(x, comp.counts.copy(), name, math.nan, math.nan, math.inf, 0.0, None, None, 0, 0, 0,
                           risk, headroom, [f"CP-SAT found no plan ({name})"], progress.points)
    for (ci, ni), v in xs.items():
        x[ci, ni] = solver.value(v)
    un = np.array([solver.value(u) for u in unplaced], dtype=np.int64)
    obj, bound = solver.objective_value, solver.best_objective_bound
    first = progress.points[0][0] if progress.points else None
    gap1 = next((t for t, o, b in progress.points if _gap(o, b) <= 0.01), None)
    if gap1 is None and _gap(obj, bound) <= 0.01:
        gap1 = time.perf_counter() - t0
    risk, headroom, _, _ = evaluate(comp, x, u_star)
    used = (x.sum(axis=0) > 0) | comp.has_pods
    notes = []
    if un.sum():
        notes.append(f"{int(un.sum())} pods could not be placed within the safe bounds and allocatable "
                     f"(weight {w_unplaced} per pod in the objective)")
    return SolveResult(x, un, name, obj, bound, _gap(obj, bound), 0.0, first, gap1, int(used.sum()), 0, 0,
                       risk, headroom, notes, progress.points)


def _add_hint(model: cp_model.CpModel, comp: Compiled, hint: np.ndarray, ub: np.ndarray,
              xs: dict[tuple[int, int], cp_model.IntVar], unplaced: list[cp_model.IntVar], ys: list[Any],
              t_max: cp_model.IntVar) -> None:
    """Hint a whole solution (CP-SAT only starts from a hint it can complete): x, u, y and T."""
    x = np.minimum(hint, ub)
    for (ci, ni), v in xs.items():
        model.add_hint(v, int(x[ci, ni]))
    for ci, u in enumerate(unplaced):
        model.add_hint(u, int(comp.counts[ci] - x[ci].sum()))
    used = x.sum(axis=0) > 0
    for ni, y in enumerate(ys):
        if not isinstance(y, int):
            model.add_hint(y, bool(used[ni]))
    load = np.einsum("rcn,cn->rn", comp.a, x) * T_MAX + np.ceil(T_MAX * np.minimum(np.maximum(comp.bound_const, 0.0),
                                                                                50.0 * np.maximum(comp.bound_cap, 1.0)))
    index = np.ceil(load / np.maximum(comp.bound_cap, 1.0).astype(np.int64))
    has_terms = np.array([bool(np.any(ub[:, ni])) for ni in range(comp.n_nodes)], dtype=bool)
    model.add_hint(t_max, int(min(index[:, has_terms].max(initial=0), T_CEIL)))


def _objective(model: cp_model.CpModel, comp: Compiled, policy: str, ys: list[Any], t_max: cp_model.IntVar,
               node_t: list[cp_model.IntVar], by_node: list[list[tuple[int, cp_model.IntVar]]],
               unplaced: list[cp_model.IntVar]) -> tuple[int, Any]:
    n_n = comp.n_nodes
    y_vars = [(ni, y) for ni, y in enumerate(ys) if not isinstance(y, int)]
    # Over the nodes the plan can still change, load indexes stay within 0..T_MAX (the safe bound holds
    # there); T_CEIL only leaves room for nodes already over their bound, whose index is a constant.
    t_range = T_MAX + 1
    if policy == "load-balance":
        # Spread: sum_n |t_n - mean|, where the mean is what perfect balance would give.
        total = comp.bound_const.sum() + float((comp.a.mean(axis=2) * comp.counts[None, :]).sum())
        mean_t = int(T_MAX * total / max(comp.bound_cap.sum(), 1.0))
        devs = []
        for i, t_n in enumerate(node_t):
            d = model.new_int_var(0, T_CEIL, f"d{i}")
            model.add_abs_equality(d, t_n - mean_t)
            devs.append(d)
        w_t = t_range * n_n + 1
        primary = w_t * t_max + sum(devs)
        w_unplaced = w_t * t_range * 2
        return w_unplaced, w_unplaced * sum(unplaced) + primary
    if policy == "a-binpack":
        # Node cpu request share s_n (0..1000); dispersion S = sum_n |s_n - s_bar| over nodes in use is
        # driven towards the demand's own dispersion D* = n_used * s_bar * cv(demand) * sqrt(2 / pi)
        # (the L1 analogue of matching the coefficients of variation).
        cpu = comp.resources.index(CPU)
        cap_cpu = comp.free[:, cpu] + 0
        demand = comp.req[:, cpu].astype(float)
        w = comp.counts.astype(float)
        cv = float(np.sqrt(np.average((demand - np.average(demand, weights=w)) ** 2, weights=w))
                   / max(np.average(demand, weights=w), 1e-9)) if w.sum() else 0.0
        s_bar = int(T_MAX * float((demand * w).sum()) / max(float(cap_cpu.sum()), 1.0))
        devs = []
        for ni in range(n_n):
            if not by_node[ni] or cap_cpu[ni] <= 0:
                continue
            s_n = model.new_int_var(0, T_MAX, f"s{ni}")
            vars_ = [v for _, v in by_node[ni]]
            coeffs = [int(T_MAX * comp.req[ci, cpu]) for ci, _ in by_node[ni]]
            model.add(cp_model.LinearExpr.weighted_sum(vars_, coeffs) <= int(cap_cpu[ni]) * (s_n + 1))
            model.add(cp_model.LinearExpr.weighted_sum(vars_, coeffs) >= int(cap_cpu[ni]) * s_n)
            d = model.new_int_var(0, T_MAX, f"d{ni}")
            model.add_abs_equality(d, s_n - s_bar)
            devs.append(d)
        target = int(len(devs) * s_bar * cv * math.sqrt(2 / math.pi))
        miss = model.new_int_var(0, T_MAX * max(len(devs), 1) * 2, "miss")
        model.add_abs_equality(miss, sum(devs) - target)
        w_y = t_range
        w_miss = w_y * (len(y_vars) + 1)
        w_unplaced = w_miss * (T_MAX * max(len(devs), 1) * 2 + 1) * 2
        return w_unplaced, w_unplaced * sum(unplaced) + w_miss * miss + w_y * sum(y for _, y in y_vars) + t_max
    if policy == "binpack":
        weights = {ni: 1 for ni, _ in y_vars}
    elif policy == "consolidate":
        cpu = comp.resources.index(CPU)
        biggest = max(float(comp.free[:, cpu].max()), 1.0)
        weights = {ni: max(int(round(100 * comp.free[ni, cpu] / biggest)), 1) for ni, _ in y_vars}
    else:  # cost
        weights = {ni: max(int(round(100 * comp.cost[ni])), 0) for ni, _ in y_vars}
    w_y = t_range
    w_unplaced = w_y * (max(weights.values(), default=1) + 1) * 2
    nodes_term = cp_model.LinearExpr.weighted_sum([y for _, y in y_vars], [weights[ni] for ni, _ in y_vars])
    return w_unplaced, w_unplaced * sum(unplaced) + w_y * nodes_term + t_max
