"""The placement model: integer counts of each workload class on each node, solved with OR-Tools CP-SAT.

    x[c, n] >= 0           pods of class c planned on node n (only where c may go on n at all)
    u[c]    >= 0           pods of class c left unplaced;  sum_n x[c, n] + u[c] = count[c]
    y[n]    in {0, 1}      node n in use (fixed to 1 when it already hosts pods)
    fit     sum_c req[c, r] x[c, n] <= free[n, r] * y[n]     every resource r (cpu, memory, pods, extended)
    safe    sum_c a[c, n, r] x[c, n] <= budget[n, r] * y[n] r in (cpu, memory): the linearised chance
                                                            constraint of optimizer.plan.chance
    T       >= 1000 * load_after[n, r] / (U* cap[n, r])     the worst node's load against its bound
Objective (minimise), lexicographic through weights, policy first, then overload risk (T):
    binpack       nodes in use
    consolidate   capacity of the nodes in use (opens small nodes last, keeps busy ones)
    cost          sum of node cost over nodes in use
    load-balance  T over the nodes given pods, then sum_n max(t[n] - target, 0) (the load above perfect
                  balance, optimizer.plan.compiled.balance_spread): plan_score's own order
    a-binpack     |dispersion of node cpu request share - demand dispersion| (ICAC'19 adaptive binpack,
                  L1 form), then nodes in use
and always, above everything: unplaced pods.
CP-SAT gets its start as a complete solution (cut to what the model allows), so it only returns better
ones. Search never returns a plan worse than first-fit-decreasing's (held to the exact rule like every plan), and
a repair re-solve or a neighbourhood step is kept only when it is no worse (optimizer.plan.exact.plan_score).
The compiled arrays are optimizer.plan.compiled's; the CP-SAT rows are optimizer.plan.cpsat's.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from optimizer.plan.compiled import (
    POLICIES,
    SCALE,
    T_CEIL,
    T_MAX,
    Compiled,
    SolveResult,
    SolverOptions,
    a_binpack_shape,
    balance_target,
    compile_problem,
    evaluate,
    load_index,
    merge_identical_classes,
    node_weights,
    split_merged,
)
from optimizer.plan.cpsat import PlacementModel
from optimizer.plan.exact import hold_to_exact, over_bound, plan_score, tighten_budgets
from optimizer.plan.heuristics import (
    close_nodes,
    first_fit_decreasing,
    least_loaded_decreasing,
    lp_bound_nodes,
    lp_rounded,
)
from optimizer.plan.problem import PlacementProblem

# The types and the compiler live in optimizer.plan.compiled; they are named here too because this is where
# callers solve.
__all__ = ["POLICIES", "SCALE", "T_CEIL", "T_MAX", "Compiled", "SolveResult", "SolverOptions", "compile_problem",
           "evaluate", "finish", "solve"]

log = logging.getLogger("kso.optimizer")
LP_SHARE = 0.15  # of the time limit, for each LP relaxation a solve asks for (the rounded start, the plan's bound)
OK_STATUSES = ("OPTIMAL", "FEASIBLE")


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


def _held(comp: Compiled, x: np.ndarray, problem: PlacementProblem, policy: str) -> tuple[np.ndarray, np.ndarray]:
    """A copy of placement x held to the exact rule (stripped, then pods re-placed where they fit safely)."""
    x = x.astype(np.int64).copy()
    unplaced = comp.counts - x.sum(axis=1)
    hold_to_exact(comp, x, unplaced, problem.u_star, problem.eps, policy)
    return x, unplaced


def solve(problem: PlacementProblem, options: SolverOptions, comp: Compiled | None = None) -> SolveResult:
    """Solve; then hold every node to the exact Beta rule: nodes the linear form let through get a
    tightened budget and one more solve (small models), pods are taken off nodes still over it and put on
    others where they fit safely. The start (first-fit-decreasing, improved by closing nodes for the
    node-counting policies, or least-loaded for load-balance) held to the same rule, or FFD's if that is
    better, is the floor: a plan worse than it for the policy is replaced by it."""
    if options.policy not in POLICIES:
        raise ValueError(f"unknown policy {options.policy!r} (known: {', '.join(POLICIES)})")
    comp = comp or compile_problem(problem)
    # Large problems are solved with identical classes merged (a cluster's many owners of one shape); small
    # ones, which CP-SAT solves whole, and load-balance as they are (its least-loaded start follows the order
    # pods come in, and merged classes' order spread them worse on generated clusters).
    if comp.n_classes * comp.n_nodes > options.full_model_limit and options.policy != "load-balance":
        merged, group = merge_identical_classes(comp)
        if merged is not comp:
            return _solve_merged(problem, options, comp, merged, group)
    t0 = time.perf_counter()
    policy = options.policy
    ffd = first_fit_decreasing(comp)
    start = ffd.x
    floor_x, _ = _held(comp, start, problem, policy)
    # The LP relaxation (the rounded start, then the bound) gets a share of the limit: at 1,500 trace-shaped nodes
    # one costs 4-13 s of CPU, several times that in wall time on a busy machine, and the plan must keep its limit.
    lp_limit = max(1.0, options.time_limit_s * LP_SHARE)
    if policy in ("binpack", "consolidate", "cost"):
        start = _node_counting_start(comp, problem, policy, start, ffd.unplaced, lp_limit)
    elif policy == "load-balance":
        # FFD fills the busiest nodes to their bound; start from the least-loaded placement instead.
        start = least_loaded_decreasing(comp).x
    held_start, _ = _held(comp, start, problem, policy)
    if plan_score(comp, held_start, policy) <= plan_score(comp, floor_x, policy):
        floor_x = held_start  # the floor: the better of FFD and the start, both held to the exact rule
    else:
        start = floor_x
    start_s = time.perf_counter() - t0
    if policy in ("binpack", "consolidate", "cost") and _opens_nothing(comp, floor_x):
        result = _nothing_to_improve(comp, floor_x, policy, t0)
    elif comp.n_classes * comp.n_nodes > options.full_model_limit:
        result = _solve_lns(comp, options, problem, floor_x, t0)
    else:
        result = _solve_once(comp, options, problem.u_star, start if options.hint == "ffd" else None, t0)
        result = _repair(comp, options, problem, result, t0)
    search_s = time.perf_counter() - t0 - start_s
    result = finish(comp, problem, result, policy, floor_x, t0, options.lp_bound, lp_limit)
    result.notes.append(f"seconds: start {start_s:.1f} (heuristics held to the exact rule), search {search_s:.1f}, "
                        f"exact check and bound {result.wall_s - start_s - search_s:.1f}")
    return result


def _node_counting_start(comp: Compiled, problem: PlacementProblem, policy: str, ffd: np.ndarray,
                         ffd_unplaced: np.ndarray, lp_limit_s: float | None = None) -> np.ndarray:
    """The best (held to the exact rule) of first-fit-decreasing, first-fit-decreasing with the pods that may go
    on few nodes first (heuristics._pod_order) and the LP relaxation rounded (heuristics.lp_rounded: on large
    clusters of small pods the greedy fill is well off the bound), each with the nodes it opens closed where
    their pods fit elsewhere. The rounding is left out when the relaxation takes over ``lp_limit_s``."""
    weights = node_weights(comp, policy) if policy != "binpack" else None
    candidates = [ffd.copy(), first_fit_decreasing(comp, restricted_first=True).x]
    rounded = lp_rounded(comp, ffd_unplaced, None if weights is None else weights.astype(float), lp_limit_s)
    if rounded is not None:
        candidates.append(rounded.x)
    best, best_score = candidates[0], None
    for x in candidates:
        close_nodes(comp, x, weights)
        score = plan_score(comp, _held(comp, x, problem, policy)[0], policy)
        if best_score is None or score < best_score:
            best, best_score = x, score
    return best


def _solve_merged(problem: PlacementProblem, options: SolverOptions, comp: Compiled, merged: Compiled,
                  group: np.ndarray) -> SolveResult:
    """Solve with identical classes merged (compiled.merge_identical_classes), then split the plan back into
    the original classes: nodes' totals, so risk, headroom and violations, are the merged plan's."""
    result = solve(problem, options, merged)  # merged shares comp's node arrays: budgets tightened are comp's
    result.x = split_merged(result.x, group, comp.counts)
    result.unplaced = comp.counts - result.x.sum(axis=1)
    result.notes.append(f"{comp.n_classes} classes solved as {merged.n_classes} (classes with the same requests, "
                        "usage and eligible nodes merged)")
    return result


def _opens_nothing(comp: Compiled, x: np.ndarray) -> bool:
    """x places every pod that has a node it fits on alone, on nodes already in use: no plan places more pods
    or uses fewer nodes (those stay in use whatever it does)."""
    if ((x.sum(axis=0) > 0) & ~comp.has_pods).any():
        return False
    left = x.sum(axis=1) < comp.counts
    return not left.any() or not comp.ub()[left].any()


def _nothing_to_improve(comp: Compiled, x: np.ndarray, policy: str, t0: float) -> SolveResult:
    """The start as an optimal plan for a node-counting policy when it opens no node and leaves out only pods
    no node can take (pending pods on a busy cluster): nothing for a search to find."""
    unit = 1 if policy == "binpack" else 100
    used = (x.sum(axis=0) > 0) | comp.has_pods
    value = float(node_weights(comp, policy, unit=unit)[used].sum() / unit)
    return SolveResult(x.copy(), comp.counts - x.sum(axis=1), "OPTIMAL", value, value, 0.0, 0.0,
                       time.perf_counter() - t0, time.perf_counter() - t0, int(used.sum()), 0, 0,
                       comp.budget * 0.0, comp.budget * 0.0,  # risk and headroom: finish fills them in
                       ["the start places every pod that fits anywhere on nodes already in use: no plan places more or uses "
                        "fewer nodes, no search"])


def finish(comp: Compiled, problem: PlacementProblem, result: SolveResult, policy: str, floor_x: np.ndarray | None,
           t0: float, lp_bound: bool = True, lp_limit_s: float | None = None) -> SolveResult:
    """Hold ``result`` to the exact rule (in place), fall back to ``floor_x`` when it is still worse, and
    fill in risk, headroom, violations, nodes used and wall time."""
    removed, back = hold_to_exact(comp, result.x, result.unplaced, problem.u_star, problem.eps, policy)
    if removed:
        result.notes.append(f"{removed} pods taken off nodes the exact (Beta) rule rejects, {back} of them placed on "
                            "other nodes")
    elif back:
        result.notes.append(f"{back} pods the solver left out placed where they fit within the exact (Beta) rule")
    if floor_x is not None:
        result.start_score = plan_score(comp, floor_x, policy)
    if floor_x is not None and plan_score(comp, floor_x, policy) < plan_score(comp, result.x, policy):
        result.notes.append(f"the solver's plan ({result.status}) was worse for {policy} than its heuristic start "
                            "(first-fit-decreasing or its improvement, held to the same exact rule): the start "
                            "placement is used")
        result.x = floor_x.copy()
        result.unplaced = comp.counts - floor_x.sum(axis=1)
        result.objective = result.bound = result.gap = math.nan
        result.status = "FEASIBLE"  # a feasible plan, whatever CP-SAT ended with (e.g. UNKNOWN: out of time)
    if math.isnan(result.bound) and lp_bound:
        _lp_bound(comp, result, policy, lp_limit_s)
    result.risk, result.headroom, _, _ = evaluate(comp, result.x, problem.u_star)
    result.violations = int(over_bound(comp, result.x, problem.u_star, problem.eps).any(axis=0).sum())
    result.nodes_used = int(((result.x.sum(axis=0) > 0) | comp.has_pods).sum())
    result.wall_s = time.perf_counter() - t0
    return result


def _lp_bound(comp: Compiled, result: SolveResult, policy: str, time_limit_s: float | None = None) -> None:
    """Objective, bound and gap of a plan CP-SAT gave no bound for (decomposed, or first-fit's): the node
    measure of the node-counting policies against the LP relaxation for placing the same pods (cheap:
    identical nodes and classes merged). Load-balance and a-binpack have no such bound; the notes say so."""
    if policy not in ("binpack", "consolidate", "cost"):
        result.notes.append(f"no lower bound: the LP relaxation bounds node counts, not {policy}'s objective")
        return
    weights = node_weights(comp, policy, unit=1 if policy == "binpack" else 100) / (1 if policy == "binpack" else 100)
    lp = lp_bound_nodes(comp, result.unplaced, weights, time_limit_s)
    if not math.isfinite(lp):
        result.notes.append("no bound: the LP relaxation had no solution" + (
            f" within {time_limit_s:.1f} s" if time_limit_s is not None else ""))
        return
    used = (result.x.sum(axis=0) > 0) | comp.has_pods
    result.objective = float(weights[used].sum())
    result.bound = float(math.ceil(lp - 1e-6)) if policy == "binpack" else lp
    result.gap = (result.objective - result.bound) / result.objective if result.objective > 0 else 0.0
    result.notes.append(f"bound and gap: {'nodes in use' if policy == 'binpack' else 'weighted nodes in use'} against "
                        "the LP relaxation for placing the same pods (no CP-SAT bound for this plan)")


def _repair(comp: Compiled, options: SolverOptions, problem: PlacementProblem, result: SolveResult,
            t0: float) -> SolveResult:
    """Re-solve with tightened budgets while the plan breaks the exact rule; a re-solve is kept only when,
    held to the exact rule, it is no worse than the plan it repairs (one cut short by time may be)."""
    u_star, eps, policy = problem.u_star, problem.eps, options.policy
    for rounds in range(1, options.repair_rounds + 1):
        over = over_bound(comp, result.x, u_star, eps)
        if not over.any() or time.perf_counter() - t0 > options.time_limit_s:
            break
        tighten_budgets(comp, result.x, over, u_star, eps)
        log.info("repair round %d: %d node-resources over the exact bound; re-solving", rounds, int(over.sum()))
        again = _solve_once(comp, options, u_star, result.x, t0)
        if again.status not in OK_STATUSES:
            break
        before = plan_score(comp, _held(comp, result.x, problem, policy)[0], policy)
        after = plan_score(comp, _held(comp, again.x, problem, policy)[0], policy)
        if after > before:
            result.notes.append(f"repair re-solve {rounds} ({again.status}) was worse held to the exact rule "
                                f"({after[:2]} vs {before[:2]}): not used")
            break
        again.repair_rounds = rounds
        again.notes[:0] = result.notes
        result = again
    return result


def _neighbourhood(comp: Compiled, x: np.ndarray, k: int, rng: np.random.Generator, policy: str) -> np.ndarray:
    """The nodes one LNS step re-solves. Always the hottest nodes given pods (so the worst load can come
    down). Load-balance: the coolest nodes that can take pods. The node-counting policies: the emptiest
    nodes the plan opens (so they can be closed) and the nodes in use with the most room left (so they
    can take those pods). Then some at random and, if there is room, unused nodes."""
    open_ = comp.eligible.any(axis=0)
    given = x.sum(axis=0) > 0
    in_use = (given | comp.has_pods) & open_
    index = load_index(comp, x).max(axis=0)
    given_n = np.nonzero(given)[0]
    pick: list[int] = list(given_n[np.argsort(-index[given_n], kind="stable")][: max(k // 6, 1)])
    if policy == "load-balance":
        cand = np.nonzero(open_)[0]
        pick += list(cand[np.argsort(index[cand], kind="stable")][: k // 3])
    else:
        share = np.einsum("cr,cn->nr", comp.req, x)[:, :2] / np.maximum(comp.free[:, :2], 1)
        fill = share.max(axis=1)
        opened = np.nonzero(given & ~comp.has_pods)[0]
        pick += list(opened[np.argsort(fill[opened], kind="stable")][: k // 3])
        used = np.setdiff1d(np.nonzero(in_use)[0], pick)
        pick += list(used[np.argsort(fill[used], kind="stable")][: k // 4])
    rest = np.setdiff1d(np.nonzero(in_use)[0], pick)
    pick += list(rng.choice(rest, size=min(k // 6, len(rest)), replace=False)) if len(rest) else []
    unused = np.setdiff1d(np.nonzero(open_ & ~in_use)[0], pick)
    if len(unused) and len(set(pick)) < k:
        pick += list(rng.choice(unused, size=min(k - len(set(pick)), len(unused)), replace=False))
    return np.unique(np.array(pick, dtype=np.int64))


def _solve_lns(comp: Compiled, options: SolverOptions, problem: PlacementProblem, start: np.ndarray,
               t0: float) -> SolveResult:
    """Large-neighbourhood search from ``start``: free the pods of a few dozen nodes (see _neighbourhood)
    plus the unplaced ones, and let CP-SAT re-place them on those nodes, the previous placement as the
    hint. A step is kept only when the whole plan is no worse for the policy (plan_score)."""
    rng = np.random.default_rng(options.seed)
    x = start.copy()
    policy = options.policy
    score = plan_score(comp, x, policy)
    steps = improved = 0
    first = time.perf_counter() - t0
    progress: list[tuple[float, float, float]] = [(first, score[1], math.nan)]
    k = min(options.lns_nodes, comp.n_nodes)
    target = balance_target(comp)  # load-balance: the whole cluster's balanced index, not a neighbourhood's
    # The time limit covers the whole solve: keep room for what follows the search (the exact check and
    # the LP bound cost about what the start did, at most a sixth of the limit: a slow start, closing nodes
    # on a large cluster, costs more than they do), and plan each step at its measured wall time (model
    # building included; on a busy machine that is well over lns_step_s).
    reserve = max(2.0, min(2.0 * first, options.time_limit_s / 6))
    step_wall = options.lns_step_s
    while time.perf_counter() - t0 + step_wall + reserve < options.time_limit_s:
        step_start = time.perf_counter()
        nodes = _neighbourhood(comp, x, k, rng, policy)
        if len(nodes) == 0:
            break
        unplaced = comp.counts - x.sum(axis=1)
        sub = comp.subset(nodes, x[:, nodes].sum(axis=1) + unplaced)
        sub_opts = SolverOptions(policy, options.lns_step_s, options.workers, 0.0, 0, options.seed + steps, "none")
        res = _solve_once(sub, sub_opts, problem.u_star, x[:, nodes], time.perf_counter(),
                          _a_binpack_rest(comp, x, nodes) if policy == "a-binpack" else None, target)
        steps += 1
        if res.status in OK_STATUSES:
            trial = x.copy()
            trial[:, nodes] = res.x
            new = plan_score(comp, trial, policy)
            if new <= score:
                improved += new < score
                x, score = trial, new
        progress.append((time.perf_counter() - t0, score[1], math.nan))
        step_wall = max(step_wall, time.perf_counter() - step_start)
    risk, headroom, _, _ = evaluate(comp, x, problem.u_star)
    used_n = int(((x.sum(axis=0) > 0) | comp.has_pods).sum())
    return SolveResult(x, comp.counts - x.sum(axis=1), "FEASIBLE", math.nan, math.nan, math.nan, 0.0, first, None,
                       used_n, 0, 0, risk, headroom,
                       [f"decomposed: {steps} CP-SAT neighbourhood solves of {options.lns_nodes} nodes, "
                        f"{improved} improved the plan; no global solver bound"], progress)


def _a_binpack_rest(comp: Compiled, x: np.ndarray, nodes: np.ndarray) -> tuple[int, int]:
    """(s_bar, D* - S of the nodes outside ``nodes``): the whole cluster's a-binpack terms as seen from a
    neighbourhood, |S_inside + S_outside - D*| = |S_inside - (D* - S_outside)|."""
    cpu = comp.resources.index("cpu")
    free_cpu = comp.free[:, cpu]
    counted = comp.eligible.any(axis=0) & (free_cpu > 0)
    s_bar, per_node = a_binpack_shape(comp)
    share = (T_MAX * (comp.req[:, cpu] @ x)) // np.maximum(free_cpu, 1)
    outside = counted.copy()
    outside[nodes] = False
    return s_bar, int(int(counted.sum()) * per_node) - int(np.abs(share[outside] - s_bar).sum())


def _solve_once(comp: Compiled, options: SolverOptions, u_star: float, hint: np.ndarray | None,
                t0: float, a_binpack_target: tuple[int, int] | None = None,
                balance: int | None = None) -> SolveResult:
    """One CP-SAT model. ``a_binpack_target``: (s_bar, D*) of the whole cluster when ``comp`` is an LNS
    neighbourhood, so that its a-binpack objective is the whole plan's; ``balance``: the same for
    load-balance's balanced index (compiled.balance_target). ``hint``: a placement to start from; what of it
    the model's constraints allow is given to CP-SAT as a complete solution (every variable), so its first
    solution is the hint and it only returns better ones."""
    n_c, n_n = comp.n_classes, comp.n_nodes
    ub = comp.ub()
    pm = PlacementModel(comp, ub)
    model = pm.model
    unplaced = [model.new_int_var(0, int(comp.counts[ci]), f"u{ci}") for ci in range(n_c)]
    for ci in range(n_c):
        model.add(sum(pm.by_class[ci]) + unplaced[ci] == int(comp.counts[ci]))

    needs_y = options.policy in ("binpack", "consolidate", "cost", "a-binpack")
    balancing = options.policy == "load-balance"
    ys: list[Any] = []
    t_max = model.new_int_var(0, T_CEIL, "T")
    node_t: dict[int, tuple[cp_model.IntVar, cp_model.IntVar]] = {}  # load-balance: node -> (t_n, given_n)
    for ni in range(n_n):
        if needs_y and not comp.has_pods[ni]:
            y: Any = model.new_bool_var(f"y{ni}")
            if not pm.by_node[ni]:
                model.add(y == 0)
        else:
            y = 1
        ys.append(y)
        if not pm.by_node[ni]:
            continue
        pm.add_fit(ni, comp.free[ni], y)
        pm.add_safe(ni, y)
        if balancing:
            # T is the worst index over the nodes given pods, as plan_score reads it.
            t_n = model.new_int_var(0, T_CEIL, f"t{ni}")
            given = model.new_bool_var(f"g{ni}")
            pm.add_index_bound(ni, t_n)
            model.add(sum(v for _, v in pm.by_node[ni]) == 0).only_enforce_if(~given)
            model.add(t_max >= t_n).only_enforce_if(given)
            node_t[ni] = (t_n, given)
        else:
            pm.add_index_bound(ni, t_max)
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

    target = (balance_target(comp) if balance is None else balance) if balancing else 0
    w_unplaced, objective, devs = _objective(pm, options.policy, ys, t_max, [t for t, _ in node_t.values()], unplaced,
                                             a_binpack_target, target)
    if hint is not None:
        _add_hint(pm, model_feasible(comp, ub, hint), unplaced, ys, t_max, node_t, devs, target)
    progress = _Progress(t0)
    # Load-balance's weighted objective is dominated by its unplaced-pods term, so a relative gap would stop the
    # search once the unplaced count is proven, before the worst node or the spread improved: search to the limit.
    gap = 0.0 if balancing else options.relative_gap
    solver, name = pm.solve(objective, options.time_limit_s - (time.perf_counter() - t0), options.workers,
                            options.seed, gap, progress)
    if name not in OK_STATUSES:
        x = np.zeros((n_c, n_n), dtype=np.int64)
        risk, headroom, _, _ = evaluate(comp, x, u_star)
        return SolveResult(x, comp.counts.copy(), name, math.nan, math.nan, math.inf, 0.0, None, None, 0, 0, 0,
                           risk, headroom, [f"CP-SAT found no plan ({name})"], progress.points)
    x = pm.values(solver)
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


def model_feasible(comp: Compiled, ub: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x cut to what the model's constraints allow (within ub, requests within free, the linear safe bound
    within the budget): on a node that breaks one, pods come off, largest safe-bound term first, until it
    holds. A placement held to the exact rule can break the linear form where the exact rule is looser;
    CP-SAT only starts from a hint that satisfies every constraint."""
    x = np.minimum(x, ub).astype(np.int64)
    budget = np.maximum(comp.budget, 0)
    over = ((np.einsum("cr,cn->nr", comp.req, x) > comp.free).any(axis=1)
            | (np.einsum("rcn,cn->rn", comp.a, x) > budget).any(axis=0))
    for ni in np.nonzero(over)[0]:
        while x[:, ni].sum():
            fits = (comp.req.T @ x[:, ni] <= comp.free[ni]).all() and (
                (comp.a[:, :, ni] * x[None, :, ni]).sum(axis=1) <= budget[:, ni]).all()
            if fits:
                break
            present = np.nonzero(x[:, ni])[0]
            x[present[np.argmax(comp.a[:, present, ni].max(axis=0))], ni] -= 1
    return x


def _add_hint(pm: PlacementModel, x: np.ndarray, unplaced: list[cp_model.IntVar], ys: list[Any],
              t_max: cp_model.IntVar, node_t: dict[int, tuple[cp_model.IntVar, cp_model.IntVar]],
              devs: list[Any], target: int) -> None:
    """Hint a whole solution, every variable (CP-SAT only starts from a hint it can complete): x, u, y, T
    and load-balance's t_n, given_n and deviations. ``x`` must satisfy the model (model_feasible)."""
    comp, model = pm.comp, pm.model
    for (ci, ni), v in pm.x.items():
        model.add_hint(v, int(x[ci, ni]))
    for ci, u in enumerate(unplaced):
        model.add_hint(u, int(comp.counts[ci] - x[ci].sum()))
    used = x.sum(axis=0) > 0
    for ni, y in enumerate(ys):
        if not isinstance(y, int):
            model.add_hint(y, bool(used[ni]))
    index = load_index(comp, x)
    if node_t:
        per_node = index.max(axis=0)
        for (ni, (t_n, given)), d in zip(node_t.items(), devs, strict=True):
            model.add_hint(t_n, int(per_node[ni]))
            model.add_hint(given, bool(used[ni]))
            model.add_hint(d, max(int(per_node[ni]) - target, 0))
        model.add_hint(t_max, int(per_node[used].max(initial=0)))
        return
    has_terms = np.array([bool(terms) for terms in pm.by_node], dtype=bool)
    model.add_hint(t_max, int(index[:, has_terms].max(initial=0)))


def _objective(pm: PlacementModel, policy: str, ys: list[Any], t_max: cp_model.IntVar,
               node_t: list[cp_model.IntVar], unplaced: list[cp_model.IntVar],
               a_binpack_target: tuple[int, int] | None = None, target: int = 0) -> tuple[int, Any, list[Any]]:
    """(weight of one unplaced pod, the objective, load-balance's deviation variables, one per node_t)."""
    comp, model = pm.comp, pm.model
    n_n = comp.n_nodes
    y_vars = [(ni, y) for ni, y in enumerate(ys) if not isinstance(y, int)]
    # Over the nodes the plan can still change, load indexes stay within 0..T_MAX (the safe bound holds
    # there); T_CEIL only leaves room for nodes already over their bound, whose index is a constant.
    t_range = T_MAX + 1
    if policy == "load-balance":
        # Spread: sum_n max(t_n - target, 0) (compiled.balance_spread), under the worst node T.
        devs = []
        for i, t_n in enumerate(node_t):
            d = model.new_int_var(0, T_CEIL, f"d{i}")
            model.add(d >= t_n - target)
            devs.append(d)
        w_t = T_CEIL * max(len(devs), 1) + 1
        w_unplaced = w_t * (T_CEIL + 1)
        return w_unplaced, w_unplaced * sum(unplaced) + w_t * t_max + sum(devs), devs
    if policy == "a-binpack":
        cpu = comp.resources.index("cpu")
        cap_cpu = comp.free[:, cpu]
        s_bar, per_node = a_binpack_shape(comp)
        shares = []
        for ni in range(n_n):
            if not pm.by_node[ni] or cap_cpu[ni] <= 0:
                continue
            s_n = model.new_int_var(0, T_MAX, f"s{ni}")
            placed = pm.weighted(ni, comp.req[:, cpu] * T_MAX)
            model.add(placed <= int(cap_cpu[ni]) * (s_n + 1))
            model.add(placed >= int(cap_cpu[ni]) * s_n)
            shares.append(s_n)
        if a_binpack_target is not None:
            s_bar = a_binpack_target[0]
        devs = pm.abs_deviations(shares, s_bar, T_MAX, "d")
        target = int(len(devs) * per_node) if a_binpack_target is None else a_binpack_target[1]
        miss_hi = T_MAX * max(len(devs), 1) + abs(target)
        miss = model.new_int_var(0, miss_hi, "miss")
        model.add_abs_equality(miss, sum(devs) - target)
        w_y = t_range
        w_miss = w_y * (len(y_vars) + 1)
        w_unplaced = w_miss * (miss_hi + 1) * 2
        return w_unplaced, w_unplaced * sum(unplaced) + w_miss * miss + w_y * sum(y for _, y in y_vars) + t_max, []
    weights = node_weights(comp, policy)
    w_y = t_range
    w_unplaced = w_y * (int(weights.max(initial=1)) + 1) * 2
    nodes_term = cp_model.LinearExpr.weighted_sum([y for _, y in y_vars], [int(weights[ni]) for ni, _ in y_vars])
    return w_unplaced, w_unplaced * sum(unplaced) + w_y * nodes_term + t_max, []
