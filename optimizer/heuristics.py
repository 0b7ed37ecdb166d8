"""Baselines for the optimizer, on the same compiled problem: first-fit-decreasing and best-fit (the
bin-packing heuristics a plan must beat), and the LP-relaxation lower bound on nodes used (scipy HiGHS).

FFD also warm-starts CP-SAT: its placement is given as the solver's hint, so a plan exists at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optimizer.compiled import Compiled


@dataclass(slots=True)
class HeuristicResult:
    x: np.ndarray  # (C, N)
    unplaced: np.ndarray  # (C,)
    nodes_used: int


# Pod size for the "decreasing" order: the larger of its cpu and memory shares of the mean node.
def _pod_order(comp: Compiled) -> np.ndarray:
    mean_free = np.maximum(comp.free[:, :2].mean(axis=0), 1)
    size = (comp.req[:, :2] / mean_free).max(axis=1)
    return np.argsort(-size, kind="stable")


def _node_order(comp: Compiled) -> np.ndarray:
    """Nodes already in use first, then the largest (by cpu then memory) first."""
    return np.lexsort((-comp.free[:, 1], -comp.free[:, 0], ~comp.has_pods))


def _place(comp: Compiled, best_fit: bool) -> HeuristicResult:
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
    for ci in _pod_order(comp):
        req = comp.req[ci]
        a = comp.a[:, ci, :]
        for _ in range(int(comp.counts[ci])):
            ok = comp.eligible[ci] & (free >= req[None, :]).all(axis=1) & (budget >= a).all(axis=0)
            if not ok.any():
                unplaced[ci] += 1
                continue
            cand = np.nonzero(ok)[0]
            if best_fit:
                # Best fit: the node left with the least free cpu+memory share; open new nodes last.
                left = ((free[cand, :2] - req[None, :2]) / scale).sum(axis=1) + (~used[cand]) * 10.0
                ni = cand[np.argmin(left)]
            else:
                ni = cand[np.argmin(rank[cand])]
            x[ci, ni] += 1
            free[ni] -= req
            budget[:, ni] -= a[:, ni]
            used[ni] = True
    return HeuristicResult(x, unplaced, int(used.sum()))


def first_fit_decreasing(comp: Compiled) -> HeuristicResult:
    return _place(comp, best_fit=False)


def best_fit_decreasing(comp: Compiled) -> HeuristicResult:
    return _place(comp, best_fit=True)


def _node_types(comp: Compiled, w: np.ndarray) -> tuple[Compiled, np.ndarray]:
    """Nodes merged into types for the LP (the problem restricted to one node per type, its cost = the
    type's weight; multiplicities). Empty nodes merge when identical. Nodes that already host pods are
    open whatever the plan does (y = 1), so those with the same eligibility are merged into one node with
    their summed free resources and budgets and the smallest per-pod safe-bound term: a relaxation (any
    placement on the members is one on the merged node), so the optimum stays a lower bound, and a
    cluster with 1,500 differently loaded nodes becomes a few dozen types."""
    groups: dict[bytes, list[int]] = {}
    for n in range(comp.n_nodes):
        if comp.has_pods[n]:
            sig = b"busy" + comp.eligible[:, n].tobytes()
        else:
            sig = b"".join((comp.free[n].tobytes(), comp.budget[:, n].tobytes(), comp.eligible[:, n].tobytes(),
                            comp.a[:, :, n].tobytes(), w[n:n + 1].tobytes()))
        groups.setdefault(sig, []).append(n)
    members = list(groups.values())
    reps = np.array([g[0] for g in members], dtype=np.int64)
    sub = comp.subset(reps, comp.counts)
    sub.cost = np.array([w[g].sum() if comp.has_pods[g[0]] else w[g[0]] for g in members])
    mult = np.array([1.0 if comp.has_pods[g[0]] else float(len(g)) for g in members])
    for t, g in enumerate(members):
        if comp.has_pods[g[0]] and len(g) > 1:
            sub.free[t] = comp.free[g].sum(axis=0)
            sub.budget[:, t] = np.maximum(comp.budget[:, g], 0).sum(axis=1)
            sub.a[:, :, t] = comp.a[:, :, g].min(axis=2)
    return sub, mult


# LP relaxation of binpack (x >= 0 and 0 <= y <= 1 continuous), the same constraints as the model:
#     min sum_n w_n y_n   s.t.  sum_n x[c, n] = count[c] - unplaced[c],
#                           sum_c req[c, r] x[c, n] <= free[n, r] y[n],   sum_c a[c, n] x[c, n] <= budget[n] y[n]
# with y fixed to 1 on nodes that already host pods. unplaced is fixed to the plan's, so the bound is for
# placing the same pods. Its optimum is a lower bound on the nodes any placement of those pods uses.
# Identical nodes are merged into one type t with multiplicity m_t (0 <= y_t <= m_t): for an LP this is
# exact (split any solution evenly); nodes already in use are merged further (see _node_types).
# w_n = 1 (binpack) or the node weights of consolidate / cost (optimizer.compiled.node_weights).
def lp_bound_nodes(comp: Compiled, unplaced: np.ndarray | None = None, weights: np.ndarray | None = None) -> float:
    # scipy.optimize costs a second of import; only the bound needs it, not every solver process.
    import scipy.sparse as sp
    from scipy.optimize import linprog

    w = np.ones(comp.n_nodes) if weights is None else np.asarray(weights, dtype=float)
    sub, mult = _node_types(comp, w)
    ub = sub.eligible & (sub.req[:, None, :] <= sub.free[None, :, :]).all(axis=2)
    ci_idx, ti_idx = np.nonzero(ub)
    n_x, n_t = len(ci_idx), len(mult)
    n_var = n_x + n_t
    need = comp.counts - (unplaced if unplaced is not None else 0)
    a_eq = sp.csr_matrix((np.ones(n_x), (ci_idx, np.arange(n_x))), shape=(comp.n_classes, n_var))
    rows, cols, vals = [], [], []
    row = 0
    blocks = [(sub.req[ci_idx, r].astype(float), sub.free[:, r].astype(float)) for r in range(len(sub.resources))]
    blocks += [(sub.a[k, ci_idx, ti_idx].astype(float), sub.budget[k].astype(float)) for k in range(2)]
    for coef, cap in blocks:
        rows += [row + ti_idx, row + np.arange(n_t)]
        cols += [np.arange(n_x), n_x + np.arange(n_t)]
        vals += [coef, -np.maximum(cap, 0.0)]
        row += n_t
    a_ub = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row, n_var))
    cost = np.concatenate([np.zeros(n_x), sub.cost])
    bounds = [(0, None)] * n_x + [(m, m) if sub.has_pods[t] else (0.0, m) for t, m in enumerate(mult)]
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(row), A_eq=a_eq, b_eq=need.astype(float), bounds=bounds, method="highs")
    if res.status != 0:
        return float("nan")
    return float(res.fun)
