"""``default``: kube-scheduler's default profile (filters, sampling, LeastAllocated + BalancedAllocation +
TaintToleration + NodeAffinity + ImageLocality with their weights, random tie-break), seeded.
``default-most``: the same profile with ``NodeResourcesFit`` scoringStrategy MostAllocated (what GKE's
optimize-utilization profile and most cost-minded users pick)."""

from __future__ import annotations

from benchmarks.sim.engine import Policy, SimPod, SimView
from benchmarks.sim.policies.framework import Framework


class DefaultScheduler(Policy):
    name = "default"
    mode = "in-process model of kube-scheduler's default profile (NodeResourcesFit LeastAllocated)"
    strategy = "LeastAllocated"

    def __init__(self, seed: int = 0, sample: bool = True) -> None:
        super().__init__(seed)
        self.framework = Framework(seed, sample)

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        idx = self.framework.feasible(pod, sim)
        if len(idx) == 0:
            return None
        if len(idx) == 1:  # one feasible node: chosen without scoring
            return sim.node_names[int(idx[0])]
        scores = self.framework.default_scores(pod, sim, idx, self.strategy)
        return sim.node_names[self.framework.pick(idx, scores)]


class DefaultMostAllocated(DefaultScheduler):
    name = "default-most"
    mode = "in-process model of kube-scheduler's default profile with NodeResourcesFit MostAllocated"
    strategy = "MostAllocated"
