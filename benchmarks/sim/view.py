"""What a replay policy sees and implements: the pods (``SimPod``), the cluster as monitoring and the API server
show it (``SimView``), the ``Policy`` interface and its capacity signal (``CapacityRequest``), and the taints the
engine sets. ``benchmarks/sim/engine.py`` drives them and re-exports every name here."""

from __future__ import annotations

from dataclasses import dataclass, field

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
        self.offset_s = 0.0  # seconds into the step of the current scheduling round (0: the step's first)
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
        """Seconds since the replay start: the step's start, plus the retry round's offset during the step's later
        scheduling rounds (``EngineRules.retry_s``)."""
        return self.step * self.step_s + self.offset_s

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
    ``latencies`` (verb -> seconds per call) and ``mode`` are reported when a policy calls an extender.
    ``retries_within_step``: the policy's answer for a pod it refused may change later in the same step (it reads
    ``sim.now``, e.g. a hold that expires): the engine then asks again about its still-queued pods at every retry
    round of the step (``EngineRules.retry_s``; partial-step starts). False (the default): nothing a policy reads
    changes within a step except this step's own bindings, which only take room, so one round is the same."""

    name = "policy"
    mode = "in-process model"
    retries_within_step = False

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


def tolerates(pod: SimPod, taint: tuple[str, str, str]) -> bool:
    """The pod tolerates the taint (key, value, effect): a toleration (key, effect) with its key and its effect or
    every effect (the trace's pods tolerate nothing)."""
    return any(k == taint[0] and (e == "" or e == taint[2]) for k, e in pod.tolerations)


