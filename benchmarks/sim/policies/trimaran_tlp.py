"""``trimaran-tlp``: Trimaran TargetLoadPacking (CPU only), peers.md."""

from __future__ import annotations

import numpy as np

from benchmarks.sim.engine import SimPod, SimView
from benchmarks.sim.policies.peer import PeerPolicy

TARGET_UTILIZATION = 40.0  # X, percent
DEFAULT_PREDICTED_CPU_MILLI = 1000.0


# Predicted CPU of a pod = its limit, else round(1.5 * request), else 1000m (trace pods have no limits).
def predicted_cpu(request_milli: float, limit_milli: float = 0.0) -> float:
    if limit_milli > 0:
        return limit_milli
    if request_milli > 0:
        return float(np.round(1.5 * request_milli))
    return DEFAULT_PREDICTED_CPU_MILLI


# U = 100 (A + B + M) / capacity; score: U <= X: round((100 - X) U / X + X); X < U <= 100:
# round(X (100 - U) / (100 - X)); U > 100: 0. No metrics -> 0. (np.floor(x + 0.5) = Go's math.Round here.)
def tlp_score(measured: np.ndarray, incoming: float, recent: np.ndarray, capacity: np.ndarray,
              target: float = TARGET_UTILIZATION, has_metrics: bool = True) -> np.ndarray:
    if not has_metrics:
        return np.zeros(len(capacity), dtype=np.int64)
    u = 100.0 * (measured + incoming + recent) / capacity
    low = np.floor((100.0 - target) * u / target + target + 0.5)
    high = np.floor(target * (100.0 - u) / (100.0 - target) + 0.5)
    return np.where(u > 100.0, 0, np.where(u <= target, low, high)).astype(np.int64)


class TargetLoadPacking(PeerPolicy):
    name = "trimaran-tlp"

    def __init__(self, seed: int = 0, sample: bool = True, target: float = TARGET_UTILIZATION) -> None:
        super().__init__(seed, sample)
        self.target = target
        if target != TARGET_UTILIZATION:  # a non-default knob is named in every table
            self.name = f"trimaran-tlp[target={target:g}]"

    def pod_estimate(self, pod: SimPod) -> np.ndarray:
        return np.array([predicted_cpu(pod.cpu, pod.cpu_limit), 0.0])

    def score(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        return tlp_score(self.mean[idx, 0], predicted_cpu(pod.cpu, pod.cpu_limit), self.recent_extra[idx, 0],
                         sim.alloc[idx, 0], target=self.target, has_metrics=self.has_metrics)
