"""The safe overload bound in a form CP-SAT can take, and the exact check it is held to.

The pure maths of the optimizer (no solver here), as Trimaran keeps its formulas in analysis.go.

A node's load of one resource after the plan is L + sum_c x_c X_c: the forecast current load L (mean m,
std s) plus x_c pods of class c, each with usage mean mu_c and std sigma_c, independent. The safe rule
(kube-safe-scheduler, kso.core.safety) is P((L + sum x_c X_c) / cap > U*) <= eps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kso.core.safety import safe_overload_risk


# Normal quantile of the bound: P(N(M, V) > B) <= eps  <=>  M + z sqrt(V) <= B with z = Phi^-1(1 - eps).
# For eps >= 0.5, z <= 0 and the spread would *loosen* the bound; the model then drops it (z = 0), which
# is conservative.
def z_value(eps: float) -> float:
    from scipy.special import ndtri  # imported here, not with the module: see kso.core.safety.fitted_risk

    return max(float(ndtri(1.0 - eps)), 0.0)


# The chance constraint as the solver gets it. With the normal form
#     m + sum_c x_c mu_c + z sqrt(s^2 + sum_c x_c sigma_c^2) <= U* cap
# the square root is replaced by its tangent at v0 (sqrt is concave, so the tangent lies above it and
# the linear constraint implies the normal one):
#     sqrt(v) <= sqrt(v0) + (v - v0) / (2 sqrt(v0))
# which gives, per node, one linear constraint
#     sum_c x_c a_c <= budget,   a_c = mu_c + z sigma_c^2 / (2 sqrt(v0)),
#     budget = U* cap - m - z (sqrt(v0) + (s^2 - v0) / (2 sqrt(v0))).
# v0 is where the tangent touches: the variance of the node filled to its bound with average pods,
# v0 = s^2 + (headroom / mean_mu) * mean_var, so the bound is tight where it matters (full nodes) and
# conservative elsewhere. With no spread anywhere (v0 = 0) the constraint is m + sum x_c mu_c <= U* cap.
def linear_safe_bound(m: float, s: float, cap: float, mu: np.ndarray, var: np.ndarray, u_star: float, z: float,
                      fill_mu: float, fill_var: float) -> tuple[np.ndarray, float]:
    """(a_c per class, budget) of the linearised bound for one node and resource."""
    headroom = max(u_star * cap - m, 0.0)
    # Pods with (almost) no mean usage would make "pods that fit" unbounded: count at least 0.1% of cap each.
    fill_mu = max(fill_mu, 1e-3 * cap)
    v0 = s * s + (headroom / fill_mu * fill_var if fill_mu > 0 else 0.0)
    if z <= 0 or v0 <= 0:
        return mu.astype(float), u_star * cap - m
    root = math.sqrt(v0)
    a = mu + z * var / (2.0 * root)
    budget = u_star * cap - m - z * (root + (s * s - v0) / (2.0 * root))
    return a, budget


# The exact check every plan is held to: the moment-matched Beta rule of kso.core.safety (the safe agent's
# rule), on the mean and variance of the node's load after the plan:
#     mu = (m + sum x_c mu_c) / cap,   sigma = sqrt(s^2 + sum x_c sigma_c^2) / cap,   risk = P(Beta > U*).
def plan_risk(mean: np.ndarray, var: np.ndarray, cap: np.ndarray, u_star: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.clip(mean / cap, 0.0, 1.0)
        sigma = np.clip(np.sqrt(np.maximum(var, 0.0)) / cap, 0.0, 1.0)
    risk = safe_overload_risk(mu, sigma, u_star)
    return np.where(cap > 0, risk, 1.0)


# Largest mean utilisation the Beta rule accepts at a given spread: max mu with risk(mu, sigma) <= eps,
# by bisection (risk grows with mu at fixed sigma). The Beta only exists for sigma^2 < mu (1 - mu), i.e.
# mu > (1 - sqrt(1 - 4 sigma^2)) / 2, so the search starts there. Used to repair a plan the linear form
# let through.
def beta_max_mean(sigma: float | np.ndarray, u_star: float, eps: float, iters: int = 50) -> Any:
    """Element-wise over an array of spreads (one bisection for all of them), or for one float."""
    s = np.atleast_1d(np.asarray(sigma, dtype=float))
    ok = s < 0.5
    lo = np.where(ok, (1.0 - np.sqrt(np.maximum(1.0 - 4.0 * s * s, 0.0))) / 2.0 + 1e-9, 0.0)
    hi = np.ones_like(s)
    feasible = ok & (safe_overload_risk(lo, s, u_star) <= eps)
    for _ in range(iters):
        mid = (lo + hi) / 2
        good = safe_overload_risk(mid, s, u_star) <= eps
        lo, hi = np.where(good, mid, lo), np.where(good, hi, mid)
    out = np.where(feasible, lo, 0.0)
    return float(out[0]) if np.ndim(sigma) == 0 else out


def bound_comparison(u_star: float, eps: float, sigmas: tuple[float, ...] = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2)
                     ) -> list[dict[str, float]]:
    """How conservative the normal form is against the Beta rule: the largest mean utilisation each
    accepts at a given spread (ratios of capacity)."""
    z = z_value(eps)
    return [{"sigma": s, "normal_max_mean": max(u_star - z * s, 0.0), "beta_max_mean": beta_max_mean(s, u_star, eps)}
            for s in sigmas]
