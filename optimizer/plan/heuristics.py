"""Baselines for the optimizer, on the same compiled problem: first-fit-decreasing and best-fit (the
bin-packing heuristics a plan must beat), and the LP-relaxation lower bound on nodes used (scipy HiGHS).

FFD also warm-starts CP-SAT: its placement is given as the solver's hint, so a plan exists at once.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from optimizer.plan.compiled import T_MAX, Compiled, index_terms


@dataclass(slots=True)
class HeuristicResult:
    x: np.ndarray  # (C, N)
    unplaced: np.ndarray  # (C,)
    nodes_used: int


# Pod size for the "decreasing" order: the larger of its cpu and memory shares of the mean node. Pods that may
# go on one node only (a DaemonSet's, pinned by matchFields) come first, before others fill their node. With
# ``restricted_first``, pods that may go on fewer than half of the nodes (a zone, GPU nodes) come next, before
# pods that may go anywhere take the room they need on those nodes (an alternative start: on clusters of
# trace shapes it opened one node fewer in 3 of 4 tuning seeds, benchmarks/figures/plans-unseen.md).
def _pod_order(comp: Compiled, restricted_first: bool = False) -> np.ndarray:
    mean_free = np.maximum(comp.free[:, :2].mean(axis=0), 1)
    size = (comp.req[:, :2] / mean_free).max(axis=1)
    eligible = comp.eligible.sum(axis=1)
    pinned = eligible <= 1
    if restricted_first:
        return np.lexsort((-size, eligible >= 0.5 * comp.n_nodes, ~pinned))
    return np.lexsort((-size, ~pinned))


def _node_order(comp: Compiled) -> np.ndarray:
    """Nodes already in use first, then the largest (by cpu then memory) first."""
    return np.lexsort((-comp.free[:, 1], -comp.free[:, 0], ~comp.has_pods))


def _place(comp: Compiled, rule: str, restricted_first: bool = False) -> HeuristicResult:
    """Pods in decreasing size, each on a node where the rules allow it, its requests fit and the linear
    safe bound holds: the first in node order ("first"), the one left fullest ("best"), or the one whose
    load index stays lowest ("least-loaded", the load-balance start)."""
    n_c, n_n = comp.n_classes, comp.n_nodes
    if n_n == 0:  # nothing to place pods on: all of them stay unplaced
        return HeuristicResult(np.zeros((n_c, 0), dtype=np.int64), comp.counts.copy(), 0)
    free = comp.free.astype(np.int64).copy()
    budget = comp.budget.astype(np.int64).copy()
    order = _node_order(comp)
    rank = np.empty(n_n, dtype=np.int64)
    rank[order] = np.arange(n_n)
    used = comp.has_pods.copy()
    x = np.zeros((n_c, n_n), dtype=np.int64)
    unplaced = np.zeros(n_c, dtype=np.int64)
    scale = np.maximum(comp.free[:, :2].max(axis=0), 1).astype(float)
    index_cap, index_const = index_terms(comp)
    spent = np.zeros((2, n_n))  # sum_c a[r, c, n] x[c, n], for the load index
    for ci in _pod_order(comp, restricted_first):
        req = comp.req[ci]
        a = comp.a[:, ci, :]
        left = int(comp.counts[ci])
        while left > 0:
            ok = comp.eligible[ci] & (free >= req[None, :]).all(axis=1) & (budget >= a).all(axis=0)
            if not ok.any():
                unplaced[ci] += left
                break
            cand = np.nonzero(ok)[0]
            if rule == "first":
                # The next pods of the class go on the same first node until it is full: place them at once.
                ni = cand[np.argmin(rank[cand])]
                k = min(left, _most_that_fit(free[ni], req, budget[:, ni], a[:, ni]))
                x[ci, ni] += k
                free[ni] -= k * req
                budget[:, ni] -= k * a[:, ni]
                spent[:, ni] += k * a[:, ni]
                used[ni] = True
                left -= k
                continue
            left -= 1
            if rule == "best":
                # Best fit: the node left with the least free cpu+memory share; open new nodes last.
                room = ((free[cand, :2] - req[None, :2]) / scale).sum(axis=1) + (~used[cand]) * 10.0
                ni = cand[np.argmin(room)]
            else:
                after = ((spent[:, cand] + a[:, cand]) * T_MAX + index_const[:, cand]) / index_cap[:, cand]
                ni = cand[np.argmin(after.max(axis=0))]
            x[ci, ni] += 1
            free[ni] -= req
            budget[:, ni] -= a[:, ni]
            spent[:, ni] += a[:, ni]
            used[ni] = True
    return HeuristicResult(x, unplaced, int(used.sum()))


def _most_that_fit(free: np.ndarray, req: np.ndarray, budget: np.ndarray, a: np.ndarray) -> int:
    """How many pods of requests ``req`` and safe-bound terms ``a`` fit one after another in ``free`` and
    ``budget`` (at least one: the caller checked that one does)."""
    by_req = free[req > 0] // req[req > 0]
    by_safe = budget[a > 0] // a[a > 0]
    return max(int(min(by_req.min(initial=2**62), by_safe.min(initial=2**62))), 1)


def first_fit_decreasing(comp: Compiled, restricted_first: bool = False) -> HeuristicResult:
    return _place(comp, "first", restricted_first)


def least_loaded_decreasing(comp: Compiled) -> HeuristicResult:
    return _place(comp, "least-loaded")


def best_fit_decreasing(comp: Compiled) -> HeuristicResult:
    return _place(comp, "best")


def _node_types(comp: Compiled, w: np.ndarray) -> tuple[Compiled, np.ndarray, list[list[int]]]:
    """Identical nodes (resources, budgets, safe-bound terms, eligibility, weight) merged into types: the
    problem restricted to one node per type, the multiplicities and each type's nodes."""
    groups: dict[bytes, list[int]] = {}
    for n in range(comp.n_nodes):
        sig = b"".join((comp.free[n].tobytes(), comp.budget[:, n].tobytes(), comp.eligible[:, n].tobytes(),
                        comp.a[:, :, n].tobytes(), bytes([int(comp.has_pods[n])]), w[n:n + 1].tobytes()))
        groups.setdefault(sig, []).append(n)
    reps = np.array([g[0] for g in groups.values()], dtype=np.int64)
    sub = comp.subset(reps, comp.counts)
    sub.cost = w[reps]
    return sub, np.array([len(g) for g in groups.values()], dtype=float), list(groups.values())


# LP relaxation of binpack (x >= 0 and 0 <= y <= 1 continuous), the same constraints as the model:
#     min sum_n w_n y_n   s.t.  sum_n x[c, n] = count[c] - unplaced[c],
#                           sum_c req[c, r] x[c, n] <= free[n, r] y[n],   sum_c a[c, n] x[c, n] <= budget[n] y[n]
# with y fixed to 1 on nodes that already host pods. unplaced is fixed to the plan's, so the bound is for
# placing the same pods. Its optimum is a lower bound on the nodes any placement of those pods uses.
# Identical nodes are merged into one type t with multiplicity m_t (0 <= y_t <= m_t): for an LP this is
# exact (split any solution evenly), and so is merging classes with the same requests, safe-bound terms and
# eligibility (sum their pods), which keeps the LP small on large clusters.
# w_n = 1 (binpack) or the node weights of consolidate / cost (optimizer.plan.compiled.node_weights).
def lp_bound_nodes(comp: Compiled, unplaced: np.ndarray | None = None, weights: np.ndarray | None = None,
                   time_limit_s: float | None = None) -> float:
    """The LP relaxation's optimum (nan when it has none, or none within ``time_limit_s`` seconds)."""
    solution = _lp_relaxation(comp, unplaced, weights, time_limit_s)
    return float("nan") if solution is None else solution.value


@dataclass(slots=True)
class _LpSolution:
    value: float
    amounts: list[tuple[list[int], list[int], float]]  # (classes of a merged class, nodes of a type, its pods)
    opened: list[tuple[list[int], float, bool]]  # (nodes of a type, y, already in use)


# The last LP relaxations solved, by their inputs' digest: a solve asks for the same one twice (the rounded start,
# then the plan's bound when the plan places the same pods), and at 1,500 nodes of trace shapes one costs 4-13 s
# of CPU (782 node types x 171 classes).
_LP_MEMO: dict[bytes, _LpSolution | None] = {}
_LP_MEMO_SIZE = 4


# Problems whose relaxation ran out of time, with that limit: asked again within no more time (the plan's bound
# after the rounded start timed out), it is not tried; it would only spend the same seconds again.
_LP_TIMED_OUT: dict[bytes, float] = {}


def _digest(*parts: np.ndarray) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        digest.update(np.ascontiguousarray(part).tobytes())
        digest.update(str(part.shape).encode())
    return digest.digest()


def _problem_key(comp: Compiled) -> bytes:
    return _digest(comp.req, comp.free, comp.eligible, comp.a, comp.budget, comp.has_pods, comp.counts)


def _lp_key(comp: Compiled, unplaced: np.ndarray | None, weights: np.ndarray | None) -> bytes:
    return _digest(_np_bytes(_problem_key(comp)), np.zeros(0) if unplaced is None else np.asarray(unplaced, dtype=np.int64),
                   np.zeros(0) if weights is None else np.asarray(weights, dtype=float))


def _np_bytes(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.uint8)


def _lp_relaxation(comp: Compiled, unplaced: np.ndarray | None, weights: np.ndarray | None,
                   time_limit_s: float | None = None) -> _LpSolution | None:
    """The relaxation's solution, None when it has none or none within ``time_limit_s`` (not remembered then)."""
    if comp.n_nodes == 0:
        return None
    key = _lp_key(comp, unplaced, weights)
    if key in _LP_MEMO:
        return _LP_MEMO[key]
    problem = _problem_key(comp)
    if time_limit_s is not None and time_limit_s <= _LP_TIMED_OUT.get(problem, -1.0):
        return None
    solution, timed_out = _solve_lp_relaxation(comp, unplaced, weights, time_limit_s)
    if timed_out:
        if len(_LP_TIMED_OUT) >= _LP_MEMO_SIZE:
            _LP_TIMED_OUT.pop(next(iter(_LP_TIMED_OUT)))
        _LP_TIMED_OUT[problem] = max(float(time_limit_s or 0.0), _LP_TIMED_OUT.get(problem, 0.0))
        return None
    while len(_LP_MEMO) >= _LP_MEMO_SIZE:
        _LP_MEMO.pop(next(iter(_LP_MEMO)))
    _LP_MEMO[key] = solution
    return solution


def _solve_lp_relaxation(comp: Compiled, unplaced: np.ndarray | None, weights: np.ndarray | None,
                         time_limit_s: float | None) -> tuple[_LpSolution | None, bool]:
    """(the solution or None, whether HiGHS stopped at the time limit)."""
    # scipy.optimize costs a second of import; only the bound needs it, not every solver process.
    import scipy.sparse as sp
    from scipy.optimize import linprog

    w = np.ones(comp.n_nodes) if weights is None else np.asarray(weights, dtype=float)
    sub, mult, node_groups = _node_types(comp, w)
    need_c = comp.counts - (unplaced if unplaced is not None else 0)
    # Classes identical to the LP (requests, safe-bound terms, eligibility) merge exactly: sum their pods.
    class_groups: dict[bytes, list[int]] = {}
    for ci in range(comp.n_classes):
        sig = sub.req[ci].tobytes() + sub.a[:, ci, :].tobytes() + sub.eligible[ci].tobytes()
        class_groups.setdefault(sig, []).append(ci)
    reps_c = np.array([g[0] for g in class_groups.values()], dtype=np.int64)
    need = np.array([need_c[g].sum() for g in class_groups.values()], dtype=float)
    req, a, eligible = sub.req[reps_c], sub.a[:, reps_c, :], sub.eligible[reps_c]
    ub = eligible & (req[:, None, :] <= sub.free[None, :, :]).all(axis=2)
    ci_idx, ti_idx = np.nonzero(ub)
    n_x, n_t = len(ci_idx), len(mult)
    n_var = n_x + n_t
    a_eq = sp.csr_matrix((np.ones(n_x), (ci_idx, np.arange(n_x))), shape=(len(reps_c), n_var))
    rows, cols, vals = [], [], []
    row = 0
    blocks = [(req[ci_idx, r].astype(float), sub.free[:, r].astype(float)) for r in range(len(sub.resources))]
    blocks += [(a[k, ci_idx, ti_idx].astype(float), sub.budget[k].astype(float)) for k in range(2)]
    for coef, cap in blocks:
        rows += [row + ti_idx, row + np.arange(n_t)]
        cols += [np.arange(n_x), n_x + np.arange(n_t)]
        vals += [coef, -np.maximum(cap, 0.0)]
        row += n_t
    a_ub = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row, n_var))
    cost = np.concatenate([np.zeros(n_x), sub.cost])
    bounds = [(0, None)] * n_x + [(m, m) if sub.has_pods[t] else (0.0, m) for t, m in enumerate(mult)]
    options = {} if time_limit_s is None else {"time_limit": max(float(time_limit_s), 1e-3)}
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(row), A_eq=a_eq, b_eq=need, bounds=bounds, method="highs",
                  options=options)
    if res.status != 0:
        return None, res.status == 1  # 1: a limit (time or iterations) stopped it
    groups = list(class_groups.values())
    amounts = [(groups[c], node_groups[t], float(v)) for c, t, v in zip(ci_idx, ti_idx, res.x[:n_x], strict=True)
               if v > 1e-9]
    opened = [(node_groups[t], float(res.x[n_x + t]), bool(sub.has_pods[t])) for t in range(n_t)]
    return _LpSolution(float(res.fun), amounts, opened), False


# LP rounding: the relaxation's placement of each merged class on each node type, spread evenly over
# ceil(y_t) nodes of that type (rounded down per node), pods a node cannot take taken off, and what is left
# placed by first-fit-decreasing on what is left of the nodes. Small pods on many identical nodes (a cluster
# planned whole) round with little loss, where the greedy heuristics fill big nodes with big pods only.
def lp_rounded(comp: Compiled, unplaced: np.ndarray | None = None, weights: np.ndarray | None = None,
               time_limit_s: float | None = None) -> HeuristicResult | None:
    """None when the relaxation has no solution (or none within ``time_limit_s``)."""
    import dataclasses

    solution = _lp_relaxation(comp, unplaced, weights, time_limit_s)
    if solution is None:
        return None
    x = np.zeros((comp.n_classes, comp.n_nodes), dtype=np.int64)
    open_count = {tuple(nodes[:1]): (len(nodes) if in_use else min(len(nodes), int(math.ceil(y - 1e-6))))
                  for nodes, y, in_use in solution.opened}
    left = comp.counts.astype(np.int64).copy()
    for classes, nodes, amount in solution.amounts:
        k = open_count[tuple(nodes[:1])]
        total = int(math.floor(amount + 1e-6))
        if k == 0 or total == 0:
            continue
        per_node = np.full(k, total // k, dtype=np.int64)
        per_node[: total % k] += 1
        for ni, n_pods in zip(nodes[:k], per_node, strict=True):
            for ci in classes:
                take = min(int(n_pods), int(left[ci]))
                x[ci, ni] += take
                left[ci] -= take
                n_pods -= take
                if n_pods == 0:
                    break
    _trim(comp, x)
    free = comp.free - np.einsum("cr,cn->nr", comp.req, x)
    budget = comp.budget - np.einsum("rcn,cn->rn", comp.a, x)
    rest = dataclasses.replace(comp, free=free, budget=budget, has_pods=comp.has_pods | (x.sum(axis=0) > 0),
                               counts=comp.counts - x.sum(axis=1))
    more = first_fit_decreasing(rest)
    x += more.x
    return HeuristicResult(x, comp.counts - x.sum(axis=1), int(((x.sum(axis=0) > 0) | comp.has_pods).sum()))


def _trim(comp: Compiled, x: np.ndarray) -> None:
    """Take pods (largest safe-bound term first) off nodes whose requests or linear safe bound x breaks."""
    budget = np.maximum(comp.budget, 0)
    over = ((np.einsum("cr,cn->nr", comp.req, x) > comp.free).any(axis=1)
            | (np.einsum("rcn,cn->rn", comp.a, x) > budget).any(axis=0))
    for ni in np.nonzero(over)[0]:
        while x[:, ni].sum():
            if (comp.req.T @ x[:, ni] <= comp.free[ni]).all() and (
                    (comp.a[:, :, ni] * x[None, :, ni]).sum(axis=1) <= budget[:, ni]).all():
                break
            present = np.nonzero(x[:, ni])[0]
            x[present[np.argmax(comp.a[:, present, ni].max(axis=0))], ni] -= 1


def close_nodes(comp: Compiled, x: np.ndarray, weights: np.ndarray | None = None) -> int:
    """Empty the nodes a placement opens where their pods fit elsewhere: for each node the placement opens
    (the lightest first; with ``weights``, the heaviest weight first), move its pods, largest first, to
    other nodes in use where the rules allow them and their requests and linear safe-bound terms fit; a
    node is closed only when all of its pods moved. x is updated in place; returns the nodes closed.
    A cheap first improvement on first-fit-decreasing before the search (it never adds a node)."""
    opened = np.nonzero((x.sum(axis=0) > 0) & ~comp.has_pods)[0]
    if len(opened) == 0:
        return 0
    free = comp.free - np.einsum("cr,cn->nr", comp.req, x)
    budget = comp.budget - np.einsum("rcn,cn->rn", comp.a, x)
    size = (comp.req[:, :2] / np.maximum(comp.free[:, :2].mean(axis=0), 1)).max(axis=1)
    load = (comp.req[:, :2].T.astype(float) @ x[:, opened]).max(axis=0)
    order = opened[np.lexsort((load, -(weights[opened] if weights is not None else np.zeros(len(opened)))))]
    closed = 0
    for ni in order:
        in_use = (x.sum(axis=0) > 0) | comp.has_pods
        in_use[ni] = False
        trial_free, trial_budget = free.copy(), budget.copy()
        moves: list[tuple[int, int]] = []
        for ci in np.nonzero(x[:, ni])[0][np.argsort(-size[np.nonzero(x[:, ni])[0]], kind="stable")]:
            for _ in range(int(x[ci, ni])):
                ok = in_use & comp.eligible[ci] & (trial_free >= comp.req[ci][None, :]).all(axis=1) & (
                    trial_budget >= comp.a[:, ci, :]).all(axis=0)
                if not ok.any():
                    break
                # Best fit: the node left with the least cpu room, so big holes stay for big pods.
                cand = np.nonzero(ok)[0]
                dst = int(cand[np.argmin(trial_free[cand, 0] - comp.req[ci, 0])])
                trial_free[dst] -= comp.req[ci]
                trial_budget[:, dst] -= comp.a[:, ci, dst]
                moves.append((int(ci), dst))
            else:
                continue
            break
        if len(moves) != int(x[:, ni].sum()):
            continue
        for ci, dst in moves:
            x[ci, ni] -= 1
            x[ci, dst] += 1
        trial_free[ni] = comp.free[ni]
        trial_budget[:, ni] = comp.budget[:, ni]
        free, budget = trial_free, trial_budget
        closed += 1
    return closed
