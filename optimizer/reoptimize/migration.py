"""Re-optimisation of a running placement with a move budget (the descheduler's job, with kso's model).

Start from where the pods are. Every *movable* bound pod (the caller decides which: ``kso reoptimize``
excludes mirror, DaemonSet, critical, local-storage, single-replica and opted-out pods) becomes a
member of its workload class; everything else stays where it is, as node requests and node load.
CP-SAT then chooses the new count of each class on each node:

    x[c, n]      >= 0   pods of class c on node n after the moves;  sum_n x[c, n] = pods of c (all stay placed)
    moved[c, n]  >= x_cur[c, n] - x[c, n]                      evictions of class c from node n
    budget       sum moved <= max_moves;  per source node <= max_per_node;  per namespace <= max_per_namespace;
                 per PodDisruptionBudget <= its disruptionsAllowed
    fit          sum_c req[c, r] x[c, n] <= max(free[n, r], what is there now)   (a node never has to shed
                 pods to fit: kubelet already admitted them)
    safe         the linearised chance constraint of optimizer.plan.chance (sum_c a[c, n] x[c, n] <= budget[n]),
                 hard on nodes under their safe bound now, soft on nodes over it: excess e[r, n] >= 0,
                 never more than now, and o[n] = 1 while a node is still over.
Objective (minimise), lexicographic through weights:
    1. risk     nodes still over their safe bound (o), then their excess (per mille of U* capacity)
    2. policy   binpack / a-binpack: nodes in use; consolidate: their capacity; cost: their cost;
                load-balance: spread of the per-node load index; none: nothing (risk moves only)
                + move_cost per eviction, in the policy's unit (one node for the node-counting policies,
                  one node's bound for load-balance), so a move is made only for a larger policy gain.
Nodes count as "in use" when they keep pods other than DaemonSet and mirror pods (those run on every
node anyway and leave with it).

Approximations (said here once):
* A moved pod's usage is its class's usage model: history when given, else its request with no
  spread. The source node's load after the move is its forecast load minus that estimate, so a pod
  that uses less than it requests is credited with more relief than it gives (loads are never shown
  below 0); the destination gets the estimate added, which is then pessimistic.
* The safe bound in the solver is the linear (tangent) form of optimizer.plan.chance; every result is
  checked with the exact Beta rule afterwards, budgets are tightened and the model re-solved, and as a
  last resort moves into a node that the exact rule rejects are undone.
* Counts, not pods: which pod of a class leaves a node is a free choice (lowest priority, then name),
  and the replacement pod may land on any of the class's target slots; the moves table pairs them up.
* Evictions happen one by one and the replacements are scheduled later by kube-scheduler; a move
  whose target only has room after another eviction relies on the extender's plan slots and the
  scheduler's own fit check at that time.
* PodDisruptionBudgets: the moves of each budget's pods stay within its disruptionsAllowed at planning
  time (optimizer.reoptimize.budgets); a (class, node) pair with any pod under a budget counts all its
  moves against it, which can only under-use a budget, never exceed it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from forecasting.types import NodeForecast
from kso.core.cluster import ClusterState
from kso.core.objects import PodInfo
from kso.core.placement import rule_violation
from optimizer.plan.chance import beta_max_mean
from optimizer.plan.cluster_problem import DEFAULT_COST_KEY, problem_from_state
from optimizer.plan.compiled import (
    POLICIES,
    SCALE,
    T_CEIL,
    T_MAX,
    Compiled,
    compile_problem,
    evaluate,
    load_index,
    node_weights,
)
from optimizer.plan.cpsat import PlacementModel
from optimizer.plan.placement_plan import PlacementPlan
from optimizer.plan.problem import LOAD_RESOURCES, NodeLoad, PlacementProblem, UsageModel, WorkloadClass, class_key, request_usage
from optimizer.plan.protected_solver import ProtectedSolver, SolverDied
from optimizer.reoptimize.budgets import DisruptionLimit
from optimizer.reoptimize.migration_result import MigrationContext, MigrationResult, Move, NodeOutcome, moves_of, outcomes

log = logging.getLogger("kso.optimizer.reoptimize.migration")
__all__ = ["MIGRATION_POLICIES", "MigrationOptions", "MigrationResult", "Move", "MoveLimits", "NodeOutcome", "plan_migration"]

MIGRATION_POLICIES = (*POLICIES, "none")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(slots=True)
class MoveLimits:
    """Eviction limits; None = no limit."""

    max_moves: int | None = None
    max_per_node: int | None = None  # evictions from one node
    max_per_namespace: int | None = None
    budgets: tuple[DisruptionLimit, ...] = ()  # PodDisruptionBudgets (optimizer.reoptimize.budgets)

    def describe(self) -> str:
        def v(x: int | None) -> str:
            return "-" if x is None else str(x)

        return f"total {v(self.max_moves)}, per node {v(self.max_per_node)}, per namespace {v(self.max_per_namespace)}"


@dataclass(slots=True)
class MigrationOptions:
    policy: str = "binpack"  # optimizer.plan.model.POLICIES or "none" (risk moves only)
    move_cost: float = 0.2  # cost of one eviction, as a share of the policy's unit (one node)
    limits: MoveLimits = field(default_factory=MoveLimits)
    time_limit_s: float = 30.0
    workers: int = 2
    seed: int = 0
    repair_rounds: int = 3
    # above this many class x node pairs only a neighbourhood moves (see _neighbourhood)
    full_model_limit: int = 20_000


def counts_for_emptiness(pod: PodInfo) -> bool:
    """Does this pod keep its node "in use"? DaemonSet and mirror (static) pods do not."""
    return pod.owner_kind != "DaemonSet" and MIRROR_ANNOTATION not in pod.annotations


def plan_migration(state: ClusterState, forecasts: dict[str, dict[str, NodeForecast]] | None, u_star: float, eps: float,
                   movable: list[PodInfo], options: MigrationOptions | None = None, *,
                   class_usage: dict[str, UsageModel] | None = None, cost_key: str = DEFAULT_COST_KEY,
                   now: float | None = None, solver: ProtectedSolver | None = None) -> MigrationResult:
    """Solve the re-optimisation. ``movable``: the bound pods that may be evicted (others stay). With
    ``solver`` the CP-SAT part runs in its protected child process (``kso reoptimize``); a solve that
    never returns moves nothing and says so."""
    options = options or MigrationOptions()
    if options.policy not in MIGRATION_POLICIES:
        raise ValueError(f"unknown policy {options.policy!r} (known: {', '.join(MIGRATION_POLICIES)})")
    if options.move_cost < 0:
        raise ValueError("move cost must be >= 0")
    t0 = time.perf_counter()
    problem = problem_from_state(state, forecasts, u_star, eps, pending=[], cost_key=cost_key,
                                 class_usage=class_usage, now=now)
    index = {n.name: i for i, n in enumerate(problem.nodes)}
    notes: list[str] = []
    by_class = _movable_by_class(movable, index, notes)
    classes, plan_keys, namespaces, members = _classes(by_class, index, class_usage or {})
    loads_now = [dict(n.load) for n in problem.nodes]
    anchored = _keep_staying_pods(state, problem, classes, members, {p.uid for pods in by_class.values() for p in pods})
    problem.classes = classes
    comp = compile_problem(problem)
    x_cur = np.zeros((comp.n_classes, comp.n_nodes), dtype=np.int64)
    for ci, where in enumerate(members):
        for ni, pods in where.items():
            x_cur[ci, ni] = len(pods)

    ctx = MigrationContext(problem, comp, plan_keys, namespaces, members, x_cur, x_cur.copy(), anchored,
                   np.zeros((2, comp.n_nodes)), options.policy, "NO_MOVES", 0.0, 0.0, 0.0, notes, loads_now)
    risk_before, _, mean_before, _ = evaluate(comp, x_cur, u_star)
    over_rn = (risk_before > eps + 1e-9) & (comp.cap > 0)
    if comp.n_classes:
        _align_budgets(comp, x_cur, over_rn, u_star, eps)
        if solver is None:
            _solve(ctx, over_rn, options)
        else:
            try:
                ctx, crash_notes = solver.call(_solved, options, ctx, over_rn)
                ctx.notes[:0] = crash_notes
            except SolverDied as exc:
                ctx.notes += [*exc.notes, "no solver process returned a re-optimisation; nothing moves"]
                ctx.status = "SOLVER_DIED"
        comp, notes = ctx.comp, ctx.notes  # the child's copies (budgets tightened there)
    ctx.risk_after, _, mean_after, _ = evaluate(comp, ctx.x_new, u_star)
    unfixable = [comp.node_names[ni] for ni in np.nonzero(over_rn.any(axis=0))[0]
                 if not x_cur[:, ni].any()]
    if unfixable:
        notes.append(f"over their safe bound with no movable pod: {', '.join(unfixable[:10])}"
                     + (f" (+{len(unfixable) - 10})" if len(unfixable) > 10 else ""))
    ctx.wall_s = time.perf_counter() - t0
    moves = moves_of(ctx, over_rn.any(axis=0))
    rows = outcomes(ctx, state, risk_before, mean_before, mean_after, over_rn.any(axis=0), moves)
    result = MigrationResult(moves, rows, PlacementPlan("", 0, "binpack", "", 0, 0, 0, u_star, eps, 0, {}, {}, {}),
                             ctx.status, ctx.objective, ctx.bound, ctx.wall_s, int(x_cur.sum()), options.policy, u_star,
                             eps, notes, ctx)
    result.plan = result.plan_for(moves)
    return result


def _movable_by_class(movable: list[PodInfo], index: dict[str, int],
                      notes: list[str]) -> dict[tuple[str, str], list[PodInfo]]:
    """The movable pods on ready nodes, once each, by (class key, namespace)."""
    seen: set[str] = set()
    by_class: dict[tuple[str, str], list[PodInfo]] = defaultdict(list)
    outside = 0
    for pod in movable:
        if not pod.node_name or pod.terminal or pod.uid in seen:
            continue
        if pod.node_name not in index:
            outside += 1
            continue
        seen.add(pod.uid)
        by_class[(class_key(pod), pod.namespace)].append(pod)
    if outside:
        notes.append(f"{outside} movable pods are on nodes that are not ready or unknown; left alone")
    return by_class


def _classes(by_class: dict[tuple[str, str], list[PodInfo]], index: dict[str, int], class_usage: dict[str, UsageModel],
             ) -> tuple[list[WorkloadClass], list[str], list[str], list[dict[int, list[PodInfo]]]]:
    """One class per (class key, namespace), so the per-namespace limit is exact even for ownerless
    "shape@" classes; the plan merges them back under the key the extender computes. Returns the classes,
    their plan keys, namespaces and members (node index -> movable pods there, lowest priority first)."""
    classes: list[WorkloadClass] = []
    plan_keys: list[str] = []
    namespaces: list[str] = []
    members: list[dict[int, list[PodInfo]]] = []
    seen_keys: set[str] = set()
    for (key, ns), pods in sorted(by_class.items()):
        ex = pods[0]
        model = class_usage.get(key) or request_usage(ex.requests)
        internal = key if key not in seen_keys else f"{key}~{ns}"
        seen_keys.add(internal)
        classes.append(WorkloadClass(internal, dict(ex.requests), len(pods), model, ex, [p.uid for p in pods]))
        plan_keys.append(key)
        namespaces.append(ns)
        where: dict[int, list[PodInfo]] = defaultdict(list)
        for p in sorted(pods, key=lambda p: (p.priority, p.name)):
            where[index[p.node_name]].append(p)
        members.append(dict(where))
    return classes, plan_keys, namespaces, members


def _keep_staying_pods(state: ClusterState, problem: PlacementProblem, classes: list[WorkloadClass],
                       members: list[dict[int, list[PodInfo]]], movable_uids: set[str]) -> np.ndarray:
    """Nodes keep only the pods that stay, as requests; their load is the forecast minus the movable pods'
    usage (the model adds back whatever stays or arrives). Returns which nodes stay in use whatever moves."""
    anchored = np.zeros(len(problem.nodes), dtype=bool)
    for ni, node in enumerate(problem.nodes):
        requested: dict[str, float] = {}
        for p in state.pods_on(node.name):
            if p.uid in movable_uids:
                continue
            for r, v in p.requests.items():
                requested[r] = requested.get(r, 0.0) + v
            anchored[ni] |= counts_for_emptiness(p)
        node.requested = requested
        node.has_pods = bool(anchored[ni])
        for r in LOAD_RESOURCES:
            load = node.load.get(r)
            if load is None or not math.isfinite(load.mean):
                continue  # no forecast: compile_problem takes the requests of the pods that stay
            out_mean = sum(wc.usage.mean.get(r, 0.0) * len(members[ci].get(ni, ())) for ci, wc in enumerate(classes))
            out_var = sum(wc.usage.std.get(r, 0.0) ** 2 * len(members[ci].get(ni, ())) for ci, wc in enumerate(classes))
            std = load.std if math.isfinite(load.std) else 0.0
            node.load[r] = NodeLoad(load.mean - out_mean, math.sqrt(max(std * std - out_var, 0.0)))
    return anchored


def _align_budgets(comp: Compiled, x: np.ndarray, over_rn: np.ndarray, u_star: float, eps: float) -> None:
    """Make the linear bound agree with the exact (Beta) rule on the current placement: a node the exact
    rule finds over its bound is over in the model too (by at least its excess), one it accepts is not."""
    load = np.einsum("rcn,cn->rn", comp.a, x)
    _, _, mean, var = evaluate(comp, x, u_star)
    for ri in range(2):
        scale = SCALE.get(LOAD_RESOURCES[ri], 1.0)
        for ni in range(comp.n_nodes):
            if over_rn[ri, ni]:
                sigma = math.sqrt(max(var[ri, ni], 0.0)) / comp.cap[ri, ni]
                excess = max(mean[ri, ni] - beta_max_mean(sigma, u_star, eps) * comp.cap[ri, ni], 0.0)
                need = int(load[ri, ni]) - 1 - int(math.ceil(excess * scale))
                comp.budget[ri, ni] = min(int(comp.budget[ri, ni]), need)
            elif load[ri, ni] > comp.budget[ri, ni]:
                comp.budget[ri, ni] = int(load[ri, ni])
            comp.bound_const[ri, ni] = comp.bound_cap[ri, ni] - comp.budget[ri, ni]


def _rules_ok(problem: PlacementProblem) -> np.ndarray:
    ok = np.ones((len(problem.classes), len(problem.nodes)), dtype=bool)
    for ci, c in enumerate(problem.classes):
        if c.example is None:
            continue
        for ni, n in enumerate(problem.nodes):
            if n.info is not None and rule_violation(c.example, n.info):
                ok[ci, ni] = False
    return ok


def _solved(options: MigrationOptions, ctx: MigrationContext, over_rn: np.ndarray) -> MigrationContext:
    """_solve as the protected solver's child runs it: the context comes back with the result."""
    _solve(ctx, over_rn, options)
    return ctx


def _solve(ctx: MigrationContext, over_rn: np.ndarray, options: MigrationOptions) -> None:
    comp, x_cur, u_star, eps = ctx.comp, ctx.x_cur, ctx.problem.u_star, ctx.problem.eps
    rules = _rules_ok(ctx.problem)
    deadline = time.perf_counter() + options.time_limit_s
    allowed_over = over_rn.any(axis=0)
    risk_before, _, _, _ = evaluate(comp, x_cur, u_star)
    for round_ in range(options.repair_rounds + 1):
        x, status, obj, bound = _solve_once(ctx, rules, over_rn, options, max(deadline - time.perf_counter(), 1.0))
        ctx.status, ctx.objective, ctx.bound = status, obj, bound
        if x is None:
            ctx.notes.append(f"CP-SAT found no re-optimisation ({status}); nothing moves")
            ctx.x_new = x_cur.copy()
            return
        ctx.x_new = x
        risk, _, mean, var = evaluate(comp, x, u_star)
        bad = _exact_violations(risk, risk_before, allowed_over, x, x_cur, eps, comp.cap)
        if not bad.any():
            break
        if round_ == options.repair_rounds or time.perf_counter() > deadline:
            undone = _undo_into(ctx, bad, risk_before, allowed_over)
            ctx.notes.append(f"{undone} moves undone: their targets would break the exact (Beta) safe rule")
            break
        load_cur = np.einsum("rcn,cn->rn", comp.a, x_cur)
        load_new = np.einsum("rcn,cn->rn", comp.a, x)
        for ri, ni in zip(*np.nonzero(bad), strict=True):
            # The node may hold what the model put there minus the mean load the exact rule finds too much.
            sigma = math.sqrt(max(var[ri, ni], 0.0)) / comp.cap[ri, ni]
            excess = mean[ri, ni] - beta_max_mean(sigma, u_star, eps) * comp.cap[ri, ni]
            tighter = int(load_new[ri, ni]) - int(math.ceil(max(excess, 0.0) * SCALE.get(LOAD_RESOURCES[ri], 1.0))) - 1
            tighter = min(tighter, int(comp.budget[ri, ni]))
            # Never below what the node holds now: staying put must remain feasible.
            floor = int(load_cur[ri, ni]) if not over_rn[ri, ni] else tighter
            comp.budget[ri, ni] = max(tighter, floor)
        log.info("repair round %d: %d node-resources over the exact bound; re-solving", round_ + 1, int(bad.sum()))


def _exact_violations(risk: np.ndarray, risk_before: np.ndarray, allowed_over: np.ndarray, x: np.ndarray,
                      x_cur: np.ndarray, eps: float, cap: np.ndarray) -> np.ndarray:
    """(2, N): node-resources that gained pods and now break the exact rule where they did not (or got
    riskier where they already did)."""
    gained = (x > x_cur).any(axis=0)[None, :]
    worse = np.where(allowed_over[None, :], risk > risk_before + 1e-9, risk > eps + 1e-9)
    return worse & gained & (cap > 0)


def _undo_into(ctx: MigrationContext, bad: np.ndarray, risk_before: np.ndarray, allowed_over: np.ndarray) -> int:
    """Last resort: send pods back from nodes the exact rule rejects, one at a time."""
    comp, x, x_cur, u_star, eps = ctx.comp, ctx.x_new, ctx.x_cur, ctx.problem.u_star, ctx.problem.eps
    undone = 0
    for _ in range(int(x_cur.sum()) + 1):
        risk, _, _, _ = evaluate(comp, x, u_star)
        bad = _exact_violations(risk, risk_before, allowed_over, x, x_cur, eps, comp.cap).any(axis=0)
        if not bad.any():
            break
        ni = int(np.nonzero(bad)[0][0])
        ci = int(np.nonzero(x[:, ni] > x_cur[:, ni])[0][0])
        src = int(np.nonzero(x[ci] < x_cur[ci])[0][0])
        x[ci, ni] -= 1
        x[ci, src] += 1
        undone += 1
    return undone


def _policy_unit(policy: str) -> int:
    return 1000 if policy == "load-balance" else 100


def _solve_once(ctx: MigrationContext, rules: np.ndarray, over_rn: np.ndarray, options: MigrationOptions,
                time_limit_s: float) -> tuple[np.ndarray | None, str, float, float]:
    """One CP-SAT model, its rows in the order the module docstring lists them: variables (the shared
    builder, optimizer.plan.cpsat), moves and limits, fit and safe rows, policy term, objective, hint."""
    comp, x_cur = ctx.comp, ctx.x_cur
    policy = "binpack" if options.policy == "a-binpack" else options.policy  # a-binpack: nodes in use, see below
    cap_fit = np.maximum(comp.free, np.einsum("cr,cn->nr", comp.req, x_cur))
    ub, lb = _count_bounds(ctx, rules, over_rn, options, cap_fit)
    pm = PlacementModel(comp, ub, lb)
    for ci in range(comp.n_classes):
        pm.model.add(sum(pm.by_class[ci]) == int(comp.counts[ci]))
    moved = _move_rows(ctx, pm, lb, options.limits)
    over_vars, excess_terms, e_max_total, hint = _fit_and_safe_rows(ctx, pm, over_rn, cap_fit)
    unit = _policy_unit(policy)
    policy_terms, p_max = _policy_terms(ctx, pm, policy, unit, ub, hint)

    all_moved = list(moved.values())
    lim = options.limits
    move_cost = int(round(options.move_cost * unit)) if policy != "none" else 1
    move_cost = max(move_cost, 1)
    m_max = int(x_cur.sum()) if lim.max_moves is None else min(int(x_cur.sum()), lim.max_moves)
    w_excess = p_max + move_cost * m_max + 1
    w_over = w_excess * (e_max_total + 1)
    objective = (w_over * sum(over_vars) + w_excess * sum(excess_terms)
                 + cp_model.LinearExpr.weighted_sum([v for v, _ in policy_terms], [w for _, w in policy_terms])
                 + move_cost * sum(all_moved))

    # Hint: nothing moves (always feasible).
    for (ci, ni), v in pm.x.items():
        pm.model.add_hint(v, int(x_cur[ci, ni]))
    for m in all_moved:
        pm.model.add_hint(m, 0)
    for v, val in hint:
        pm.model.add_hint(v, val)

    # No relative gap: the objective's weights are lexicographic, a 1 % gap could hide every policy gain.
    solver, name = pm.solve(objective, time_limit_s, options.workers, options.seed, 0.0)
    if name not in ("OPTIMAL", "FEASIBLE"):
        return None, name, math.nan, math.nan
    return pm.values(solver), name, solver.objective_value, solver.best_objective_bound


def _count_bounds(ctx: MigrationContext, rules: np.ndarray, over_rn: np.ndarray, options: MigrationOptions,
                  cap_fit: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Bounds of x[c, n]: at most what fits the node's room (at least what is there: a pod may always stay
    where it is), on nodes the rules allow; at least what the neighbourhood keeps (large models)."""
    comp, x_cur = ctx.comp, ctx.x_cur
    with np.errstate(divide="ignore"):
        per_r = np.where(comp.req[:, None, :] > 0, cap_fit[None, :, :] // np.maximum(comp.req[:, None, :], 1),
                         np.iinfo(np.int64).max)
    ub = np.minimum(per_r.min(axis=2), comp.counts[:, None])
    ub = np.where(rules, np.maximum(ub, x_cur), x_cur)
    lb = _neighbourhood(ctx, over_rn.any(axis=0), options)
    if lb is not None:
        ub = np.where((lb == x_cur).all(axis=1)[:, None], x_cur, ub)  # a class with no pod free to leave stays put
    return ub, lb


def _move_rows(ctx: MigrationContext, pm: PlacementModel, lb: np.ndarray | None, lim: MoveLimits) -> dict[tuple[int, int], Any]:
    """moved[c, n] >= x_cur[c, n] - x[c, n] where pods may leave, and the eviction limits on them."""
    x_cur, model = ctx.x_cur, pm.model
    moved: dict[tuple[int, int], Any] = {}
    for ci, ni in zip(*np.nonzero(x_cur if lb is None else x_cur - lb), strict=True):
        m = model.new_int_var(0, int(x_cur[ci, ni]), f"m{ci}_{ni}")
        model.add(m >= int(x_cur[ci, ni]) - pm.x[(ci, ni)])
        moved[(ci, ni)] = m
    if lim.max_moves is not None:
        model.add(sum(moved.values()) <= lim.max_moves)
    if lim.max_per_node is not None:
        for ni in range(ctx.comp.n_nodes):
            out = [m for (c, n), m in moved.items() if n == ni]
            if len(out) and int(x_cur[:, ni].sum()) > lim.max_per_node:
                model.add(sum(out) <= lim.max_per_node)
    if lim.max_per_namespace is not None:
        for ns in set(ctx.namespaces):
            out = [m for (c, n), m in moved.items() if ctx.namespaces[c] == ns]
            if sum(int(x_cur[c, n]) for (c, n) in moved if ctx.namespaces[c] == ns) > lim.max_per_namespace:
                model.add(sum(out) <= lim.max_per_namespace)
    for budget in lim.budgets:
        under = [m for (c, n), m in moved.items() if any(p.uid in budget.pods for p in ctx.members[c].get(n, ()))]
        if under:
            model.add(sum(under) <= budget.allowed)
    return moved


def _fit_and_safe_rows(ctx: MigrationContext, pm: PlacementModel, over_rn: np.ndarray, cap_fit: np.ndarray,
                       ) -> tuple[list[Any], list[Any], int, list[tuple[Any, int]]]:
    """Fit per node; the safe bound, hard on node-resources under it now, soft over it: excess e within
    what it is now, o = 1 while over, ep = the excess per mille of the bound. Returns the o variables, the
    ep terms, their total range and the no-move values of the new variables (hint)."""
    comp, model = ctx.comp, pm.model
    over_vars: list[Any] = []
    excess_terms: list[Any] = []
    e_max_total = 0
    load_cur = np.einsum("rcn,cn->rn", comp.a, ctx.x_cur)
    hint: list[tuple[Any, int]] = []
    for ni in range(comp.n_nodes):
        if not pm.by_node[ni]:
            continue
        pm.add_fit(ni, cap_fit[ni])
        o = None
        for ri in range(2):
            expr = pm.safe_load(ni, ri)
            budget = int(comp.budget[ri, ni])
            if not over_rn[ri, ni]:
                model.add(expr <= budget)
                continue
            e_cur = max(int(load_cur[ri, ni]) - budget, 0)
            e = model.new_int_var(0, e_cur, f"e{ri}_{ni}")
            model.add(expr - e <= budget)
            if o is None:
                o = model.new_bool_var(f"o{ni}")
                over_vars.append(o)
                hint.append((o, 1))
            model.add(e <= e_cur * o)
            cap_i = max(int(comp.bound_cap[ri, ni]), 1)
            ep_max = -(-T_MAX * e_cur // cap_i)
            ep = model.new_int_var(0, ep_max, f"ep{ri}_{ni}")
            model.add(T_MAX * e <= cap_i * ep)
            excess_terms.append(ep)
            e_max_total += ep_max
            hint += [(e, e_cur), (ep, ep_max)]
    return over_vars, excess_terms, e_max_total, hint


def _policy_terms(ctx: MigrationContext, pm: PlacementModel, policy: str, unit: int, ub: np.ndarray,
                  hint: list[tuple[Any, int]]) -> tuple[list[tuple[Any, int]], int]:
    """The policy's (variable, weight) terms and their maximum; appends the no-move values to ``hint``.
    binpack / consolidate / cost: y[n] = 1 while a node not anchored keeps pods, weighted per node;
    load-balance: sum_n |t_n - mean| of the load index t_n (per mille of the node's bound, max over cpu and
    memory), the mean taken from the current placement (moves keep the total); none: no term."""
    comp, model, by_node = ctx.comp, pm.model, pm.by_node
    terms: list[tuple[Any, int]] = []
    p_max = 0
    if policy in ("binpack", "consolidate", "cost"):
        weights = node_weights(comp, policy, unit)
        for ni in range(comp.n_nodes):
            if ctx.anchored[ni] or not by_node[ni]:
                continue
            y = model.new_bool_var(f"y{ni}")
            for ci, v in by_node[ni]:
                model.add(v <= int(ub[ci, ni]) * y)
            terms.append((y, int(weights[ni])))
            p_max += int(weights[ni])
            hint.append((y, int(ctx.x_cur[:, ni].any())))
    elif policy == "load-balance":
        index_now = load_index(comp, ctx.x_cur).max(axis=0)
        t_vars = []
        for ni in range(comp.n_nodes):
            if not by_node[ni]:
                continue
            t_n = model.new_int_var(0, T_CEIL, f"t{ni}")
            pm.add_index_bound(ni, t_n)
            t_vars.append((ni, t_n))
        mean_t = int(np.mean([index_now[ni] for ni, _ in t_vars])) if t_vars else 0
        for d in pm.abs_deviations([t for _, t in t_vars], mean_t, T_CEIL, "d"):
            terms.append((d, 1))
            p_max += T_CEIL
    return terms, p_max


# A large model (classes x nodes above ``full_model_limit``) does not get past CP-SAT's presolve within a
# re-optimisation's time limit (a few hundred classes on ~90 nodes returned only the no-move hint). With a
# move budget of M pods, a node can be emptied only if it holds at most M movable pods, and risk moves
# start on nodes over their bound: only those nodes give pods up (every other count may only grow), so
# only the classes on them have free variables. Chains (a pod moved off a full node to make room for
# another) are out of reach of this neighbourhood; the full model, on smaller problems, sees them.
# Returns the lower bound of x (None: the full model).
def _neighbourhood(ctx: MigrationContext, over_any: np.ndarray, options: MigrationOptions) -> np.ndarray | None:
    comp, x_cur = ctx.comp, ctx.x_cur
    if comp.n_classes * comp.n_nodes <= options.full_model_limit:
        return None
    held = x_cur.sum(axis=0)
    sources = over_any & (held > 0)
    if options.limits.max_moves is None:
        sources |= held > 0
    elif options.policy != "none":
        sources |= (held > 0) & (held <= options.limits.max_moves) & ~ctx.anchored
    ctx.notes.append(f"large model ({comp.n_classes} classes x {comp.n_nodes} nodes): pods leave only the "
                     f"{int(sources.sum())} nodes over their bound or small enough to empty")
    return np.where(sources[None, :], 0, x_cur)


