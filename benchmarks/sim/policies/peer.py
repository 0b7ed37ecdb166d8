"""Shared shape of the peer scoring plugins: kube-scheduler's filters and sampling, then the plugin's own
score in place of the default resource scores (NodeResourcesFit LeastAllocated and BalancedAllocation
disabled, as the Trimaran and Koordinator example profiles deploy them); TaintToleration / NodeAffinity /
ImageLocality stay (constant on this trace). Metrics as load-watcher / koordlet would report them, from
the history the engine exposes."""

from __future__ import annotations

import numpy as np

from benchmarks.sim.engine import Policy, SimPod, SimView
from benchmarks.sim.policies.framework import Framework

LOAD_WATCHER_WINDOW_S = 900.0  # avg_over_time(...[15m])


class PeerPolicy(Policy):
    mode = "in-process model of the peer plugin (peers.md)"
    weight = 1  # the plugin's score weight in its profile

    def __init__(self, seed: int = 0, sample: bool = True) -> None:
        super().__init__(seed)
        self.framework = Framework(seed, sample)
        self.mean = self.std = np.zeros((0, 2))
        self.has_metrics = False
        self.recent_extra = np.zeros((0, 2))  # per node: what pods bound since the last report add

    def observe(self, sim: SimView) -> None:
        window = max(1, int(round(LOAD_WATCHER_WINDOW_S / sim.step_s)))
        self.mean, self.std, self.has_metrics = sim.window_stats(window)
        self.recent_extra = np.zeros_like(sim.alloc)  # a new report covers everything bound before it

    def bound(self, pod: SimPod, node: str, sim: SimView) -> None:
        self.recent_extra[sim.node_index[node]] += self.pod_estimate(pod)

    def pod_estimate(self, pod: SimPod) -> np.ndarray:
        """What a just-bound pod adds to its node until metrics show it (cpu milli, memory bytes)."""
        return np.array([pod.cpu, pod.memory])

    def extra_filter(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        return np.ones(len(idx), dtype=bool)

    def score(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        idx = self.framework.feasible(pod, sim)
        if len(idx):
            idx = idx[self.extra_filter(pod, sim, idx)]
        if len(idx) == 0:
            return None
        if len(idx) == 1:
            return sim.node_names[int(idx[0])]
        total = self.framework.static_scores(pod, sim, idx) + self.weight * self.score(pod, sim, idx)
        return sim.node_names[self.framework.pick(idx, total)]
