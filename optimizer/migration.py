"""Re-optimisation of a running placement with a move budget (the descheduler's job, with kso's model).

Start from where the pods are. Every *movable* bound pod (the caller decides which: ``kso reoptimize``
excludes mirror, DaemonSet, critical, local-storage, single-replica and opted-out pods) becomes a
member of its workload class; everything else stays where it is, as node requests and node load.
CP-SAT then chooses the new count of each class on each node:

    x[c, n]      >= 0   pods of class c on node n after the moves;  sum_n x[c, n] = pods of c (all stay placed)
    moved[c, n]  >= x_cur[c, n] - x[c, n]                      evictions of class c from node n
    budget       sum moved <= max_moves;  per source node <= max_per_node;  per namespace <= max_per_namespace
    fit          sum_c req[c, r] x[c, n] <= max(free[n, r], what is there now)   (a node never has to shed
                 pods to fit: kubelet already admitted them)
    safe         the linearised chance constraint of optimizer.chance (sum_c a[c, n] x[c, n] <= budget[n]),
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
* The safe bound in the solver is the linear (tangent) form of optimizer.chance; every result is
  checked with the exact Beta rule afterwards, budgets are tightened and the model re-solved, and as a
  last resort moves into a node that the exact rule rejects are undone.
* Counts, not pods: which pod of a class leaves a node is a free choice (lowest priority, then name),
  and the replacement pod may land on any of the class's target slots; the moves table pairs them up.
* Evictions happen one by one and the replacements are scheduled later by kube-scheduler; a move
  whose target only has room after another eviction relies on the extender's plan slots and the
  scheduler's own fit check at that time. PodDisruptionBudgets are left to the Eviction API.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from ortools.sat.python import cp_model

from forecasting.types import NodeForecast
from kso.cluster import ClusterState
from kso.objects import PodInfo
from kso.placement import rule_violation
from kso.resources import CPU, MEMORY
from optimizer.chance import beta_max_mean
from optimizer.compiled import (
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
from optimizer.cpsat import PlacementModel
from optimizer.inputs import DEFAULT_COST_KEY, problem_from_state
from optimizer.plan import PlacementPlan, PlanClass, PlanNodeInfo
from optimizer.planner import ProtectedSolver, SolverDied
from optimizer.problem import LOAD_RESOURCES, NodeLoad, PlacementProblem, UsageModel, WorkloadClass, class_key, request_usage

log = logging.getLogger("kso.optimizer.migration")

MIGRATION_POLICIES = (*POLICIES, "none")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
RISK, POLICY = "risk", "policy"


@dataclass(slots=True)
class MoveLimits:
    """Eviction limits; None = no limit."""

    max_moves: int | None = None
    max_per_node: int | None = None  # evictions from one node
    max_per_namespace: int | None = None

    def describe(self) -> str:
        def v(x: int | None) -> str:
            return "-" if x is None else str(x)

        return f"total {v(self.max_moves)}, per node {v(self.max_per_node)}, per namespace {v(self.max_per_namespace)}"


@dataclass(slots=True)
class MigrationOptions:
    policy: str = "binpack"  # optimizer.model.POLICIES or "none" (risk moves only)
    move_cost: float = 0.2  # cost of one eviction, as a share of the policy's unit (one node)
    limits: MoveLimits = field(default_factory=MoveLimits)
    time_limit_s: float = 30.0
    workers: int = 2
    seed: int = 0
    repair_rounds: int = 3
    # above this many class x node pairs only a neighbourhood moves (see _neighbourhood)
    full_model_limit: int = 20_000


@dataclass(slots=True)
class Move:
    pod: str
    namespace: str
    uid: str
    from_node: str
    to_node: str
    reason: str  # "risk" (the source node is over its safe bound) | "policy"
    class_key: str
    priority: int = 0


@dataclass(slots=True)
class NodeOutcome:
    name: str
    pods_before: int
    pods_after: int
    mean_before: dict[str, float]  # forecast mean load / allocatable, per LOAD_RESOURCES
    mean_after: dict[str, float]
    risk_before: float  # max over resources of P(util > U*), exact rule
    risk_after: float
    over_before: bool
    over_after: bool
    in_use_before: bool
    in_use_after: bool
    moved_out: int = 0
    moved_in: int = 0


@dataclass
class MigrationResult:
    moves: list[Move]
    nodes: list[NodeOutcome]
    plan: PlacementPlan  # target slots of every move
    status: str
    objective: float
    bound: float
    wall_s: float
    candidates: int  # movable pods the model could move
    policy: str
    u_star: float
    eps: float
    notes: list[str] = field(default_factory=list)
    _ctx: Any = field(default=None, repr=False)

    @property
    def over_before(self) -> list[str]:
        return [n.name for n in self.nodes if n.over_before]

    @property
    def over_after(self) -> list[str]:
        return [n.name for n in self.nodes if n.over_after]

    def nodes_in_use(self) -> tuple[int, int]:
        return sum(n.in_use_before for n in self.nodes), sum(n.in_use_after for n in self.nodes)

    def plan_for(self, moves: list[Move], now: float | None = None) -> PlacementPlan:
        """The target plan of a subset of the moves (e.g. the evictions that succeeded)."""
        return _target_plan(self._ctx, moves, now)


def counts_for_emptiness(pod: PodInfo) -> bool:
    """Does this pod keep its node "in use"? DaemonSet and mirror (static) pods do not."""
    return pod.owner_kind != "DaemonSet" and MIRROR_ANNOTATION not in pod.annotations


@dataclass
class _Context:
    problem: PlacementProblem
    comp: Compiled
    plan_keys: list[str]  # per internal class: the class key the extender computes for its pods
    namespaces: list[str]
    members: list[dict[int, list[PodInfo]]]  # per class: node index -> movable pods there
    x_cur: np.ndarray
    x_new: np.ndarray
    anchored: np.ndarray
    risk_after: np.ndarray
    headroom_after: np.ndarray
    policy: str
    status: str
    objective: float
    bound: float
    wall_s: float
    notes: list[str]


# Long on purpose: the problem as the module docstring states it (classes per namespace, nodes keeping
# the pods that stay), then the solve and its outcome, in one readable pass.
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
    movable_uids = set()
    by_class: dict[tuple[str, str], list[PodInfo]] = defaultdict(list)
    outside = 0
    for pod in movable:
        if not pod.node_name or pod.terminal or pod.uid in movable_uids:
            continue
        if pod.node_name not in index:
            outside += 1
            continue
        movable_uids.add(pod.uid)
        by_class[(class_key(pod), pod.namespace)].append(pod)
    if outside:
        notes.append(f"{outside} movable pods are on nodes that are not ready or unknown; left alone")

    # Classes: one per (class key, namespace), so the per-namespace limit is exact even for ownerless
    # "shape@" classes; the plan merges them back under the key the extender computes.
    classes: list[WorkloadClass] = []
    plan_keys: list[str] = []
    namespaces: list[str] = []
    members: list[dict[int, list[PodInfo]]] = []
    class_usage = class_usage or {}
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

    # Nodes: only the pods that stay count as requests; their load is the forecast minus the movable
    # pods' usage (the model adds back whatever stays or arrives).
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
    problem.classes = classes
    comp = compile_problem(problem)
    x_cur = np.zeros((comp.n_classes, comp.n_nodes), dtype=np.int64)
    for ci, where in enumerate(members):
        for ni, pods in where.items():
            x_cur[ci, ni] = len(pods)

    ctx = _Context(problem, comp, plan_keys, namespaces, members, x_cur, x_cur.copy(), anchored,
                   np.zeros((2, comp.n_nodes)), np.zeros((2, comp.n_nodes)), options.policy, "NO_MOVES", 0.0, 0.0,
                   0.0, notes)
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
    ctx.risk_after, ctx.headroom_after, mean_after, _ = evaluate(comp, ctx.x_new, u_star)
    unfixable = [comp.node_names[ni] for ni in np.nonzero(over_rn.any(axis=0))[0]
                 if not x_cur[:, ni].any()]
    if unfixable:
        notes.append(f"over their safe bound with no movable pod: {', '.join(unfixable[:10])}"
                     + (f" (+{len(unfixable) - 10})" if len(unfixable) > 10 else ""))
    ctx.wall_s = time.perf_counter() - t0
    moves = _moves(ctx, over_rn.any(axis=0))
    outcomes = _outcomes(ctx, state, risk_before, mean_before, mean_after, over_rn.any(axis=0), moves)
    result = MigrationResult(moves, outcomes, PlacementPlan("", 0, "binpack", "", 0, 0, 0, u_star, eps, 0, {}, {}, {}),
                             ctx.status, ctx.objective, ctx.bound, ctx.wall_s, int(x_cur.sum()), options.policy, u_star,
                             eps, notes, ctx)
    result.plan = result.plan_for(moves)
    return result


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


def _solved(options: MigrationOptions, ctx: _Context, over_rn: np.ndarray) -> _Context:
    """_solve as the protected solver's child runs it: the context comes back with the result."""
    _solve(ctx, over_rn, options)
    return ctx


def _solve(ctx: _Context, over_rn: np.ndarray, options: MigrationOptions) -> None:
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


def _undo_into(ctx: _Context, bad: np.ndarray, risk_before: np.ndarray, allowed_over: np.ndarray) -> int:
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


# Long on purpose: one CP-SAT model whose rows read top to bottom in the order the module docstring lists
# them (variables, moves and limits, fit and safe rows, policy term, objective, hint).
def _solve_once(ctx: _Context, rules: np.ndarray, over_rn: np.ndarray, options: MigrationOptions,
                time_limit_s: float) -> tuple[np.ndarray | None, str, float, float]:
    comp, x_cur = ctx.comp, ctx.x_cur
    n_c, n_n = comp.n_classes, comp.n_nodes
    policy = "binpack" if options.policy == "a-binpack" else options.policy  # a-binpack: nodes in use, see below
    held = np.einsum("cr,cn->nr", comp.req, x_cur)
    cap_fit = np.maximum(comp.free, held)
    with np.errstate(divide="ignore"):
        per_r = np.where(comp.req[:, None, :] > 0, cap_fit[None, :, :] // np.maximum(comp.req[:, None, :], 1),
                         np.iinfo(np.int64).max)
    ub = np.minimum(per_r.min(axis=2), comp.counts[:, None])
    ub = np.where(rules, np.maximum(ub, x_cur), x_cur)  # a pod may always stay where it is
    lb = _neighbourhood(ctx, over_rn.any(axis=0), options)
    if lb is not None:
        ub = np.where((lb == x_cur).all(axis=1)[:, None], x_cur, ub)  # a class with no pod free to leave stays put

    pm = PlacementModel(comp, ub, lb)
    model, xs, by_node = pm.model, pm.x, pm.by_node
    for ci in range(n_c):
        model.add(sum(pm.by_class[ci]) == int(comp.counts[ci]))

    moved: dict[tuple[int, int], Any] = {}
    for ci, ni in zip(*np.nonzero(x_cur if lb is None else x_cur - lb), strict=True):
        m = model.new_int_var(0, int(x_cur[ci, ni]), f"m{ci}_{ni}")
        model.add(m >= int(x_cur[ci, ni]) - xs[(ci, ni)])
        moved[(ci, ni)] = m
    all_moved = list(moved.values())
    lim = options.limits
    if lim.max_moves is not None:
        model.add(sum(all_moved) <= lim.max_moves)
    if lim.max_per_node is not None:
        for ni in range(n_n):
            out = [m for (c, n), m in moved.items() if n == ni]
            if len(out) and int(x_cur[:, ni].sum()) > lim.max_per_node:
                model.add(sum(out) <= lim.max_per_node)
    if lim.max_per_namespace is not None:
        for ns in set(ctx.namespaces):
            out = [m for (c, n), m in moved.items() if ctx.namespaces[c] == ns]
            if sum(int(x_cur[c, n]) for (c, n) in moved if ctx.namespaces[c] == ns) > lim.max_per_namespace:
                model.add(sum(out) <= lim.max_per_namespace)

    # Fit and the safe bound, per node.
    over_vars: list[Any] = []
    excess_terms: list[Any] = []
    e_max_total = 0
    load_cur = np.einsum("rcn,cn->rn", comp.a, x_cur)
    hint_e: list[tuple[Any, int]] = []
    for ni in range(n_n):
        terms = by_node[ni]
        if not terms:
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
                hint_e.append((o, 1))
            model.add(e <= e_cur * o)
            cap_i = max(int(comp.bound_cap[ri, ni]), 1)
            ep_max = -(-T_MAX * e_cur // cap_i)
            ep = model.new_int_var(0, ep_max, f"ep{ri}_{ni}")
            model.add(T_MAX * e <= cap_i * ep)
            excess_terms.append(ep)
            e_max_total += ep_max
            hint_e += [(e, e_cur), (ep, ep_max)]

    # Policy term.
    unit = _policy_unit(policy)
    policy_terms: list[tuple[Any, int]] = []
    p_max = 0
    hint_y: list[tuple[Any, int]] = []
    if policy in ("binpack", "consolidate", "cost"):
        weights = node_weights(comp, policy, unit)
        for ni in range(n_n):
            if ctx.anchored[ni] or not by_node[ni]:
                continue
            y = model.new_bool_var(f"y{ni}")
            for ci, v in by_node[ni]:
                model.add(v <= int(ub[ci, ni]) * y)
            policy_terms.append((y, int(weights[ni])))
            p_max += int(weights[ni])
            hint_y.append((y, int(x_cur[:, ni].any())))
    elif policy == "load-balance":
        # Spread: sum_n |t_n - mean| of the load index t_n (per mille of the node's bound, max over
        # cpu and memory), the mean taken from the current placement (moves keep the total).
        index_now = load_index(comp, x_cur).max(axis=0)
        t_vars = []
        for ni in range(n_n):
            if not by_node[ni]:
                continue
            t_n = model.new_int_var(0, T_CEIL, f"t{ni}")
            pm.add_index_bound(ni, t_n)
            t_vars.append((ni, t_n))
        mean_t = int(np.mean([index_now[ni] for ni, _ in t_vars])) if t_vars else 0
        for d in pm.abs_deviations([t for _, t in t_vars], mean_t, T_CEIL, "d"):
            policy_terms.append((d, 1))
            p_max += T_CEIL
    # "none": no policy term, only risk moves.

    move_cost = int(round(options.move_cost * unit)) if policy != "none" else 1
    move_cost = max(move_cost, 1)
    m_max = int(x_cur.sum()) if lim.max_moves is None else min(int(x_cur.sum()), lim.max_moves)
    w_excess = p_max + move_cost * m_max + 1
    w_over = w_excess * (e_max_total + 1)
    objective = (w_over * sum(over_vars) + w_excess * sum(excess_terms)
                 + cp_model.LinearExpr.weighted_sum([v for v, _ in policy_terms], [w for _, w in policy_terms])
                 + move_cost * sum(all_moved))

    # Hint: nothing moves (always feasible).
    for (ci, ni), v in xs.items():
        model.add_hint(v, int(x_cur[ci, ni]))
    for m in all_moved:
        model.add_hint(m, 0)
    for v, val in hint_e + hint_y:
        model.add_hint(v, val)

    # No relative gap: the objective's weights are lexicographic, a 1 % gap could hide every policy gain.
    solver, name = pm.solve(objective, time_limit_s, options.workers, options.seed, 0.0)
    if name not in ("OPTIMAL", "FEASIBLE"):
        return None, name, math.nan, math.nan
    return pm.values(solver), name, solver.objective_value, solver.best_objective_bound


# A large model (classes x nodes above ``full_model_limit``) does not get past CP-SAT's presolve within a
# re-optimisation's time limit (measured: 337 classes x 89 nodes, 5 s: only the no-move hint). With a
# move budget of M pods, a node can be emptied only if it holds at most M movable pods, and risk moves
# start on nodes over their bound: only those nodes give pods up (every other count may only grow), so
# only the classes on them have free variables. Chains (a pod moved off a full node to make room for
# another) are out of reach of this neighbourhood; the full model, on smaller problems, sees them.
# Returns the lower bound of x (None: the full model).
def _neighbourhood(ctx: _Context, over_any: np.ndarray, options: MigrationOptions) -> np.ndarray | None:
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


def _moves(ctx: _Context, over_before: np.ndarray) -> list[Move]:
    comp, x, x_cur = ctx.comp, ctx.x_new, ctx.x_cur
    moves: list[Move] = []
    for ci in range(comp.n_classes):
        leave = x_cur[ci] - x[ci]
        evicted: list[tuple[PodInfo, int]] = []
        for ni in np.nonzero(leave > 0)[0]:
            # Risk sources first; within a node the lowest priority, then by name.
            evicted += [(p, int(ni)) for p in ctx.members[ci][int(ni)][: int(leave[ni])]]
        evicted.sort(key=lambda pn: (not over_before[pn[1]], pn[0].priority, pn[0].name))
        targets = [int(ni) for ni in np.nonzero(leave < 0)[0] for _ in range(int(-leave[ni]))]
        for (pod, src), dst in zip(evicted, targets, strict=True):
            moves.append(Move(pod.name, pod.namespace, pod.uid, comp.node_names[src], comp.node_names[dst],
                              RISK if over_before[src] else POLICY, ctx.plan_keys[ci], pod.priority))
    moves.sort(key=lambda m: (m.reason != RISK, m.from_node, m.namespace, m.pod))
    return moves


def _outcomes(ctx: _Context, state: ClusterState, risk_before: np.ndarray, mean_before: np.ndarray,
              mean_after: np.ndarray, over_before: np.ndarray, moves: list[Move]) -> list[NodeOutcome]:
    comp, eps = ctx.comp, ctx.problem.eps
    out_n: dict[str, int] = defaultdict(int)
    in_n: dict[str, int] = defaultdict(int)
    for m in moves:
        out_n[m.from_node] += 1
        in_n[m.to_node] += 1
    rows = []
    for ni, name in enumerate(comp.node_names):
        pods = len(state.pods_on(name))
        with np.errstate(divide="ignore", invalid="ignore"):
            before = {r: float(max(mean_before[ri, ni], 0.0) / comp.cap[ri, ni]) if comp.cap[ri, ni] > 0 else math.nan
                      for ri, r in enumerate(LOAD_RESOURCES)}
            after = {r: float(max(mean_after[ri, ni], 0.0) / comp.cap[ri, ni]) if comp.cap[ri, ni] > 0 else math.nan
                     for ri, r in enumerate(LOAD_RESOURCES)}
        r_before = float(risk_before[:, ni].max())
        r_after = float(ctx.risk_after[:, ni].max())
        rows.append(NodeOutcome(
            name, pods, pods - out_n[name] + in_n[name], before, after, r_before, r_after,
            bool(over_before[ni]), bool(((ctx.risk_after[:, ni] > eps + 1e-9) & (comp.cap[:, ni] > 0)).any()),
            bool(ctx.anchored[ni] or ctx.x_cur[:, ni].any()), bool(ctx.anchored[ni] or ctx.x_new[:, ni].any()),
            out_n[name], in_n[name]))
    return rows


def _target_plan(ctx: _Context, moves: list[Move], now: float | None = None) -> PlacementPlan:
    """A PlacementPlan whose slots are the moves' targets: the extender sends each replacement pod of a
    class to a node with a free slot, and the pods bound now (the baseline) take none."""
    now = time.time() if now is None else now
    comp, problem = ctx.comp, ctx.problem
    requests = {ctx.plan_keys[ci]: dict(c.requests) for ci, c in enumerate(problem.classes)}
    classes: dict[str, PlanClass] = {}
    for m in moves:
        pc = classes.setdefault(m.class_key, PlanClass(requests.get(m.class_key, {}), 0, 0, {}))
        pc.count += 1
        pc.slots[m.to_node] = pc.slots.get(m.to_node, 0) + 1
    nodes = {}
    for ni, name in enumerate(comp.node_names):
        nodes[name] = PlanNodeInfo({CPU: float(ctx.headroom_after[0, ni]), MEMORY: float(ctx.headroom_after[1, ni])},
                                   {CPU: float(ctx.risk_after[0, ni]), MEMORY: float(ctx.risk_after[1, ni])},
                                   bool(ctx.anchored[ni] or ctx.x_new[:, ni].any()))
    body = orjson.dumps({k: c.slots for k, c in classes.items()}, option=orjson.OPT_SORT_KEYS)
    plan_id = hashlib.sha1(body + str(now).encode()).hexdigest()[:12]
    policy = ctx.policy if ctx.policy in POLICIES else "binpack"
    notes = [f"kso reoptimize: target slots of {len(moves)} evicted pods", *ctx.notes]
    if ctx.policy not in POLICIES:
        notes.append(f"policy {ctx.policy}: risk moves only (recorded as {policy})")
    return PlacementPlan(plan_id, now, policy, ctx.status, ctx.objective, ctx.bound, math.nan, problem.u_star,
                         problem.eps, ctx.wall_s, dict(problem.input_ages), classes, nodes,
                         list(problem.baseline_pods), notes)
