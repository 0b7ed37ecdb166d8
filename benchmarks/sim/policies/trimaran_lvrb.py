"""``trimaran-lvrb``: Trimaran LoadVariationRiskBalancing, peers.md."""

from __future__ import annotations

import numpy as np

from benchmarks.sim.engine import SimPod, SimView
from benchmarks.sim.policies.peer import PeerPolicy

SAFE_VARIANCE_MARGIN = 1.0
SAFE_VARIANCE_SENSITIVITY = 1.0


# Per resource: mu = clamp((avg + req) / C, 0, 1); sigma = clamp(std / C, 0, 1);
# sigma' = clamp(margin * sigma^(1/sensitivity), 0, 1); risk = (mu + sigma') / 2; score = 100 (1 - risk);
# node score = round(min over cpu and memory). Vector: C=100, req=10, avg=40, std=36 -> 57.
def lvrb_score(avg: np.ndarray, std: np.ndarray, request: np.ndarray, capacity: np.ndarray,
               margin: float = SAFE_VARIANCE_MARGIN, sensitivity: float = SAFE_VARIANCE_SENSITIVITY) -> np.ndarray:
    mu = np.clip((avg + request) / capacity, 0.0, 1.0)
    sigma = np.clip(std / capacity, 0.0, 1.0)
    sigma_adj = np.clip(margin * sigma ** (1.0 / sensitivity), 0.0, 1.0)
    risk = (mu + sigma_adj) / 2.0
    per_resource = 100.0 * (1.0 - risk)
    return np.floor(np.atleast_2d(per_resource).min(axis=-1) + 0.5).astype(np.int64)


class LoadVariationRiskBalancing(PeerPolicy):
    name = "trimaran-lvrb"

    def score(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        # pods bound since the last report are added to the measured average (peers.md, Trimaran metrics)
        return lvrb_score(self.mean[idx] + self.recent_extra[idx], self.std[idx], pod.requests, sim.alloc[idx])
