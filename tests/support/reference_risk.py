"""The safe overload bound as written first (kube-safe-scheduler's order of operations): the reference
kso.core.safety.safe_overload_risk is held to."""

from __future__ import annotations

import numpy as np
from scipy.special import betainc

from kso.core.safety import point_mass


def reference_safe_overload_risk(mu: np.ndarray, sigma: np.ndarray, u_star: float) -> np.ndarray:
    """P(utilisation > u_star) under the moment-matched Beta, every case computed and the rule's special cases
    applied after, as kube-safe-scheduler writes it: what kso.core.safety.safe_overload_risk gives, value for value
    and bit for bit, running the Beta CDF only where the rule uses it."""
    mu = np.asarray(mu, dtype=float)
    sigma = np.asarray(sigma, dtype=float)
    var = sigma * sigma
    spread = mu * (1.0 - mu)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = spread / var - 1.0
        alpha = mu * t
        beta = (1.0 - mu) * t
        rank = betainc(alpha, beta, u_star)
    point = point_mass(sigma, t)
    rank = np.where(np.isnan(rank), 1.0, rank)
    rank = np.where(var >= spread, 0.0, rank)
    rank = np.where(point & (mu > u_star), 0.0, rank)
    rank = np.where((mu == 0) | (point & (mu <= u_star)), 1.0, rank)
    return 1.0 - rank
