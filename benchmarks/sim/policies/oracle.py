"""``oracle``: a reference point for the frontier, not a scheduler anyone could run. It reads each pod's
true usage over the next hour from the scenario (the hidden truth no other policy sees) and packs pods
so that no node's demand passes U* during that hour, on as few nodes as it can.

Every step, with the window W = this step and the ``horizon_steps`` - 1 after it (cut at the replay's end):

- a node's projected demand over W, per step and resource = sum over its bound pods of the pod's true
  usage (usage ratio x request) at the steps before the pod's departure (the oracle knows departures too);
- the queued pods are taken in decreasing order of their peak usage over W (the larger of cpu and memory,
  each as a share of the pool's mean node). A node can take a pod when it passes kube-scheduler's
  filters (ready, requests fit, pod slots, no NoSchedule taint) and its projected demand plus the pod's
  stays <= U* x allocatable at every step of W for both resources. Among those, best fit: a node that
  already holds pods, the one left with the least room (the smaller of min over W and resources of
  (U* x allocatable - demand) / allocatable and of min over resources of (allocatable - requests) /
  allocatable, which the autoscaler's scale-down reads); when none holds pods, the largest empty node
  (fewest nodes), pool order on ties;
- a pod no node can take under U* stays queued (``overflow="pend"``, the default), as a scheduler would
  leave it pending; ``overflow="least-peak"`` places it where its overshoot over W is smallest instead.

The cluster-autoscaler adds nodes only for pods that fit nowhere by requests, and a pod the oracle leaves
queued fits by requests, so on its own the oracle's refused demand never gets a node: it would look cheap by
refusing pods. With ``capacity="placeholder"`` (the default) it shows that demand the way kso's placeholder
policy does (``Policy.capacity_requests``): one placeholder per pod it refused in the step and that is still
pending, requesting that pod's requests, avoiding every ready node (none could take the pod under U*); the
autoscaler holds it on a node being provisioned or orders a new one. ``capacity="none"``: no signal (the
reference as it was first measured, refusing pods the autoscaler never sees).

Knobs (``oracle:u_star=0.8;horizon_steps=24;overflow=least-peak;capacity=none``): ``u_star`` (default 0.9,
the report's U*), ``horizon_steps`` (default 12: one hour), ``overflow``, ``capacity``.

Nodes come from the same cluster-autoscaler model as every policy's, so the oracle's cost and harm are
measured by the same rules; only its knowledge of the future is out of reach.
"""

from __future__ import annotations

import numpy as np

from benchmarks.sim.engine import CapacityRequest, Policy, SimPod, SimView
from benchmarks.sim.policies.framework import Framework

HORIZON_STEPS = 12  # one hour of 5-minute steps
U_STAR = 0.9
OVERFLOW = {"pend": "a pod no node can take under U* stays queued",
            "least-peak": "a pod no node can take under U* goes where its window's overshoot is smallest"}
CAPACITY = {"placeholder": "a placeholder per pod it refuses shows that demand to the autoscaler",
            "none": "no capacity signal: the pods it refuses stay pending unseen by the autoscaler"}


class Oracle(Policy):
    name = "oracle"
    mode = ("reference, not a runnable scheduler: knows each pod's true usage over the next hour and packs best-fit-"
            "decreasing by that hour's peak, refusing any node whose demand would pass U*")

    def __init__(self, seed: int = 0, sample: bool = True, u_star: float = U_STAR,
                 horizon_steps: float = HORIZON_STEPS, overflow: str = "pend", capacity: str = "placeholder") -> None:
        super().__init__(seed)
        if overflow not in OVERFLOW:
            raise ValueError(f"oracle: overflow must be one of {', '.join(OVERFLOW)}, not {overflow!r}")
        if capacity not in CAPACITY:
            raise ValueError(f"oracle: capacity must be one of {', '.join(CAPACITY)}, not {capacity!r}")
        self.capacity = capacity
        self.overflow = overflow
        if not 0.0 < u_star <= 1.0:
            raise ValueError(f"oracle: u_star must be in (0, 1], not {u_star}")
        if horizon_steps < 1:
            raise ValueError(f"oracle: horizon_steps must be >= 1, not {horizon_steps}")
        self.u_star = float(u_star)
        self.horizon = int(horizon_steps)
        self.framework = Framework(seed, sample=False)  # the filters only; the oracle scores every node
        self.proj = np.zeros((0, 0, 2))  # (N, w, 2) projected demand over the window, live
        self.plan: dict[int, int] = {}  # pod index -> node, this step's best-fit-decreasing assignment
        self.refused: set[int] = set()  # queued pods no node could take under U* at this step
        self.declined: set[int] = set()  # pods ``place`` answered None for in this step (their placeholders)
        self.extra: dict[str, float] = {"placeholders": 0}
        self.lo = 0
        self.hi = 0
        if overflow != "pend":
            self.mode += f"; {OVERFLOW[overflow]}"
        self.mode += f"; {CAPACITY[capacity]}"

    # ---- the truth the oracle reads ----
    def pod_window(self, pod: SimPod, sim: SimView) -> np.ndarray:
        """(w, 2) the pod's true demand (cpu milli, memory bytes) over the window, 0 from its departure on."""
        ratio = np.nan_to_num(sim._scenario.pod_usage[pod.index, self.lo: self.hi, :].astype(float))
        use = ratio * np.array([pod.cpu, pod.memory])
        use[max(0, pod.departure_step - self.lo):] = 0.0
        return use

    def observe(self, sim: SimView) -> None:
        s = sim._scenario
        self.lo, self.hi = sim.step, min(sim.step + self.horizon, sim.n_steps)
        w = self.hi - self.lo
        self.proj = np.zeros((len(sim.node_names), w, 2))
        pods = list(sim.running.values())
        if pods and w:
            idx = np.fromiter((p.index for p in pods), dtype=np.int64, count=len(pods))
            node = np.fromiter((p.node for p in pods), dtype=np.int64, count=len(pods))
            dep = np.fromiter((p.departure_step for p in pods), dtype=np.int64, count=len(pods))
            use = np.nan_to_num(s.pod_usage[idx, self.lo: self.hi, :].astype(float))
            use *= np.stack([s.pod_cpu[idx], s.pod_memory[idx]], axis=1)[:, None, :]
            use[(self.lo + np.arange(w))[None, :] >= dep[:, None]] = 0.0
            np.add.at(self.proj, node, use)
        self.plan = self._best_fit_decreasing(sim)
        self.refused = {p.index for p in sim.pending} - set(self.plan)
        self.declined = set()

    # ---- placement ----
    def _capacity(self, sim: SimView) -> np.ndarray:
        return self.u_star * sim.alloc  # (N, 2)

    def _best_node(self, use: np.ndarray, ok: np.ndarray, proj: np.ndarray, requested: np.ndarray, sim: SimView) -> int:
        """The feasible node (``ok``) whose demand with ``use`` stays <= U* over the window and is left with the
        least headroom; -1 when none."""
        cand = np.flatnonzero(ok)
        if not len(cand):
            return -1
        after = proj[cand] + use[None, :, :]  # (C, w, 2)
        room = (self._capacity(sim)[cand, None, :] - after) / sim.alloc[cand, None, :]
        worst = room.min(axis=(1, 2)) if room.shape[1] else np.zeros(len(cand))
        fits = worst >= -1e-12
        if not fits.any():
            if self.overflow == "pend":
                return -1
            return int(cand[np.argmax(worst)])  # least-peak: the node it overshoots least
        cand, worst = cand[fits], worst[fits]
        used = (requested[cand] > 0).any(axis=1)
        if used.any():  # best fit among the nodes in use: the least room left, usage over the window or requests
            cand, worst = cand[used], worst[used]
            req_room = ((sim.alloc[cand] - requested[cand]) / sim.alloc[cand]).min(axis=1)
            return int(cand[np.argmin(np.minimum(worst, req_room))])
        # no node in use can take it: open the largest empty node (fewest nodes), pool order on ties
        size = (sim.alloc[cand] / sim.alloc.mean(axis=0)).min(axis=1)
        return int(cand[np.argmax(size)])

    def _best_fit_decreasing(self, sim: SimView) -> dict[int, int]:
        if not sim.pending or self.hi <= self.lo:
            return {}
        mean_alloc = sim.alloc.mean(axis=0)
        windows = {p.index: self.pod_window(p, sim) for p in sim.pending}
        order = sorted(sim.pending, key=lambda p: (-float((windows[p.index].max(axis=0) / mean_alloc).max()), p.index))
        proj = self.proj.copy()
        free = sim.alloc - sim.requested
        slots = sim.max_pods - sim.pod_count
        base = ~sim.unschedulable & sim.active
        plan: dict[int, int] = {}
        for pod in order:
            # the filters on the live state (taints, cordons, requests before this step's binds) and the requests
            # of the pods this plan already put there
            ok = base & self.framework.filter_mask(pod, sim) & (free[:, 0] >= pod.cpu) & (free[:, 1] >= pod.memory) & (slots > 0)
            node = self._best_node(windows[pod.index], ok, proj, sim.alloc - free, sim)
            if node < 0:
                continue
            plan[pod.index] = node
            proj[node] += windows[pod.index]
            free[node] -= (pod.cpu, pod.memory)
            slots[node] -= 1
        return plan

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        ok = self.framework.filter_mask(pod, sim) & sim.active
        use = self.pod_window(pod, sim)
        node = self.plan.get(pod.index, -1)
        if node >= 0 and ok[node]:  # the planned node, if it can still take the pod
            only = np.zeros_like(ok)
            only[node] = True
            if self._best_node(use, only, self.proj, sim.requested, sim) == node:
                return sim.node_names[node]
        if pod.index in self.refused:  # no node could take it under U* when the step's plan was made
            self.declined.add(pod.index)
            return None
        node = self._best_node(use, ok, self.proj, sim.requested, sim)
        if node < 0:
            self.declined.add(pod.index)
            return None
        return sim.node_names[node]

    def capacity_requests(self, sim: SimView) -> CapacityRequest | None:
        """capacity="placeholder": a placeholder per pod refused in this step and still pending (its requests),
        avoiding every ready node: no ready node could take the pod under U* (a node being provisioned can hold
        it; a new one is ordered otherwise)."""
        if self.capacity != "placeholder":
            return None
        refused = [p for p in sim.pending if p.index in self.declined]
        self.declined = set()
        self.extra["placeholders"] += len(refused)
        if not refused:
            return None
        return CapacityRequest(np.array([(p.cpu, p.memory) for p in refused], dtype=float), sim.active.copy())

    def bound(self, pod: SimPod, node: str, sim: SimView) -> None:
        self.proj[sim.node_index[node]] += self.pod_window(pod, sim)
