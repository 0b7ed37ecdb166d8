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
5. every queued pod, in order, gets one scheduling attempt: ``policy.place`` names a node or None; the
   engine checks the node is ready, carries no taint the pod does not tolerate (the memory-pressure taint, the
   capacity taint) and the requests fit (a policy cannot overcommit requests), binds, and calls ``policy.bound``;
   unplaced pods stay queued; then ``policy.capacity_requests(view)`` may name placeholder pods
   (``CapacityRequest``: lowest non-expendable priority, the refused demand, anti-affinity to the nodes the
   policy judges hot), the other capacity signal; then ``policy.scale_down_disabled(view)`` may name the nodes
   carrying the cluster-autoscaler's ``SCALE_DOWN_DISABLED_KEY: "true"`` annotation (``view.scale_down_disabled``)
   until the policy's next answer;
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
   ``scale_down_unneeded_steps`` is removed if empty, or (at most ``max_nonempty_per_step`` per step) if its
   pods and placeholders fit elsewhere by requests (untainted nodes); its pods are evicted and re-queued for step
   k+1. Every step a node is provisioning or ready is billed (node-hours).

Cold start and warm-up: at step 0 no policy has any usage history (the pods alive at the replay's start arrive
then and are placed by requests, which the scenarios derive from each job's history third); the metrics score
the steps after ``EngineRules.warmup_s`` (one hour, at most a quarter of the replay; ``RunResult.warmup_steps``),
by when every policy has the statistics it reads (load-watcher's 15-minute window, kso's hour of per-pod usage).
The warm-up's placements stay the policy's own and what they cause later is scored. History fed before step 0
was not chosen: node-level history needs a placement before step 0, which is either each policy's own (a
warm-up under another name) or a common one (then the cluster at step 0 is not the policy's doing).

The engine, the trace and the seed are the same for every policy; only ``place`` (and ``evictions``) differ.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.sim.trace import Scenario

MAX_PODS_PER_NODE = 110  # kubelet's default maxPods: the scenario's nodes' allocatable pods
# TaintNodesByCondition's taint for the kubelet's MemoryPressure condition (key, value, effect)
MEMORY_PRESSURE_TAINT = ("node.kubernetes.io/memory-pressure", "", "NoSchedule")
# The taint a policy puts on the nodes it judges hot (Policy.capacity_taints): no new pod there, for any scheduler
# and for the cluster-autoscaler's simulation alike. Its key is under the autoscaler's status-taint prefix: the
# autoscaler leaves such taints out of the template it builds a new node from (another taint on the group's nodes
# would be copied there and the new node would hold nothing either) and does not count the node unready.
CAPACITY_TAINT = ("status-taint.cluster-autoscaler.kubernetes.io/kso-forecast-hot", "", "NoSchedule")
# The node annotation the cluster-autoscaler reads as "never remove this node" (value exactly "true"). Its scale-down
# eligibility check skips such a node before looking at its utilisation, so the node is never "unneeded" while it
# carries it (the unneeded timer starts again once it is gone); the node still takes pods in the drain
# simulation of other nodes, and scale-up ignores the annotation.
SCALE_DOWN_DISABLED_KEY = "cluster-autoscaler.kubernetes.io/scale-down-disabled"


@dataclass(frozen=True)
class EngineRules:
    """The replay's cluster rules that have a real-cluster setting behind them (defaults: Kubernetes').

    ``pressure_transition_s``: the kubelet's ``evictionPressureTransitionPeriod`` (5 min): a node whose memory
    demand exceeded its allocatable keeps the MemoryPressure condition, hence the
    ``node.kubernetes.io/memory-pressure:NoSchedule`` taint, until the pressure has been gone that long.
    ``warmup_s``: scoring starts after this much replay time (the metrics ignore earlier steps), capped at a
    quarter of the replay; every policy places and measures from step 0 with no usage history."""

    pressure_transition_s: float = 300.0
    warmup_s: float = 3600.0

    def transition_steps(self, step_s: float) -> int:
        return int(np.ceil(self.pressure_transition_s / step_s - 1e-9))

    def warmup_steps(self, step_s: float, n_steps: int) -> int:
        return min(int(np.ceil(self.warmup_s / step_s - 1e-9)), n_steps // 4)


@dataclass(slots=True)
class SimPod:
    """A pod as a scheduler sees it: requests and identity, no usage."""

    index: int
    name: str
    uid: str
    cpu: float  # request, millicores
    memory: float  # request, bytes
    arrival_step: int
    departure_step: int
    qos: str = ""
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[tuple[str, str], ...] = ()  # (key, effect); effect "" tolerates every effect of key
    cpu_limit: float = 0.0  # 0: no limit
    memory_limit: float = 0.0
    owner: str = ""  # the Deployment (workload class) the pod belongs to; "" for a bare pod
    node: int = -1  # index of its node while bound
    bound_step: int = -1
    attempts: int = 0
    queued_step: int = -1  # the step it (re-)entered the queue
    ever_bound: bool = False
    waits: list[int] = field(default_factory=list)  # steps spent in the queue, per queue entry that ended bound

    @property
    def requests(self) -> np.ndarray:
        return np.array([self.cpu, self.memory])

    @property
    def limits(self) -> np.ndarray:
        return np.array([self.cpu_limit, self.memory_limit])


@dataclass(slots=True)
class Binding:
    pod: SimPod
    node: int
    step: int


class SimView:
    """What a scheduler (and its monitoring) can know at the current step. Arrays are live: the engine
    updates ``requested`` / ``pod_count`` on every bind and release."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario_name = scenario.name
        self.step_s = scenario.step_s
        self.n_steps = scenario.n_steps
        self.node_names: list[str] = list(scenario.node_names)
        self.node_index: dict[str, int] = {n: i for i, n in enumerate(self.node_names)}
        self.alloc = np.stack([scenario.node_cpu, scenario.node_memory], axis=1).astype(float)  # (N, 2) milli, bytes
        self.max_pods = np.full(len(self.node_names), MAX_PODS_PER_NODE)
        self.labels: list[dict[str, str]] = scenario.node_labels
        self.scenario_taints: list[list[tuple[str, str, str]]] = scenario.node_taints  # the nodes' own taints
        # the kubelet's MemoryPressure condition as TaintNodesByCondition shows it: MEMORY_PRESSURE_TAINT on the node
        self.memory_pressure = np.zeros(len(self.node_names), dtype=bool)
        # CAPACITY_TAINT on the node (the policy's Policy.capacity_taints, for this step's scheduling on)
        self.capacity_taint = np.zeros(len(self.node_names), dtype=bool)
        # SCALE_DOWN_DISABLED_KEY="true" on the node (the policy's Policy.scale_down_disabled, until its next answer)
        self.scale_down_disabled = np.zeros(len(self.node_names), dtype=bool)
        self._taints: list[list[tuple[str, str, str]]] | None = None
        self._taints_of: bytes = b""
        self.unschedulable = np.zeros(len(self.node_names), dtype=bool)
        self.requested = np.zeros((len(self.node_names), 2))  # sum of bound pods' requests
        self.pod_count = np.zeros(len(self.node_names), dtype=np.int64)
        self.limited = np.zeros((len(self.node_names), 2))  # sum of bound pods' max(limit, request)
        # usage_history[:, j] = true usage (cpu milli, memory bytes) of step j; only j < step is visible
        self._usage = np.zeros((len(self.node_names), scenario.n_steps, 2))
        self.step = 0
        self.recent: list[Binding] = []  # bound during this step: no metric shows them yet
        self.pending: list[SimPod] = []  # the queue at observe time, in scheduling order (after scheduling: what is left)
        self.running: dict[int, SimPod] = {}  # pod index -> bound pod
        self.active = np.ones(len(self.node_names), dtype=bool)  # provisioned and ready (the autoscaler's pool)
        self._scenario = scenario
        self._forecasts: dict[tuple[int, str, float], dict[str, np.ndarray]] = {}

    @property
    def taints(self) -> list[list[tuple[str, str, str]]]:
        """Every node's taints now, (key, value, effect): its own plus the memory-pressure taint while the
        node carries it plus the capacity taint while the policy puts it there."""
        if not (self.memory_pressure.any() or self.capacity_taint.any()):
            return self.scenario_taints
        key = self.memory_pressure.tobytes() + self.capacity_taint.tobytes()
        if self._taints is None or key != self._taints_of:
            self._taints = [[*t, *([MEMORY_PRESSURE_TAINT] if self.memory_pressure[i] else []),
                             *([CAPACITY_TAINT] if self.capacity_taint[i] else [])]
                            for i, t in enumerate(self.scenario_taints)]
            self._taints_of = key
        return self._taints

    @property
    def no_schedule(self) -> np.ndarray:
        """(N,) bool: the node carries a NoSchedule taint the engine sets (memory pressure, the capacity taint); a
        pod tolerating neither (every pod of the traces) is placed on none of them."""
        return self.memory_pressure | self.capacity_taint

    # ---- time ----
    @property
    def now(self) -> float:
        """Seconds since the replay start."""
        return self.step * self.step_s

    # ---- metrics as monitoring would have them ----
    @property
    def usage_history(self) -> np.ndarray:
        """(N, step, 2) absolute usage (cpu milli, memory bytes) of every finished step."""
        return self._usage[:, : self.step]

    def util_history(self, window_steps: int | None = None) -> np.ndarray:
        """(N, w, 2) usage / allocatable of the last ``window_steps`` finished steps (all when None)."""
        hist = self.usage_history if window_steps is None else self._usage[:, max(0, self.step - window_steps): self.step]
        return hist / self.alloc[:, None, :]

    def window_stats(self, window_steps: int = 3) -> tuple[np.ndarray, np.ndarray, bool]:
        """Mean and population std of absolute usage over the last ``window_steps`` steps (load-watcher's
        15-minute window = 3 steps), (N, 2) each, and whether any metric exists yet."""
        hist = self._usage[:, max(0, self.step - window_steps): self.step]
        if hist.shape[1] == 0:
            zeros = np.zeros_like(self.alloc)
            return zeros, zeros.copy(), False
        return hist.mean(axis=1), hist.std(axis=1), True

    def last_usage(self) -> tuple[np.ndarray, bool]:
        """Usage of the last finished step, (N, 2), and whether there is one."""
        if self.step == 0:
            return np.zeros_like(self.alloc), False
        return self._usage[:, self.step - 1].copy(), True

    def node_forecasts(self, model: str = "", horizon_s: float = 900.0) -> dict[str, np.ndarray] | None:
        """kso forecaster's prediction of each node's utilisation over the next ``horizon_s``, from the
        visible history: {"mean", "std", "p95"} each (N, 2) as ratios of allocatable; None before any
        history. Cached per step, so several policies' observe calls pay once."""
        if self.step == 0:
            return None
        from forecasting.models import DEFAULT_FORECASTER, get_forecaster
        from forecasting.types import UtilisationSeries

        model = model or DEFAULT_FORECASTER
        key = (self.step, model, horizon_s)
        if key not in self._forecasts:
            util = self.util_history()
            t = (np.arange(self.step) + 1) * self.step_s  # a step's value is known at its end
            series = [UtilisationSeries(self.node_names[i], res, t, util[i, :, r])
                      for i in range(len(self.node_names)) for r, res in enumerate(("cpu", "memory"))]
            fcs = get_forecaster(model).forecast_many(series, horizon_s, now=float(t[-1]))
            out = {k: np.array([getattr(f, k) for f in fcs]).reshape(-1, 2) for k in ("mean", "std", "p95")}
            self._forecasts = {key: out}
        return self._forecasts[key]

    # ---- pods ----
    def pod_usage(self, pod: SimPod, window_steps: int) -> np.ndarray:
        """(w, 2) measured usage (cpu milli, memory bytes) of a bound pod over its last ``window_steps``
        finished steps on its current node (what cAdvisor / the metrics pipeline would show)."""
        lo = max(pod.bound_step, self.step - window_steps)
        if pod.node < 0 or lo >= self.step:
            return np.zeros((0, 2))
        ratio = self._scenario.pod_usage[pod.index, lo: self.step, :].astype(float)
        return ratio * np.array([pod.cpu, pod.memory])

    def pod_usage_window(self, pods: np.ndarray, lo: int) -> np.ndarray:
        """(P, step - lo, 2) usage / request of the given pods over steps lo..step-1 (finished steps only); the
        caller masks the steps before each pod was bound."""
        return self._scenario.pod_usage[pods, lo: self.step, :].astype(float)

    def current_pods_usage(self, window_steps: int) -> np.ndarray:
        """(N, w, 2) per node, the summed measured usage of the pods bound there *now* over the last
        ``window_steps`` finished steps (the metrics pipeline's per-pod series summed by node): a pod bound
        during the window stands at its first measured value before its binding, so a placement is not a
        rise; a departed pod is not in it."""
        lo = max(self.step - window_steps, 0)
        w = self.step - lo
        out = np.zeros((len(self.node_names), w, 2))
        pods = [p for p in self.running.values() if p.node >= 0 and p.bound_step < self.step]
        if not pods or w == 0:
            return out
        idx = np.fromiter((p.index for p in pods), dtype=np.int64, count=len(pods))
        at = np.fromiter((max(p.bound_step, lo) - lo for p in pods), dtype=np.int64, count=len(pods))
        node = np.fromiter((p.node for p in pods), dtype=np.int64, count=len(pods))
        ratio = self._scenario.pod_usage[idx, lo: self.step, :].astype(float)  # (P, w, 2)
        first = ratio[np.arange(len(pods)), at]  # (P, 2)
        ratio = np.where((np.arange(w)[None, :] < at[:, None])[:, :, None], first[:, None, :], ratio)
        use = np.nan_to_num(ratio) * np.array([(p.cpu, p.memory) for p in pods])[:, None, :]
        np.add.at(out, node, use)
        return out

    def free(self) -> np.ndarray:
        """(N, 2) allocatable minus requested."""
        return self.alloc - self.requested


class Policy:
    """A scheduling policy. Subclasses implement ``place``; the hooks default to doing nothing.

    - ``observe(sim)``: once per step, before that step's scheduling;
    - ``place(pod, sim)``: a node name, or None (unschedulable now; retried next step);
    - ``bound(pod, node, sim)``: after the engine bound the pod;
    - ``released(pod, node, sim)``: after a bound pod left its node (departure, eviction, OOM kill);
    - ``evictions(sim)``: after ``observe``, indices of bound pods to move (re-optimisation); default none;
    - ``capacity_taints(sim)``: after ``evictions``, the nodes carrying ``CAPACITY_TAINT`` (NoSchedule) from this
      step's scheduling on, (N,) bool, or None (no taint: the default). Every scheduler model, the engine's
      placement check and the autoscaler's simulation honour it, as kube-scheduler and the cluster-autoscaler
      honour a node's NoSchedule taint;
    - ``capacity_requests(sim)``: after this step's scheduling, the placeholder pods the policy keeps pending
      (``CapacityRequest``), or None (none: the default);
    - ``scale_down_disabled(sim)``: after ``capacity_requests``, the nodes carrying the cluster-autoscaler's
      ``SCALE_DOWN_DISABLED_KEY: "true"`` annotation from now on, (N,) bool, or None (none: the default). The
      autoscaler model never counts such a node unneeded (its unneeded time starts again when the mark goes).
    ``latencies`` (verb -> seconds per call) and ``mode`` are reported when a policy calls an extender."""

    name = "policy"
    mode = "in-process model"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.latencies: dict[str, list[float]] = {}

    def setup(self, sim: SimView) -> None: ...

    def observe(self, sim: SimView) -> None: ...

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        raise NotImplementedError

    def bound(self, pod: SimPod, node: str, sim: SimView) -> None: ...

    def released(self, pod: SimPod, node: str, sim: SimView) -> None: ...

    def evictions(self, sim: SimView) -> list[int]:
        return []

    def capacity_taints(self, sim: SimView) -> np.ndarray | None:
        return None

    def capacity_requests(self, sim: SimView) -> CapacityRequest | None:
        return None

    def scale_down_disabled(self, sim: SimView) -> np.ndarray | None:
        return None

    def close(self) -> None: ...


@dataclass(frozen=True)
class CapacityRequest:
    """Placeholder pods a policy keeps in the cluster to make the autoscaler add capacity it cannot see otherwise
    (the cluster-autoscaler simulates scheduling without the scheduler's extenders). Each placeholder is a pod of
    a priority below every real pod that the autoscaler still scales up for (at or above its
    ``expendable-pods-priority-cutoff``, -10 by default: it ignores only pods below it), requesting ``demands[j]``
    (cpu millicores, memory bytes), with a required node anti-affinity to the nodes ``avoid`` marks (the nodes
    the policy judges hot: one mask for all, or one per placeholder). The autoscaler builds a new node from its
    group's template, whose name no placeholder avoids.

    How the engine models them: kube-scheduler preempts a placeholder for any real pod, so placeholders never
    keep a real pod off a node (the real pods' scheduling ignores them). The autoscaler's simulation sees them
    after the real pending pods, in order: one that fits (by requests, the pod slots, no NoSchedule taint, not an
    ``avoid`` node) a ready or provisioning node holds that room (it would be bound there); one that fits no
    such node makes it provision a node of the pool it fits (a new node is not hot). The room placeholders hold
    counts in the scale-down rule as requests do, and a node holding placeholders is drained only if they fit
    elsewhere."""

    demands: np.ndarray  # (P, 2) cpu millicores, memory bytes
    avoid: np.ndarray  # (N,) bool: the nodes every placeholder's anti-affinity excludes, or (P, N): each one's

    def avoid_rows(self, n_nodes: int) -> np.ndarray:
        """(P, N) bool: the nodes placeholder j avoids, row j."""
        avoid = np.asarray(self.avoid, dtype=bool)
        if avoid.ndim == 1:
            avoid = np.broadcast_to(avoid, (len(self.demands), n_nodes))
        if avoid.shape != (len(self.demands), n_nodes):
            raise ValueError(f"CapacityRequest.avoid: shape {avoid.shape}, not ({n_nodes},) or "
                             f"({len(self.demands)}, {n_nodes})")
        return avoid.copy()


@dataclass(frozen=True)
class Autoscaler:
    """The cluster-autoscaler model (defaults after CA's: scale-down-utilization-threshold 0.5,
    scale-down-unneeded-time 10 min; a node takes a few minutes to boot: one 5-minute step)."""

    provision_steps: int = 1
    scale_down_threshold: float = 0.5
    scale_down_unneeded_steps: int = 2
    min_nodes: int = 1
    max_nonempty_per_step: int = 1
    initial_nodes: int | None = None  # nodes ready at step 0, the first of the pool; None: all

    def describe(self) -> str:
        return (f"cluster-autoscaler model: scale up when pods are pending (nodes of the pool in order, first-fit by "
                f"requests, ready after {self.provision_steps} step(s)); scale down a node (not annotated "
                f"{SCALE_DOWN_DISABLED_KEY}=true) below "
                f"{self.scale_down_threshold:.0%} requested cpu and memory for {self.scale_down_unneeded_steps} steps "
                f"(empty ones at once, at most {self.max_nonempty_per_step} non-empty per step, only if its pods fit "
                f"elsewhere by requests; its pods re-queued); min {self.min_nodes} node(s); provisioned node-steps billed")


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


def tolerates(pod: SimPod, taint: tuple[str, str, str]) -> bool:
    """The pod tolerates the taint (key, value, effect): a toleration (key, effect) with its key and its effect or
    every effect (the trace's pods tolerate nothing)."""
    return any(k == taint[0] and (e == "" or e == taint[2]) for k, e in pod.tolerations)


# First-fit of requests (cpu, memory, one pod slot) into free capacity; returns the node chosen or -1 and
# updates ``free`` / ``slots`` in place. The autoscaler's simulation uses it (CA runs the scheduler's
# resource predicates, not the scoring).
def first_fit(free: np.ndarray, slots: np.ndarray, req: tuple[float, float], candidates: np.ndarray) -> int:
    ok = (free[candidates, 0] >= req[0]) & (free[candidates, 1] >= req[1]) & (slots[candidates] > 0)
    hit = np.flatnonzero(ok)
    if not len(hit):
        return -1
    node = int(candidates[hit[0]])
    free[node] -= req
    slots[node] -= 1
    return node


class _Replay:
    """One run's mutable state and the engine's rules; ``run`` drives it step by step."""

    def __init__(self, scenario: Scenario, policy: Policy, autoscaler: Autoscaler | None,
                 rules: EngineRules | None = None) -> None:
        self.s, self.policy, self.ca = scenario, policy, autoscaler
        self.rules = rules or EngineRules()
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
        self.unneeded = np.zeros(N, dtype=np.int64)
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
        self.capacity: CapacityRequest | None = None  # this step's placeholders (Policy.capacity_requests)
        self.held = np.zeros((N, 2))  # room the placeholders hold on each node in the autoscaler's simulation
        self.held_count = np.zeros(N, dtype=np.int64)
        # (node, requests, row of self.avoid) of each placeholder placed in the autoscaler's simulation
        self.held_pods: list[tuple[int, tuple[float, float], int]] = []
        self.avoid = np.zeros((0, N), dtype=bool)  # (P, N) the nodes each of this step's placeholders avoids
        self.placeholder_steps = self.placeholder_scale_ups = self.capacity_tainted_steps = 0
        self.scale_down_disabled_steps = self.scale_down_disabled_marks = 0
        self.attempts = self.rejected = self.ca_evictions = self.moves = self.scale_ups = self.scale_downs = 0

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
        view, still, unplaced = self.view, [], []
        # tainted nodes count as full for the shortcut below (the trace's pods tolerate no taint; _fits decides)
        free = np.where((view.active & ~view.no_schedule)[:, None], view.alloc - view.requested, -1.0)
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
        view.pending = [self.pods[i] for _, i in still]  # what is still pending after this step's scheduling
        self.capacity = self.policy.capacity_requests(view)
        marks = self.policy.scale_down_disabled(view)
        marked = np.zeros_like(view.active) if marks is None else np.asarray(marks, dtype=bool) & view.active
        self.scale_down_disabled_marks += int((marked & ~view.scale_down_disabled).sum())  # annotations written
        view.scale_down_disabled[:] = marked
        self.scale_down_disabled_steps += int(marked.sum())
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

    def _scale_up(self, k: int, pending: list[int], ca: Autoscaler) -> None:
        view = self.view
        up = view.active | (self.ready_at >= 0)
        spare = np.flatnonzero(~up)  # the pool's nodes not provisioned, in pool order
        up &= ~view.no_schedule  # CA's simulation honours NoSchedule taints: a tainted node holds no pending pod
        free = np.where(up[:, None], view.alloc - view.requested, 0.0)
        slots = np.where(up, view.max_pods - view.pod_count, 0)
        opened: list[int] = []
        demands = [(self.pods[i].cpu, self.pods[i].memory) for i in pending]
        n_real = len(demands)
        ph = self.capacity
        avoid = np.zeros((0, len(up)), dtype=bool)
        if ph is not None and len(ph.demands):
            demands += [(float(c), float(m)) for c, m in np.asarray(ph.demands, dtype=float).reshape(-1, 2)]
            avoid = ph.avoid_rows(len(up))
        self.held[:] = 0.0
        self.held_count[:] = 0
        self.held_pods = []
        for j, req in enumerate(demands):
            # a placeholder's required anti-affinity excludes the nodes it avoids (a new node is never one of them)
            where = up if j < n_real else up & ~avoid[j - n_real]
            node = first_fit(free, slots, req, np.flatnonzero(where))
            if node < 0:
                for cand in spare.tolist():
                    if cand in opened or view.alloc[cand, 0] < req[0] or view.alloc[cand, 1] < req[1]:
                        continue
                    opened.append(cand)
                    up[cand] = True
                    avoid[:, cand] = False
                    free[cand] = view.alloc[cand]
                    slots[cand] = view.max_pods[cand]
                    node = first_fit(free, slots, req, np.array([cand]))
                    self.placeholder_scale_ups += j >= n_real
                    break
            if node >= 0 and j >= n_real:  # the room a placeholder holds (scale-down counts it)
                self.held[node] += req
                self.held_count[node] += 1
                self.held_pods.append((node, req, j - n_real))
        self.avoid = avoid
        self.placeholder_steps += len(demands) - n_real
        for node in opened:
            self.ready_at[node] = k + ca.provision_steps
            self.unneeded[node] = 0
        self.scale_ups += len(opened)

    def _scale_down(self, k: int, ca: Autoscaler) -> None:
        view = self.view
        share = ((view.requested + self.held) / view.alloc).max(axis=1)  # the placeholders' room counts as requests
        # a node with the scale-down-disabled annotation is not eligible: never unneeded while it carries it
        low = view.active & (share < ca.scale_down_threshold) & ~view.scale_down_disabled
        self.unneeded = np.where(low, self.unneeded + 1, 0)
        candidates = np.flatnonzero(self.unneeded >= ca.scale_down_unneeded_steps)
        n_up = int(view.active.sum() + (self.ready_at >= 0).sum())
        removed: list[int] = []
        for node in candidates[view.pod_count[candidates] + self.held_count[candidates] == 0].tolist():
            if n_up - len(removed) <= ca.min_nodes:
                break
            removed.append(node)
        nonempty = candidates[view.pod_count[candidates] + self.held_count[candidates] > 0]
        nonempty = nonempty[np.argsort(share[nonempty], kind="stable")]
        drained = 0
        for node in nonempty.tolist():
            if drained >= ca.max_nonempty_per_step or n_up - len(removed) <= ca.min_nodes:
                break
            others = np.flatnonzero(view.active & ~view.no_schedule
                                    & ~np.isin(np.arange(len(share)), [*removed, node]))
            free = view.alloc - view.requested - self.held
            slots = view.max_pods - view.pod_count - self.held_count
            on = [(p.cpu, p.memory) for p in view.running.values() if p.node == node]
            held = [(req, j) for n, req, j in self.held_pods if n == node]  # its placeholders must fit elsewhere too
            if (all(first_fit(free, slots, req, others) >= 0 for req in on)
                    and all(first_fit(free, slots, req, others[~self.avoid[j, others]]) >= 0 for req, j in held)):
                removed.append(node)
                drained += 1
        for node in removed:
            for p in [p for p in view.running.values() if p.node == node]:
                self.ca_evictions += 1
                self.evict(p.index, k + 1)
            view.active[node] = False
            view.memory_pressure[node] = False  # a node provisioned again later starts without the condition
            view.scale_down_disabled[node] = False  # and without the annotations of the Node object deleted
            self.last_pressure[node] = -(10**9)
            self.unneeded[node] = 0
        self.scale_downs += len(removed)

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
                         autoscaler=self.ca.describe() if self.ca else "none (fixed pool)", ran=self.ran,
                         memory_pressure=self.pressure_t, served=self.served,
                         capacity=capacity,
                         warmup_steps=self.rules.warmup_steps(s.step_s, T), rules=self.rules)


def run(scenario: Scenario, policy: Policy, progress: Callable[[int, int], None] | None = None,
        autoscaler: Autoscaler | None = None, rules: EngineRules | None = None) -> RunResult:
    """Replay ``scenario`` with ``policy`` (and the autoscaler, if given) under ``rules`` (default: Kubernetes'
    defaults); returns the truth and the accounting."""
    t_start = time.perf_counter()
    replay = _Replay(scenario, policy, autoscaler, rules)
    policy.setup(replay.view)
    T = scenario.n_steps
    for k in range(T):
        replay.begin(k)
        replay.schedule(k)
        replay.truth(k)
        replay.autoscale(k)
        if progress is not None:
            progress(k + 1, T)
    policy.close()
    return replay.result(time.perf_counter() - t_start)
