"""The discrete-event replay: 5-minute steps, pods arriving and leaving, one policy placing them, a
cluster-autoscaler model provisioning and removing nodes. The same rules for every policy.

Step k (time ``k * step_s`` from the replay start), in this order:

1. pods whose departure step is k leave their node (``policy.released``); pending pods whose departure
   step has come leave the queue unplaced (counted as *failed*);
2. nodes whose provisioning ends at k become ready (schedulable);
3. pods arriving at step k join the queue (ordered by (step queued, index));
4. ``policy.observe(view)``: the policy sees what monitoring knows by now: every node's measured usage up
   to the end of step k-1, requests, the recent bindings, the queue, every node's taints (``view.taints``: its
   own plus the memory-pressure taint while it carries it, ``view.memory_pressure``); then
   ``policy.evictions(view)`` may name bound pods to move (re-optimisation): each is evicted and re-queued (a
   *move*, counted); then ``policy.capacity_taints(view)`` may name the nodes carrying ``CAPACITY_TAINT``
   (NoSchedule, ``view.capacity_taint``) from this step's scheduling on: the policy's capacity signal to the
   autoscaler (a node no pod can be placed on);
5. every queued pod, in order, gets one scheduling attempt: ``policy.place`` names a node or None; the engine
   checks the node is ready, carries no taint the pod does not tolerate (the memory-pressure taint, the capacity
   taint) and the requests fit (a policy cannot overcommit requests), binds, and calls ``policy.bound``; unplaced
   pods stay queued and, for a policy whose answers can change within a step (``Policy.retries_within_step``),
   get another attempt every ``EngineRules.retry_s`` of the step (partial-step starts: ``view.now`` is the
   round's time, the pod's start latency counts it); then ``policy.capacity_requests(view)`` may name placeholder
   pods (``CapacityRequest``: lowest non-expendable priority, the refused demand, anti-affinity to the nodes the
   policy judges hot), the other capacity signal; then ``policy.scale_down_disabled(view)`` may name the nodes
   carrying the cluster-autoscaler's ``SCALE_DOWN_DISABLED_KEY: "true"`` annotation
   (``view.scale_down_disabled``) until the policy's next answer;
6. the truth for step k. Each pod *demands* request x usage ratio (usage may exceed the request: the
   trace's pods are burstable). Memory is not compressible: while a node's memory demand exceeds its
   allocatable, the node is under memory pressure and the pod using the most memory above its request is
   killed (the kubelet's eviction or the kernel's OOM kill; counted) and re-queued for step k+1 as a new
   pod of its Deployment. The node then carries ``node.kubernetes.io/memory-pressure:NoSchedule`` (the
   kubelet's MemoryPressure condition as TaintNodesByCondition shows it) from step k+1 until the pressure has
   been gone for ``EngineRules.pressure_transition_s`` (the kubelet's ``evictionPressureTransitionPeriod``,
   5 min: the taint is on for the scheduling of steps k+1 .. k+ceil(period / step)): no scheduler model and
   no autoscaler simulation puts a pod there meanwhile. Cpu is compressible: a node's cpu demand above
   allocatable is throttled; the excess is counted as unmet cpu (core-minutes). Monitoring records what ran
   (throttled cpu, memory after kills); overload is judged on demand;
7. the autoscaler (``Autoscaler``, when given): every pod in the queue now (the ones this step could not
   place and the ones killed in it, which are pending at once in a real cluster), then every placeholder pod,
   that no ready or provisioning node without a NoSchedule taint (and, for a placeholder, not one it avoids)
   could hold by requests (a first-fit with the scheduler's resource predicates, as the cluster-autoscaler
   simulates; a placeholder that fits holds that room) starts the provisioning of the next nodes of the pool,
   ready ``provision_steps`` later; a ready node without the scale-down-disabled annotation whose requested cpu
   and memory (the placeholders' room included) have both been below ``scale_down_threshold`` of allocatable for
   ``scale_down_unneeded_s`` (10 min: 3 evaluations in a row at 5-minute steps) is removed, unless a node was
   ordered less than ``scale_down_delay_after_add_s`` ago (10 min: not in the scale-up's step nor the next), if
   empty, or (at most ``max_nonempty_per_step`` per step) if its pods and placeholders fit elsewhere by requests
   (untainted nodes); its pods are evicted and re-queued for step k+1. Every step a node is provisioning or ready
   is billed (node-hours).

Cold start and warm-up: at step 0 no policy has any usage history (the pods alive at the replay's start arrive
then and are placed by requests, which the scenarios derive from each job's history third); the metrics score
the steps after ``EngineRules.warmup_s`` (one hour, at most a quarter of the replay; ``RunResult.warmup_steps``),
by when every policy has the statistics it reads (load-watcher's 15-minute window, kso's hour of per-pod usage).
The warm-up's placements stay the policy's own and what they cause later is scored. History fed before step 0
was not chosen: node-level history needs a placement before step 0, which is either each policy's own (a
warm-up under another name) or a common one (then the cluster at step 0 is not the policy's doing). The warm
start (``run(..., warm_start=policy)``, ``kso bench --start warm``) is the common one, as a scenario beside the
cold start: the given policy (kube-scheduler's default) schedules the warm-up, then each policy takes over the
running cluster at the first scored step.

The engine, the trace and the seed are the same for every policy; only ``place`` (and ``evictions``) differ.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.sim.autoscaler import Autoscaler, AutoscalerSteps, first_fit
from benchmarks.sim.trace import Scenario
from benchmarks.sim.view import (
    CAPACITY_TAINT,
    MAX_PODS_PER_NODE,
    MEMORY_PRESSURE_TAINT,
    SCALE_DOWN_DISABLED_KEY,
    Binding,
    CapacityRequest,
    Policy,
    SimPod,
    SimView,
    tolerates,
)

# re-exported: policies and tests import these from the engine
__all__ = ["CAPACITY_TAINT", "MAX_PODS_PER_NODE", "MEMORY_PRESSURE_TAINT", "SCALE_DOWN_DISABLED_KEY", "Autoscaler",
           "Binding", "CapacityRequest", "EngineRules", "Policy", "RunResult", "SimPod", "SimView", "first_fit", "run",
           "tolerates"]


@dataclass(frozen=True)
class EngineRules:
    """The replay's cluster rules that have a real-cluster setting behind them (defaults: Kubernetes').

    ``pressure_transition_s``: the kubelet's ``evictionPressureTransitionPeriod`` (5 min): a node whose memory
    demand exceeded its allocatable keeps the MemoryPressure condition, hence the
    ``node.kubernetes.io/memory-pressure:NoSchedule`` taint, until the pressure has been gone that long.
    ``warmup_s``: scoring starts after this much replay time (the metrics ignore earlier steps), capped at a
    quarter of the replay; every policy places and measures from step 0 with no usage history.
    ``retry_s``: partial-step starts. kube-scheduler retries a pending pod within seconds, not once per 5-minute
    step: after the step's first scheduling round the pods still queued get another round every ``retry_s``
    (default 60 s: 5 rounds a step; ``view.now`` is the round's time, so a policy's hold that expires within
    the step releases the pod then) when the policy's answers can change within a step
    (``Policy.retries_within_step``; for the others a retry would give the same answer). A pod bound in round r
    of step k started ``r * retry_s`` into the step: its start latency counts those seconds and the step's first
    ``r * retry_s`` are not served pod-time (its usage is counted in full in that step: the 5-minute bin's mean,
    on the side of more harm). 0: one round a step."""

    pressure_transition_s: float = 300.0
    warmup_s: float = 3600.0
    retry_s: float = 60.0

    def retry_rounds(self, step_s: float) -> int:
        """Scheduling rounds per step: the first at the step's start, then one every ``retry_s`` (partial-step
        starts); 1 when ``retry_s`` is 0 or not below the step."""
        if self.retry_s <= 0 or self.retry_s >= step_s:
            return 1
        return max(1, int(np.ceil(step_s / self.retry_s - 1e-9)))

    def transition_steps(self, step_s: float) -> int:
        return int(np.ceil(self.pressure_transition_s / step_s - 1e-9))

    def warmup_steps(self, step_s: float, n_steps: int) -> int:
        return min(int(np.ceil(self.warmup_s / step_s - 1e-9)), n_steps // 4)


@dataclass
class RunResult:
    policy: str
    mode: str
    scenario: str
    usage: np.ndarray  # (N, T, 2) measured usage, absolute (cpu throttled at allocatable, memory after OOM kills)
    alloc: np.ndarray  # (N, 2)
    requested: np.ndarray  # (N, T, 2) requests bound during each step (after scheduling)
    pods_on_node: np.ndarray  # (N, T) pod count during each step
    pods: list[SimPod]
    attempts: int
    rejected_placements: int  # policy answers the engine refused (requests did not fit, node not ready)
    wall_s: float
    latencies: dict[str, list[float]]
    step_s: float
    median_pod: np.ndarray  # (2,) median request of the scenario's pods
    extra: dict[str, Any] = field(default_factory=dict)
    demand: np.ndarray | None = None  # (N, T, 2) what the node's pods asked for (before throttling / kills)
    provisioned: np.ndarray | None = None  # (N, T) bool: billed (provisioning or ready)
    unmet_cpu_core_min: np.ndarray | None = None  # (N, T) throttled cpu, core-minutes
    oom_kills: list[tuple[int, int, int]] = field(default_factory=list)  # (step, pod, node)
    ca_evictions: int = 0  # pods evicted by autoscaler scale-down
    moves: int = 0  # pods evicted by the policy (re-optimisation)
    scale_ups: int = 0  # nodes provisioned by the autoscaler
    scale_downs: int = 0  # nodes removed by the autoscaler
    pending_per_step: np.ndarray | None = None  # (T,) pods in the queue after scheduling
    waits_steps: list[int] = field(default_factory=list)  # per queue entry: steps until bound (or until it ended)
    # per queue entry that ended bound: (the step it started in, seconds from entering the queue to starting)
    start_latency_s: list[tuple[int, float]] = field(default_factory=list)
    # per pod started after the start of a step: (pod, step, fraction of the step before it started)
    partial_starts: list[tuple[int, int, float]] = field(default_factory=list)
    start: str = "cold"  # "warm": the default policy placed the warm-up's pods (RunResult.warmup_steps)
    autoscaler: str = "none (fixed pool)"
    ran: np.ndarray | None = None  # (P, T) bool: the pod ran through step k (a pod killed in step k did not)
    memory_pressure: np.ndarray | None = None  # (N, T) bool: the node had the MemoryPressure condition during step k
    # the policy's capacity signal: placeholder pod-steps, nodes provisioned for placeholders, node-steps with the
    # capacity taint (all 0 for a policy that sends none)
    capacity: dict[str, int] = field(default_factory=dict)
    served: np.ndarray | None = None  # (P,) bool: the pod was running when its life ended (departure or replay end)
    warmup_steps: int = 0  # the metrics score steps warmup_steps..T-1
    rules: EngineRules = field(default_factory=EngineRules)


def _fits(view: SimView, node: int, pod: SimPod) -> bool:
    free = view.alloc[node] - view.requested[node]
    tainted = ((view.memory_pressure[node] and not tolerates(pod, MEMORY_PRESSURE_TAINT))
               or (view.capacity_taint[node] and not tolerates(pod, CAPACITY_TAINT)))
    return bool(view.active[node] and not tainted and free[0] >= pod.cpu and free[1] >= pod.memory
                and view.pod_count[node] < view.max_pods[node])


class _Replay(AutoscalerSteps):
    """One run's mutable state and the engine's rules; ``run`` drives it step by step."""

    def __init__(self, scenario: Scenario, policy: Policy, autoscaler: Autoscaler | None,
                 rules: EngineRules | None = None) -> None:
        self.s, self.policy, self.ca = scenario, policy, autoscaler
        self.rules = rules or EngineRules()
        self.start = "cold"
        self.transition_steps = self.rules.transition_steps(scenario.step_s)
        self.view = view = SimView(scenario)
        lim_c = scenario.pod_cpu_limit if scenario.pod_cpu_limit is not None else np.zeros(scenario.n_pods)
        lim_m = scenario.pod_memory_limit if scenario.pod_memory_limit is not None else np.zeros(scenario.n_pods)
        owners = scenario.pod_owner or [""] * scenario.n_pods
        self.pods = [SimPod(i, name, f"sim-{i:06d}", float(scenario.pod_cpu[i]), float(scenario.pod_memory[i]),
                            int(scenario.pod_arrival[i]), int(scenario.pod_departure[i]), scenario.pod_qos[i],
                            cpu_limit=float(lim_c[i]), memory_limit=float(lim_m[i]), owner=owners[i])
                     for i, name in enumerate(scenario.pod_names)]
        self.arrivals = [(p.arrival_step, p.index) for p in self.pods]
        heapq.heapify(self.arrivals)
        self.departures: dict[int, list[int]] = {}
        for p in self.pods:
            self.departures.setdefault(p.departure_step, []).append(p.index)
        self.queue: list[tuple[int, int]] = []  # (step queued, index)
        N, T = scenario.n_nodes, scenario.n_steps
        self.ready_at = np.full(N, -1, dtype=np.int64)  # provisioning: the step the node becomes ready
        self.unneeded = np.zeros(N, dtype=np.int64)  # consecutive evaluations each node was unneeded
        self.last_scale_up = -1  # the last step whose evaluation ordered a node (scale-down-delay-after-add)
        if autoscaler is not None and autoscaler.initial_nodes is not None:
            view.active[:] = False
            view.active[: autoscaler.initial_nodes] = True
        self.requested_t = np.zeros((N, T, 2))
        self.count_t = np.zeros((N, T), dtype=np.int64)
        self.demand = np.zeros((N, T, 2))
        self.provisioned = np.zeros((N, T), dtype=bool)
        self.unmet = np.zeros((N, T))
        self.pending_t = np.zeros(T, dtype=np.int64)
        self.ran = np.zeros((scenario.n_pods, T), dtype=bool)
        self.pressure_t = np.zeros((N, T), dtype=bool)
        self.served = np.zeros(scenario.n_pods, dtype=bool)
        self.last_pressure = np.full(N, -(10**9), dtype=np.int64)  # the last step whose memory demand exceeded allocatable
        self.oom: list[tuple[int, int, int]] = []
        self.waits: list[int] = []
        self.latency_s: list[tuple[int, float]] = []
        self.partial: list[tuple[int, int, float]] = []
        self.rounds = self.rules.retry_rounds(scenario.step_s)
        self.retry_s = self.rules.retry_s if self.rounds > 1 else 0.0
        self.capacity: CapacityRequest | None = None  # this step's placeholders (Policy.capacity_requests)
        self.held = np.zeros((N, 2))  # room the placeholders hold on each node in the autoscaler's simulation
        self.held_count = np.zeros(N, dtype=np.int64)
        # (node, requests, row of self.avoid) of each placeholder placed in the autoscaler's simulation
        self.held_pods: list[tuple[int, tuple[float, float], int]] = []
        self.avoid = np.zeros((0, N), dtype=bool)  # (P, N) the nodes each of this step's placeholders avoids
        self.placeholder_steps = self.placeholder_scale_ups = self.capacity_tainted_steps = 0
        self.scale_down_disabled_steps = self.scale_down_disabled_marks = 0
        self.attempts = self.rejected = self.ca_evictions = self.moves = self.scale_ups = self.scale_downs = 0

    def hand_over(self, policy: Policy, k: int) -> None:
        """The warm start's switch at step ``k``: ``policy`` schedules from now on and learns the running pods."""
        self.policy.close()
        self.policy = policy
        view = self.view
        view.step = k
        policy.setup(view)
        policy.observe(view)  # what monitoring knows at the switch (a policy sizes its per-node state here)
        for pod in sorted(view.running.values(), key=lambda p: (p.bound_step, p.index)):
            policy.bound(pod, view.node_names[pod.node], view)

    # ---- pods ----
    def enqueue(self, i: int, step: int) -> None:
        self.pods[i].queued_step = step
        self.queue.append((step, i))

    def release(self, i: int) -> None:
        pod, view = self.pods[i], self.view
        node = pod.node
        view.requested[node] -= (pod.cpu, pod.memory)
        view.limited[node] -= np.maximum(pod.limits, pod.requests)
        view.pod_count[node] -= 1
        del view.running[i]
        pod.node = -1
        self.policy.released(pod, view.node_names[node], view)

    def evict(self, i: int, requeue_step: int) -> None:
        """Evicted, OOM-killed or drained: off its node, back in the queue (a new pod of its Deployment)."""
        self.release(i)
        if self.pods[i].departure_step > requeue_step:
            self.enqueue(i, requeue_step)

    def bind(self, i: int, node: int, k: int) -> None:
        pod, view = self.pods[i], self.view
        pod.node, pod.bound_step, pod.ever_bound = node, k, True
        pod.waits.append(k - pod.queued_step)
        self.waits.append(k - pod.queued_step)
        offset = view.offset_s
        self.latency_s.append((k, (k - pod.queued_step) * view.step_s + offset))
        if offset > 0:
            self.partial.append((i, k, offset / view.step_s))
        view.requested[node] += (pod.cpu, pod.memory)
        view.limited[node] += np.maximum(pod.limits, pod.requests)
        view.pod_count[node] += 1
        view.running[i] = pod
        view.recent.append(Binding(pod, node, k))

    # ---- one step ----
    def begin(self, k: int) -> None:
        view = self.view
        view.step = k
        for i in self.departures.pop(k, []):
            if i in view.running:
                self.served[i] = True
                self.release(i)
        gone = [(a, i) for a, i in self.queue if self.pods[i].departure_step <= k]
        for a, _ in gone:  # waited until it left unplaced: a censored wait
            self.waits.append(k - a)
        self.queue = [(a, i) for a, i in self.queue if self.pods[i].departure_step > k]
        ready = self.ready_at == k
        view.active[ready] = True
        self.ready_at[ready] = -1
        view.unschedulable[:] = ~view.active  # a node not provisioned (or removed) is not in the API: never feasible
        while self.arrivals and self.arrivals[0][0] <= k:
            _, i = heapq.heappop(self.arrivals)
            self.enqueue(i, k)
        self.queue.sort()
        view.recent = []
        view.pending = [self.pods[i] for _, i in self.queue]
        self.policy.observe(view)
        for i in self.policy.evictions(view):
            if i in view.running:
                self.moves += 1
                self.evict(i, k)
        self.queue.sort()
        taints = self.policy.capacity_taints(view)
        view.capacity_taint[:] = False if taints is None else np.asarray(taints, dtype=bool) & view.active
        self.capacity_tainted_steps += int(view.capacity_taint.sum())

    def schedule(self, k: int) -> list[int]:
        view = self.view
        # tainted nodes count as full for the shortcut below (the trace's pods tolerate no taint; _fits decides)
        free = np.where((view.active & ~view.no_schedule)[:, None], view.alloc - view.requested, -1.0)
        unplaced = self._round(k, free)
        rounds = self.rounds if self.policy.retries_within_step else 1
        for r in range(1, rounds):  # the retries within the step (partial-step starts)
            if not self.queue:
                break
            view.offset_s = r * self.retry_s
            unplaced = self._round(k, free)
        view.offset_s = 0.0
        view.pending = [self.pods[i] for _, i in self.queue]  # what is still pending after this step's scheduling
        self.capacity = self.policy.capacity_requests(view)
        marks = self.policy.scale_down_disabled(view)
        marked = np.zeros_like(view.active) if marks is None else np.asarray(marks, dtype=bool) & view.active
        self.scale_down_disabled_marks += int((marked & ~view.scale_down_disabled).sum())  # annotations written
        view.scale_down_disabled[:] = marked
        self.scale_down_disabled_steps += int(marked.sum())
        return unplaced

    def _round(self, k: int, free: np.ndarray) -> list[int]:
        """One scheduling attempt for every queued pod, in order; returns the pods left unplaced."""
        view, still, unplaced = self.view, [], []
        for a, i in self.queue:
            pod = self.pods[i]
            pod.attempts += 1
            self.attempts += 1
            # No ready node can hold the requests: every policy must answer None, so skip asking (saves time).
            if not pod.tolerations and not ((free[:, 0] >= pod.cpu) & (free[:, 1] >= pod.memory)).any():
                still.append((a, i))
                unplaced.append(i)
                continue
            name = self.policy.place(pod, view)
            node = view.node_index.get(name, -1) if name is not None else -1
            if node < 0 or not _fits(view, node, pod):
                self.rejected += name is not None
                still.append((a, i))
                unplaced.append(i)
                continue
            self.bind(i, node, k)
            free[node] -= (pod.cpu, pod.memory)
            self.policy.bound(pod, name, view)  # type: ignore[arg-type]
        self.queue = still
        view.pending = [self.pods[i] for _, i in still]
        return unplaced

    def truth(self, k: int) -> None:
        view, s, N = self.view, self.s, self.s.n_nodes
        if view.running:
            idx = np.fromiter(view.running.keys(), dtype=np.int64, count=len(view.running))
            nodes = np.fromiter((self.pods[i].node for i in idx.tolist()), dtype=np.int64, count=len(idx))
            use = s.pod_usage[idx, k, :].astype(float) * np.stack([s.pod_cpu[idx], s.pod_memory[idx]], axis=1)
            for r in range(2):
                self.demand[:, k, r] = np.bincount(nodes, weights=use[:, r], minlength=N)
            self.ran[idx, k] = True
            mem = self.demand[:, k, 1].copy()
            self.last_pressure[mem > view.alloc[:, 1]] = k
            for node in np.flatnonzero(mem > view.alloc[:, 1]).tolist():
                on = np.flatnonzero(nodes == node)
                alive = np.ones(len(on), dtype=bool)
                while mem[node] > view.alloc[node, 1] and alive.any():
                    over = np.where(alive, use[on, 1] - s.pod_memory[idx[on]], -np.inf)
                    j = int(np.argmax(over))
                    alive[j] = False
                    mem[node] -= use[on[j], 1]
                    victim = int(idx[on[j]])
                    self.ran[victim, k] = False  # killed in step k: monitoring has the node without it, not served
                    self.oom.append((k, victim, node))
                    self.evict(victim, k + 1)
            view._usage[:, k, 1] = mem
            cpu = self.demand[:, k, 0]
            view._usage[:, k, 0] = np.minimum(cpu, view.alloc[:, 0])
            # unmet cpu (core-minutes) = (demand - allocatable)+ [millicores] / 1000 x step minutes
            self.unmet[:, k] = np.clip(cpu - view.alloc[:, 0], 0.0, None) / 1000.0 * s.step_s / 60.0
        # MemoryPressure during step k: pressure seen now, or the taint carried into this step's scheduling
        self.pressure_t[:, k] = view.memory_pressure | (self.last_pressure == k)
        # the taint from the next step's scheduling on, until the pressure has been gone for the transition period
        view.memory_pressure[:] = (k + 1 - self.last_pressure) <= self.transition_steps
        self.requested_t[:, k] = view.requested
        self.count_t[:, k] = view.pod_count

    def autoscale(self, k: int) -> None:
        view, ca = self.view, self.ca
        # billed for step k: the nodes that were provisioning or ready during it (a node removed at the end of
        # step k is billed for k; one ordered at the end of step k from k+1)
        self.provisioned[:, k] = view.active | (self.ready_at >= 0)
        self.pending_t[k] = len(self.queue)
        if ca is not None:
            # every pod in the queue now: the ones this step could not place and the ones evicted or OOM-killed
            # during it (new pods of their Deployments, pending at once; CA's simulation decides whether they fit)
            self._scale_up(k, [i for _, i in self.queue], ca)
            self._scale_down(k, ca)

    def result(self, wall_s: float) -> RunResult:
        s, view = self.s, self.view
        T = s.n_steps
        for a, _ in self.queue:  # still waiting at the end: a censored wait
            self.waits.append(T - a)
        self.served[list(view.running)] = True  # running when the replay ended
        median_pod = np.array([np.median(s.pod_cpu), np.median(s.pod_memory)]) if s.n_pods else np.zeros(2)
        capacity = {"placeholder_pod_steps": self.placeholder_steps, "placeholder_scale_ups": self.placeholder_scale_ups,
                    "capacity_tainted_node_steps": self.capacity_tainted_steps}
        if self.scale_down_disabled_steps or self.scale_down_disabled_marks:  # only a policy that marks nodes
            capacity.update(scale_down_disabled_node_steps=self.scale_down_disabled_steps,
                            scale_down_disabled_marks=self.scale_down_disabled_marks)
        extra = dict(getattr(self.policy, "extra", {}))
        if any(capacity.values()):  # a policy that sent a capacity signal: its counts in the cells' rows too
            extra.update(capacity)
        return RunResult(self.policy.name, self.policy.mode, s.name, view._usage, view.alloc.copy(), self.requested_t,
                         self.count_t, self.pods, self.attempts, self.rejected, wall_s, self.policy.latencies, s.step_s,
                         median_pod, extra=extra, demand=self.demand,
                         provisioned=self.provisioned, unmet_cpu_core_min=self.unmet, oom_kills=self.oom,
                         ca_evictions=self.ca_evictions, moves=self.moves, scale_ups=self.scale_ups,
                         scale_downs=self.scale_downs, pending_per_step=self.pending_t, waits_steps=self.waits,
                         start_latency_s=self.latency_s, partial_starts=self.partial, start=self.start,
                         autoscaler=self.ca.describe() if self.ca else "none (fixed pool)", ran=self.ran,
                         memory_pressure=self.pressure_t, served=self.served,
                         capacity=capacity,
                         warmup_steps=self.rules.warmup_steps(s.step_s, T), rules=self.rules)


def run(scenario: Scenario, policy: Policy, progress: Callable[[int, int], None] | None = None,
        autoscaler: Autoscaler | None = None, rules: EngineRules | None = None,
        warm_start: Policy | None = None) -> RunResult:
    """Replay ``scenario`` with ``policy`` (and the autoscaler, if given) under ``rules`` (default: Kubernetes'
    defaults); returns the truth and the accounting.

    ``warm_start``: the policy (``kso bench --start warm``: ``default``, kube-scheduler's LeastAllocated) that
    schedules the warm-up steps (``RunResult.warmup_steps``, which the metrics do not score); ``policy`` takes over
    at the first scored step with the cluster as it is then, as when kso is installed into a running cluster: it
    is set up then and told of every running pod (``Policy.bound``, in the order they were bound; each keeps its
    real bind step and the usage history stays). None: a cold start, ``policy`` from step 0."""
    t_start = time.perf_counter()
    replay = _Replay(scenario, warm_start or policy, autoscaler, rules)
    replay.start = "warm" if warm_start is not None else "cold"
    replay.policy.setup(replay.view)
    T = scenario.n_steps
    handover = replay.rules.warmup_steps(scenario.step_s, T) if warm_start is not None else -1
    for k in range(T):
        if k == handover:
            replay.hand_over(policy, k)
        replay.begin(k)
        replay.schedule(k)
        replay.truth(k)
        replay.autoscale(k)
        if progress is not None:
            progress(k + 1, T)
    policy.close()
    return replay.result(time.perf_counter() - t_start)
