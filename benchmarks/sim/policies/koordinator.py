"""``koordinator``: Koordinator LoadAware filter + score, peers.md."""

from __future__ import annotations

import numpy as np

from benchmarks.sim.engine import SimPod, SimView
from benchmarks.sim.policies.peer import PeerPolicy

ESTIMATE_FACTOR = np.array([85.0, 70.0])  # percent of max(limit, request): cpu, memory
DEFAULT_ESTIMATE = np.array([250.0, 200.0 * 1024 * 1024])  # q = 0 -> 250m cpu / 200 MiB
THRESHOLD = np.array([65.0, 95.0])  # filter: percent of allocatable, cpu and memory
SCORE_WEIGHTS = np.array([1, 1])


# q = max(limit, request); q = 0 -> 250m / 200 MiB; else min(round(q f / 100), limit) (no limit -> no cap).
def pod_estimate(request: np.ndarray, limit: np.ndarray | None = None) -> np.ndarray:
    limit = np.zeros_like(request) if limit is None else limit
    q = np.maximum(limit, request)
    est = np.floor(q * ESTIMATE_FACTOR / 100.0 + 0.5)
    est = np.where(limit > 0, np.minimum(est, limit), est)
    return np.where(q == 0, DEFAULT_ESTIMATE, est)


# Filter: reject when round(100 E / allocatable) > threshold for any resource, E = node estimate incl. the pod.
def load_aware_filter(estimate: np.ndarray, alloc: np.ndarray, threshold: np.ndarray = THRESHOLD) -> np.ndarray:
    return ~(np.floor(100.0 * estimate / alloc + 0.5) > threshold).any(axis=1)


# Score per resource: (allocatable - E) * 100 // allocatable (0 if E > allocatable); weighted mean (integer).
def load_aware_score(estimate: np.ndarray, alloc: np.ndarray) -> np.ndarray:
    per = np.where(estimate > alloc, 0, np.floor((alloc - estimate) * 100.0 / alloc))
    return ((per * SCORE_WEIGHTS).sum(axis=1) // SCORE_WEIGHTS.sum()).astype(np.int64)


class LoadAware(PeerPolicy):
    name = "koordinator"

    def __init__(self, seed: int = 0, sample: bool = True, cpu_threshold: float = THRESHOLD[0]) -> None:
        super().__init__(seed, sample)
        self.threshold = np.array([cpu_threshold, THRESHOLD[1]])
        if cpu_threshold != THRESHOLD[0]:  # a non-default knob is named in every table
            self.name = f"koordinator[cpu-threshold={cpu_threshold:g}]"

    def observe(self, sim: SimView) -> None:
        super().observe(sim)
        # koordlet reports the latest usage (the last 5-minute step here; fresh, so never the 180 s stale case)
        self.mean, self.has_metrics = sim.last_usage()

    def pod_estimate(self, pod: SimPod) -> np.ndarray:
        return pod_estimate(pod.requests, pod.limits)

    def _node_estimate(self, pod: SimPod, idx: np.ndarray) -> np.ndarray:
        return self.mean[idx] + self.recent_extra[idx] + self.pod_estimate(pod)

    def extra_filter(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        return load_aware_filter(self._node_estimate(pod, idx), sim.alloc[idx], self.threshold)

    def score(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        return load_aware_score(self._node_estimate(pod, idx), sim.alloc[idx])
