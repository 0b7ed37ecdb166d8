"""kube-scheduler's framework as every policy runs inside it: the default profile's filters, the node
sampling (percentageOfNodesToScore) with its rotating start index, the default score plugins, and the
random tie-break. Formulas from ../shared/docs/extender-protocol.md (Kubernetes 1.33-1.36)."""

from __future__ import annotations

import numpy as np

from benchmarks.sim.engine import SimPod, SimView

MIN_FEASIBLE_NODES = 100  # minFeasibleNodesToFind
MIN_PERCENTAGE = 5  # minFeasibleNodesPercentageToFind
NONZERO_CPU_MILLI = 100.0  # non-zero request defaults for scoring
NONZERO_MEMORY_BYTES = 200.0 * 1024 * 1024
MAX_NODE_SCORE = 100
# Default profile score weights (extender-protocol.md).
WEIGHT_TAINT_TOLERATION = 3
WEIGHT_NODE_AFFINITY = 2
WEIGHT_NODE_RESOURCES_FIT = 1
WEIGHT_BALANCED_ALLOCATION = 1
WEIGHT_IMAGE_LOCALITY = 1


# numFeasibleNodesToFind: N < 100 -> N; else p = max(5, 50 - N/125) percent (integer division, as Go),
# k = max(100, N * p / 100).
def feasible_nodes_to_find(n_nodes: int) -> int:
    if n_nodes < MIN_FEASIBLE_NODES:
        return n_nodes
    percentage = max(MIN_PERCENTAGE, 50 - n_nodes // 125)
    return max(MIN_FEASIBLE_NODES, n_nodes * percentage // 100)


def _tolerated(pod: SimPod, key: str, effect: str) -> bool:
    return any(k == key and (e == "" or e == effect) for k, e in pod.tolerations)


class Framework:
    """The in-tree part of one kube-scheduler instance: filters + sampling, default scores, tie-break.
    Holds the rotating start index and the tie-break RNG, so each policy owns one."""

    def __init__(self, seed: int = 0, sample: bool = True) -> None:
        self.rng = np.random.default_rng(seed)
        self.sample = sample
        self.next_start = 0
        self._static: tuple[np.ndarray, np.ndarray] | None = None

    def _node_taints(self, sim: SimView) -> tuple[np.ndarray, np.ndarray]:
        """(has a NoSchedule/NoExecute taint, count of PreferNoSchedule taints) per node, for pods with no
        tolerations (all the trace's pods)."""
        if self._static is None:  # the nodes' own taints never change; the memory-pressure taint does (filter_mask)
            hard = np.array([any(e in ("NoSchedule", "NoExecute") for _, _, e in t) for t in sim.scenario_taints],
                            dtype=bool)
            soft = np.array([sum(e == "PreferNoSchedule" for _, _, e in t) for t in sim.scenario_taints], dtype=np.int64)
            self._static = hard, soft
        return self._static

    # Filters in order: NodeUnschedulable, TaintToleration (NoSchedule/NoExecute, the memory-pressure taint
    # included), NodeAffinity (nodeSelector), NodeResourcesFit (pod count + 1 <= allocatable pods; request <=
    # allocatable - requested per resource).
    def filter_mask(self, pod: SimPod, sim: SimView) -> np.ndarray:
        free = sim.alloc - sim.requested
        ok = (free[:, 0] >= pod.cpu) & (free[:, 1] >= pod.memory) & (sim.pod_count + 1 <= sim.max_pods)
        ok &= ~sim.unschedulable
        hard, _ = self._node_taints(sim)
        if pod.tolerations:
            hard = np.array([any(e in ("NoSchedule", "NoExecute") and not _tolerated(pod, k, e) for k, _, e in t)
                             for t in sim.taints], dtype=bool)
        else:
            hard = hard | sim.no_schedule
        ok &= ~hard
        if pod.node_selector:
            ok &= np.array([all(lbl.get(k) == v for k, v in pod.node_selector.items()) for lbl in sim.labels], dtype=bool)
        return ok

    def feasible(self, pod: SimPod, sim: SimView) -> np.ndarray:
        """Indices of the feasible nodes kube-scheduler would score: starting at the rotating index, the
        first k feasible ones (k = feasible_nodes_to_find(N)); the start advances by the nodes processed."""
        mask = self.filter_mask(pod, sim)
        n = len(mask)
        if not self.sample or n < MIN_FEASIBLE_NODES:
            return np.flatnonzero(mask)
        want = feasible_nodes_to_find(n)
        order = (self.next_start + np.arange(n)) % n
        hits = np.flatnonzero(mask[order])
        if len(hits) > want:
            chosen = order[hits[:want]]
            processed = int(hits[want - 1]) + 1
        else:
            chosen = order[hits]
            processed = n
        self.next_start = (self.next_start + processed) % n
        return chosen

    # NodeResourcesFit LeastAllocated: per resource s = (alloc - req) * 100 // alloc (0 if req > alloc), req =
    # node's requests + the pod's, both with the non-zero defaults (100m, 200 MiB); score = weighted mean
    # (cpu 1, memory 1), integer division.
    @staticmethod
    def least_allocated(pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        pod_nz = np.array([pod.cpu or NONZERO_CPU_MILLI, pod.memory or NONZERO_MEMORY_BYTES])
        alloc = sim.alloc[idx]
        req = sim.requested[idx] + pod_nz  # trace pods all request cpu and memory, so requested == non-zero requested
        per = np.where(req > alloc, 0, np.floor((alloc - req) * MAX_NODE_SCORE / alloc))
        return (per.sum(axis=1) // 2).astype(np.int64)

    # NodeResourcesFit MostAllocated: per resource s = req * 100 // alloc (0 if req > alloc), req with the non-zero
    # defaults; score = weighted mean (cpu 1, memory 1), integer division.
    @staticmethod
    def most_allocated(pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        pod_nz = np.array([pod.cpu or NONZERO_CPU_MILLI, pod.memory or NONZERO_MEMORY_BYTES])
        alloc = sim.alloc[idx]
        req = sim.requested[idx] + pod_nz
        per = np.where(req > alloc, 0, np.floor(req * MAX_NODE_SCORE / alloc))
        return (per.sum(axis=1) // 2).astype(np.int64)

    # BalancedAllocation: f_r = min(1, (requested_r + pod_r) / alloc_r) with actual requests;
    # std = |f_cpu - f_mem| / 2; score = int((1 - std) * 100). Pods with no requests score 0 (skipped).
    @staticmethod
    def balanced_allocation(pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        if pod.cpu == 0 and pod.memory == 0:
            return np.zeros(len(idx), dtype=np.int64)
        f = np.minimum(1.0, (sim.requested[idx] + (pod.cpu, pod.memory)) / sim.alloc[idx])
        std = np.abs(f[:, 0] - f[:, 1]) / 2.0
        return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)

    # TaintToleration score: count of intolerable PreferNoSchedule taints, normalised reversed:
    # 100 - count * 100 // max_count (all 100 when max_count == 0).
    def taint_toleration(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        _, soft = self._node_taints(sim)
        counts = soft[idx]
        if pod.tolerations:
            counts = np.array([sum(e == "PreferNoSchedule" and not _tolerated(pod, k, e) for k, _, e in sim.taints[i])
                               for i in idx.tolist()], dtype=np.int64)
        top = counts.max() if len(counts) else 0
        if top == 0:
            return np.full(len(idx), MAX_NODE_SCORE, dtype=np.int64)
        return MAX_NODE_SCORE - counts * MAX_NODE_SCORE // top

    def static_scores(self, pod: SimPod, sim: SimView, idx: np.ndarray) -> np.ndarray:
        """The default plugins that do not look at resources: TaintToleration x3, NodeAffinity x2 (no preferred
        terms in the trace -> 0), ImageLocality x1 (no images in the trace -> 0), PodTopologySpread and
        InterPodAffinity (no constraints, no owners -> 0)."""
        return WEIGHT_TAINT_TOLERATION * self.taint_toleration(pod, sim, idx)

    def default_scores(self, pod: SimPod, sim: SimView, idx: np.ndarray, strategy: str = "LeastAllocated") -> np.ndarray:
        """The default profile's total over ``idx`` (NodeResourcesFit's scoring strategy as given)."""
        fit = self.most_allocated if strategy == "MostAllocated" else self.least_allocated
        return (self.static_scores(pod, sim, idx)
                + WEIGHT_NODE_RESOURCES_FIT * fit(pod, sim, idx)
                + WEIGHT_BALANCED_ALLOCATION * self.balanced_allocation(pod, sim, idx))

    def pick(self, idx: np.ndarray, scores: np.ndarray) -> int:
        """Uniform random choice among the nodes with the highest total."""
        best = np.flatnonzero(scores == scores.max())
        return int(idx[best[0] if len(best) == 1 else self.rng.choice(best)])
