"""``trimaran-lroc``: Trimaran LowRiskOverCommitment, peers.md. L = the node's pods' max(limit, request)
(``SimView.limited``). On the openb trace pods have requests and no limits, so L = R and riskLimit = 0;
with L- = R- < C the load term p = F(R-/C) / F(L-/C) = 1 too, and the plugin scores every node 100 (random
tie-break among them): that is the formula, reported as such. The Google scenario's pods carry their Borg
limits, so there the plugin has something to weigh."""

from __future__ import annotations

import numpy as np
from scipy.special import betainc

from benchmarks.sim.engine import SimPod, SimView
from benchmarks.sim.policies.peer import PeerPolicy

SMOOTHING_WINDOW_SIZE = 5  # W
RISK_LIMIT_WEIGHT = 0.5  # w


# Beta CDF with moment matching: mu = avg / C, sigma = (std / C) sqrt(W), capped at sqrt(0.99 mu (1 - mu));
# t = mu (1 - mu) / sigma^2 - 1, alpha = mu t, beta = (1 - mu) t; F(x) = I_x(alpha, beta). sigma = 0 -> step at mu.
def load_cdf(x: np.ndarray, avg: np.ndarray, std: np.ndarray, capacity: np.ndarray,
             window: int = SMOOTHING_WINDOW_SIZE) -> np.ndarray:
    mu = np.clip(avg / capacity, 0.0, 1.0)
    sigma = np.minimum((std / capacity) * np.sqrt(window), np.sqrt(0.99 * mu * (1.0 - mu)))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = mu * (1.0 - mu) / (sigma * sigma) - 1.0
        cdf = betainc(mu * t, (1.0 - mu) * t, np.clip(x, 0.0, 1.0))
    step = np.where(x >= mu, 1.0, 0.0)
    return np.where((sigma > 0) & np.isfinite(cdf), cdf, step)


# Per resource, R = requests incl. pod (capped at C), L = sum max(limit, request) incl. pod, R-, L- without it:
# riskLimit = (L - C) / (L - R) if L > C else 0; p = F(R- / C), divided by F(L- / C) when L- < C;
# riskLoad = 1 - p; risk = w riskLimit + (1 - w) riskLoad; score = round(100 (1 - max_r risk)).
def lroc_score(requested: np.ndarray, limits: np.ndarray, pod_request: np.ndarray, pod_limit: np.ndarray,
               avg: np.ndarray, std: np.ndarray, capacity: np.ndarray, w: float = RISK_LIMIT_WEIGHT) -> np.ndarray:
    r_without, l_without = requested, limits
    r_with = np.minimum(requested + pod_request, capacity)
    l_with = limits + np.maximum(pod_limit, pod_request)
    with np.errstate(divide="ignore", invalid="ignore"):
        risk_limit = np.where(l_with > capacity, (l_with - capacity) / (l_with - r_with), 0.0)
    p = load_cdf(r_without / capacity, avg, std, capacity)
    denom = load_cdf(l_without / capacity, avg, std, capacity)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(l_without < capacity, np.where(denom > 0, p / denom, 1.0), p)
    risk_load = 1.0 - np.clip(p, 0.0, 1.0)
    risk = w * np.clip(risk_limit, 0.0, 1.0) + (1.0 - w) * risk_load
    return np.floor(100.0 * (1.0 - np.atleast_2d(risk).max(axis=-1)) + 0.5).astype(np.int64)


class LowRiskOverCommitment(PeerPolicy):
    name = "trimaran-lroc"

    def score(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        if pod.cpu == 0 and pod.memory == 0:
            return np.zeros(len(idx), dtype=np.int64)  # best-effort pods score 0
        req = sim.requested[idx]
        return lroc_score(req, sim.limited[idx], pod.requests, np.maximum(pod.limits, pod.requests),
                          self.mean[idx] + self.recent_extra[idx], self.std[idx],
                          sim.alloc[idx])
