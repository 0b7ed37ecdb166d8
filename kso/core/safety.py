"""The safe overload bound: the probability that a node's utilisation exceeds U*.

Shared by the safe agent (per call) and the optimizer (per plan), so both judge a node the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kso.core.settings import setting


@dataclass
class SafeBoundSettings:
    """U* and eps, the safe bound's two settings (kube-safe-scheduler's variables): declared here only, so the
    safe agent (decisions.agents.safe.SafeParams) and the plan (optimizer.settings.PlanSettings), which both
    inherit them, judge nodes alike."""

    utilization: int = setting("SAFEUTILIZATION", 90, kind="percent",
                               help="U*: the utilisation a node should stay under (safe agent and plans), percent")
    percentile: int = setting("SAFEPERCENTILE", 30, kind="percent", help="eps: the risk of passing U* that is accepted, percent")

    @property
    def u_star(self) -> float:
        return self.utilization / 100.0

    @property
    def eps(self) -> float:
        return self.percentile / 100.0


# Moment-matched Beta (kube-safe-scheduler): utilisation U ~ Beta(alpha, beta) with mean mu and
# variance sigma^2:
#     t = mu (1 - mu) / sigma^2 - 1,  alpha = mu t,  beta = (1 - mu) t
#     rank = P(U <= U*) = I_{U*}(alpha, beta)          (regularised incomplete beta)
# Special cases, as the seed: mu == 0, or sigma == 0 and mu <= U*  -> rank 1;
#                             sigma == 0 and mu > U*               -> rank 0;
#                             sigma^2 >= mu (1 - mu) (no Beta fits) -> rank 0;  NaN -> 1.
# A sigma so small that t is not finite (sigma^2 underflows, or mu (1 - mu) / sigma^2 overflows) is sigma == 0:
# its limit. Left to betainc(inf, inf) it would be NaN, read as rank 1, i.e. risk 0 even for mu > U*.
# risk = 1 - rank.
def point_mass(sigma: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Where the rule reads the utilisation as a point (no spread): sigma == 0, or t = mu (1 - mu) / sigma^2 - 1 not
    finite for a non-NaN sigma (sigma^2 underflowed, or the quotient overflowed)."""
    sigma = np.asarray(sigma, dtype=float)
    return (sigma == 0) | (~np.isfinite(t) & ~np.isnan(sigma))


def safe_overload_risk(mu: np.ndarray, sigma: np.ndarray, u_star: float) -> np.ndarray:
    """P(utilisation > u_star) under the moment-matched Beta; mu, sigma already clamped to [0, 1]. The Beta CDF
    (betainc, the costly part) is evaluated only where the rule uses it: where mu = 0, sigma = 0 or no Beta fits
    (sigma^2 >= mu (1 - mu), e.g. a node at 100%), the rule's special cases decide."""
    mu, sigma = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(sigma, dtype=float))
    var, spread, fits, point = beta_cases(mu, sigma)
    if fits.all():
        return fitted_risk(mu, var, spread, u_star)
    risk = special_risk(mu, point, var, spread, u_star)
    if fits.any():
        risk[fits] = fitted_risk(mu[fits], var[fits], spread[fits], u_star)
    return risk


def beta_cases(mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sigma^2, mu (1 - mu), where a Beta fits, where the rule reads a point mass): the split between the rule's
    Beta CDF and its special cases, the same for every caller."""
    var = sigma * sigma
    spread = mu * (1.0 - mu)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = spread / var - 1.0
    point = point_mass(sigma, t)
    return var, spread, (mu != 0) & ~point & (var < spread), point


def fitted_risk(mu: np.ndarray, var: np.ndarray, spread: np.ndarray, u_star: float) -> np.ndarray:
    """The risk where a Beta fits (mu != 0, not a point mass, var < spread = mu (1 - mu)): there none of the special
    cases applies, so it is 1 - I_{U*}(alpha, beta), NaN read as rank 1."""
    # scipy is imported at the first risk, not with the module: every command's configuration check reads this
    # module's settings (kso.cli.check_configuration) and has no use for it.
    from scipy.special import betainc

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = spread / var - 1.0
        rank = betainc(mu * t, (1.0 - mu) * t, u_star)
    return 1.0 - np.where(np.isnan(rank), 1.0, rank)


def special_risk(mu: np.ndarray, point: np.ndarray, var: np.ndarray, spread: np.ndarray, u_star: float) -> np.ndarray:
    """The rule's special cases in its order, starting from what its NaN rule makes of a value no case covers
    (rank 1: NaN inputs); every finite entry where no Beta fits meets one of them."""
    rank = np.where(var >= spread, 0.0, 1.0)
    rank = np.where(point & (mu > u_star), 0.0, rank)
    rank = np.where((mu == 0) | (point & (mu <= u_star)), 1.0, rank)
    return 1.0 - rank


# safe-overload priority: rf = min(risk / eps, 1); score = 0 if rf >= 1 else int((1 - sqrt(rf)) * 10).
# Truncation is the seed's: a riskless node scores 9, not 10.
def overload_score(risk: np.ndarray, eps: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        rf = np.minimum(risk / eps, 1.0) if eps > 0 else np.where(risk > 0, 1.0, 0.0)
    return np.where(rf >= 1.0, 0, ((1.0 - np.sqrt(rf)) * 10.0).astype(int))


# safe-balance priority: obj = (mu + sqrt(sigma)) / 2; score = int((1 - obj) * 10 + 0.5).
# A NaN mu or sigma (no statistics for that resource) scores 0, the lowest score: the safe agent gives a node
# with no valid resource 0 too (SafeAgent._combine), and casting NaN to int is undefined (numpy warns).
def balance_score(mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        raw = (1.0 - (mu + np.sqrt(sigma)) / 2.0) * 10.0 + 0.5
    return np.where(np.isnan(raw), 0.0, raw).astype(int)


# Bounded holding. The rule above refuses a pod on every node for as long as every node it is offered stays hot,
# and nothing else brings that pod a node: the cluster-autoscaler simulates scheduling without the scheduler's
# extenders (kubernetes/autoscaler#506), so a pod that fits a ready node by requests orders no new node, and the
# pod would stay Pending for as long as the cluster is busy (in the trace replay, many pods never ran).
# So a pod refused on EVERY node it is offered, pending for at least max_hold_s (now - its creationTimestamp),
# is passed to the node(s) of least risk, the others keeping their reasons:
#     worst_i  = max over resources r of P(util_i,r > U*)        (the risk the rule refused node i for)
#     released = { i : worst_i <= min_j worst_j + RELEASE_TOLERANCE }
# A pod without a usable creationTimestamp is never released (the rule alone decides, as before). max_hold_s = 0
# releases at once (the filter then never refuses every node, it only narrows them to the least risk); inf never
# releases (the rule alone). The hold is a delay, not a guarantee: it leaves time for load to fall or pods to leave
# before an overload is accepted, and it bounds how long the filter alone keeps a pod from running.
RELEASE_TOLERANCE = 1e-9  # risks this close to the least are equal (far above betainc's rounding, ~1e-15)


def held_past(created_s: float | None, now_s: float, max_hold_s: float) -> bool:
    """Whether a pod created at ``created_s`` (epoch seconds; None: unknown) has been pending for at least
    ``max_hold_s`` at ``now_s``."""
    return created_s is not None and now_s - created_s >= max_hold_s


def least_risk(worst: np.ndarray) -> np.ndarray:
    """The nodes to release a held pod to: bool mask of the entries of ``worst`` (each node's worse-resource risk,
    no NaN) within RELEASE_TOLERANCE of the least."""
    return worst <= worst.min() + RELEASE_TOLERANCE
