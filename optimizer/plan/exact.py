"""Holding a placement to the exact (Beta) safe rule, whatever made it (CP-SAT, LNS, first-fit): find the
nodes over their bound, tighten the linear budgets the solver saw, take pods off, put pods back where the
exact rule and the free resources allow, and score plans so that search never returns a worse one.

Pure numpy on the compiled problem; no solver here.
"""

from __future__ import annotations

import math

import numpy as np

from optimizer.plan.chance import beta_max_mean, plan_risk
from optimizer.plan.compiled import SCALE, Compiled, a_binpack_miss, balance_spread, evaluate, load_index, node_weights
from optimizer.plan.problem import LOAD_RESOURCES

RISK_TOLERANCE = 1e-9


def over_bound(comp: Compiled, x: np.ndarray, u_star: float, eps: float) -> np.ndarray:
    """(2, N): node-resources over the exact bound on nodes the plan gives pods (nodes already over their
    bound that get nothing are the cluster's state, not the plan's doing)."""
    risk, _, _, _ = evaluate(comp, x, u_star)
    return (risk > eps + RISK_TOLERANCE) & (x.sum(axis=0) > 0)[None, :]


def tighten_budgets(comp: Compiled, x: np.ndarray, over: np.ndarray, u_star: float, eps: float) -> None:
    """Lower each offending node's linear budget by the mean load the Beta rule says is too much."""
    _, _, mean, var = evaluate(comp, x, u_star)
    for ri, ni in zip(*np.nonzero(over), strict=True):
        sigma = math.sqrt(var[ri, ni]) / comp.cap[ri, ni]
        excess = mean[ri, ni] - beta_max_mean(sigma, u_star, eps) * comp.cap[ri, ni]
        comp.budget[ri, ni] -= int(math.ceil(max(excess, 0.0) * SCALE.get(LOAD_RESOURCES[ri], 1.0))) + 1
        comp.bound_const[ri, ni] = comp.bound_cap[ri, ni] - comp.budget[ri, ni]


def _node_risk(comp: Compiled, x: np.ndarray, ni: int, u_star: float) -> np.ndarray:
    mean = comp.mean0[:, ni] + comp.mu @ x[:, ni]
    var = comp.var0[:, ni] + comp.var @ x[:, ni]
    return plan_risk(mean, var, comp.cap[:, ni], u_star)


def strip_to_exact(comp: Compiled, x: np.ndarray, unplaced: np.ndarray, u_star: float, eps: float) -> int:
    """Take pods (largest mean first) off nodes over the exact bound until each passes; x and unplaced
    are updated in place. Returns how many pods were taken off."""
    removed = 0
    for ni in np.nonzero(over_bound(comp, x, u_star, eps).any(axis=0))[0]:
        while x[:, ni].sum() > 0:
            if (_node_risk(comp, x, ni, u_star) <= eps + RISK_TOLERANCE).all():
                break
            present = np.nonzero(x[:, ni])[0]
            ci = present[np.argmax(comp.mu[:, present].max(axis=0))]
            x[ci, ni] -= 1
            unplaced[ci] += 1
            removed += 1
    return removed


def place_unplaced(comp: Compiled, x: np.ndarray, unplaced: np.ndarray, u_star: float, eps: float,
                   policy: str = "binpack") -> int:
    """Put unplaced pods on nodes where the rules allow them, their requests fit what is left and the
    node stays within the exact bound; x and unplaced are updated in place. Largest pods first; for
    load-balance the node left with the lowest risk, otherwise a node already in use before an empty one.
    Returns how many pods were placed."""
    placed = 0
    if comp.n_nodes == 0:
        return 0
    left = comp.free - np.einsum("cr,cn->nr", comp.req, x)
    mean = comp.mean0 + np.einsum("rc,cn->rn", comp.mu, x)
    var = comp.var0 + np.einsum("rc,cn->rn", comp.var, x)
    size = (comp.req[:, :2] / np.maximum(comp.free[:, :2].mean(axis=0), 1)).max(axis=1) + comp.mu.sum(axis=0) * 1e-12
    for ci in np.argsort(-size, kind="stable"):
        while unplaced[ci] > 0:
            ok = comp.eligible[ci] & (left >= comp.req[ci][None, :]).all(axis=1)
            if not ok.any():
                break
            cand = np.nonzero(ok)[0]
            risk = plan_risk(mean[:, cand] + comp.mu[:, ci:ci + 1], var[:, cand] + comp.var[:, ci:ci + 1],
                             comp.cap[:, cand], u_star).max(axis=0)
            safe = risk <= eps + RISK_TOLERANCE
            if not safe.any():
                break
            cand, risk = cand[safe], risk[safe]
            if policy == "load-balance":
                ni = int(cand[np.argmin(risk)])
            else:
                in_use = (x[:, cand].sum(axis=0) > 0) | comp.has_pods[cand]
                ni = int(cand[np.lexsort((cand, ~in_use))[0]])
            x[ci, ni] += 1
            unplaced[ci] -= 1
            left[ni] -= comp.req[ci]
            mean[:, ni] += comp.mu[:, ci]
            var[:, ni] += comp.var[:, ci]
            placed += 1
    return placed


def hold_to_exact(comp: Compiled, x: np.ndarray, unplaced: np.ndarray, u_star: float, eps: float,
                  policy: str = "binpack") -> tuple[int, int]:
    """Strip nodes over the exact bound, then re-place every pod left out (the stripped ones included)
    where it fits safely. Returns (taken off, put back)."""
    removed = strip_to_exact(comp, x, unplaced, u_star, eps)
    return removed, place_unplaced(comp, x, unplaced, u_star, eps, policy)


def plan_score(comp: Compiled, x: np.ndarray, policy: str) -> tuple[int, float, float]:
    """How good a plan is for ``policy``, smaller is better, compared as a tuple: (unplaced pods, the
    policy's own measure, a tie-breaker). The policy measure: nodes in use (binpack), their weight
    (consolidate, cost), the dispersion miss (a-binpack, then nodes), the worst load index over the nodes
    given pods (load-balance, then the spread above the balanced index, compiled.balance_spread: CP-SAT's
    own load-balance objective, so a plan it prefers scores no worse)."""
    unplaced = int((comp.counts - x.sum(axis=1)).sum())
    used = (x.sum(axis=0) > 0) | comp.has_pods
    index = load_index(comp, x)
    given = x.sum(axis=0) > 0
    worst = float(index[:, given].max(initial=0))
    if policy == "load-balance":
        return unplaced, worst, float(balance_spread(comp, x))
    if policy == "a-binpack":
        return unplaced, a_binpack_miss(comp, x), float(used.sum())
    if policy in ("consolidate", "cost"):
        return unplaced, float(node_weights(comp, policy)[used].sum()), worst
    return unplaced, float(used.sum()), worst
