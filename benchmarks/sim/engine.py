"""The discrete-event replay: 5-minute steps, pods arriving and leaving, one policy placing them.

Step k (time ``k * step_s`` from the replay start), in this order:

1. pods whose departure step is k leave their node (``policy.released``); pending pods whose departure
   step has come leave the queue unplaced (counted as *failed*);
2. pods arriving at step k join the queue, in arrival order (a heap keyed by (arrival time, index));
3. ``policy.observe(view)``: the policy sees what monitoring knows by now: every node's usage up to the end
   of step k-1, requests, the recent bindings (bound during step k, not yet in any metric), the queue;
4. every queued pod, in order, gets one scheduling attempt: ``policy.place`` names a node or None; the
   engine checks the requests fit (a policy cannot overcommit requests), binds, and calls ``policy.bound``;
   unplaced pods stay queued for the next step;
5. the truth for step k: each node's usage = sum over its pods of request x usage ratio (hidden from
   policies until step k+1), recorded in the history.

The engine, the trace and the seed are the same for every policy; only ``place`` differs.
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
    node: int = -1  # index of its node once bound
    bound_step: int = -1
    attempts: int = 0

    @property
    def requests(self) -> np.ndarray:
        return np.array([self.cpu, self.memory])


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
        self.taints: list[list[tuple[str, str, str]]] = scenario.node_taints
        self.unschedulable = np.zeros(len(self.node_names), dtype=bool)
        self.requested = np.zeros((len(self.node_names), 2))  # sum of bound pods' requests
        self.pod_count = np.zeros(len(self.node_names), dtype=np.int64)
        # usage_history[:, j] = true usage (cpu milli, memory bytes) of step j; only j < step is visible
        self._usage = np.zeros((len(self.node_names), scenario.n_steps, 2))
        self.step = 0
        self.recent: list[Binding] = []  # bound during this step: no metric shows them yet
        self.pending: list[SimPod] = []  # the queue at observe time, in scheduling order
        self.running: dict[int, SimPod] = {}  # pod index -> bound pod
        self._upcoming: list[SimPod] = []  # all pods sorted by arrival (for plan-driven policies)
        self._forecasts: dict[tuple[int, str, float], dict[str, np.ndarray]] = {}

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
    def upcoming(self, horizon_steps: int) -> list[SimPod]:
        """Pods that will arrive in the next ``horizon_steps`` steps (requests only). This is the trace's
        future: a policy that uses it has oracle knowledge of arrivals and must say so in its name/report."""
        lo, hi = self.step + 1, self.step + horizon_steps
        return [p for p in self._upcoming if lo <= p.arrival_step <= hi]

    def free(self) -> np.ndarray:
        """(N, 2) allocatable minus requested."""
        return self.alloc - self.requested


class Policy:
    """A scheduling policy. Subclasses implement ``place``; the hooks default to doing nothing.

    - ``observe(sim)``: once per step, before that step's scheduling;
    - ``place(pod, sim)``: a node name, or None (unschedulable now; retried next step);
    - ``bound(pod, node, sim)``: after the engine bound the pod;
    - ``released(pod, node, sim)``: after a bound pod left its node.
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

    def close(self) -> None: ...


@dataclass
class RunResult:
    policy: str
    mode: str
    scenario: str
    usage: np.ndarray  # (N, T, 2) true usage, absolute
    alloc: np.ndarray  # (N, 2)
    requested: np.ndarray  # (N, T, 2) requests bound during each step (after scheduling)
    pods_on_node: np.ndarray  # (N, T) pod count during each step
    pods: list[SimPod]
    attempts: int
    rejected_placements: int  # policy answers the engine refused (requests did not fit)
    wall_s: float
    latencies: dict[str, list[float]]
    step_s: float
    median_pod: np.ndarray  # (2,) median request of the scenario's pods
    extra: dict[str, Any] = field(default_factory=dict)


def _fits(view: SimView, node: int, pod: SimPod) -> bool:
    free = view.alloc[node] - view.requested[node]
    return bool(free[0] >= pod.cpu and free[1] >= pod.memory and view.pod_count[node] < view.max_pods[node])


def run(scenario: Scenario, policy: Policy, progress: Callable[[int, int], None] | None = None) -> RunResult:
    """Replay ``scenario`` with ``policy``; returns the truth and the accounting."""
    t_start = time.perf_counter()
    view = SimView(scenario)
    pods = [SimPod(i, name, f"sim-{i:06d}", float(scenario.pod_cpu[i]), float(scenario.pod_memory[i]),
                   int(scenario.pod_arrival[i]), int(scenario.pod_departure[i]), scenario.pod_qos[i])
            for i, name in enumerate(scenario.pod_names)]
    view._upcoming = sorted(pods, key=lambda p: (p.arrival_step, p.index))
    arrivals: list[tuple[int, int]] = [(p.arrival_step, p.index) for p in pods]
    heapq.heapify(arrivals)
    queue: list[tuple[int, int]] = []  # (arrival step, index): the scheduling queue, oldest first
    T, N = scenario.n_steps, scenario.n_nodes
    requested_t = np.zeros((N, T, 2))
    count_t = np.zeros((N, T), dtype=np.int64)
    attempts = rejected = 0
    policy.setup(view)
    by_departure: dict[int, list[int]] = {}
    for k in range(T):
        view.step = k
        # 1. departures (bound pods free their requests; pending pods give up)
        for i in by_departure.pop(k, []):
            pod = pods[i]
            if pod.node >= 0 and i in view.running:
                node = pod.node
                view.requested[node] -= (pod.cpu, pod.memory)
                view.pod_count[node] -= 1
                del view.running[i]
                policy.released(pod, view.node_names[node], view)
        queue = [(a, i) for a, i in queue if pods[i].departure_step > k]
        # 2. arrivals
        while arrivals and arrivals[0][0] <= k:
            a, i = heapq.heappop(arrivals)
            queue.append((a, i))
        queue.sort()
        # 3. monitoring
        view.recent = []
        view.pending = [pods[i] for _, i in queue]
        policy.observe(view)
        # 4. scheduling
        still: list[tuple[int, int]] = []
        free = view.alloc - view.requested
        for a, i in queue:
            pod = pods[i]
            pod.attempts += 1
            attempts += 1
            # No node can hold the requests: every policy must answer None, so skip asking (saves time at scale).
            if not ((free[:, 0] >= pod.cpu) & (free[:, 1] >= pod.memory)).any():
                still.append((a, i))
                continue
            name = policy.place(pod, view)
            node = view.node_index.get(name, -1) if name is not None else -1
            if node < 0 or not _fits(view, node, pod):
                rejected += name is not None
                still.append((a, i))
                continue
            pod.node, pod.bound_step = node, k
            view.requested[node] += (pod.cpu, pod.memory)
            free[node] -= (pod.cpu, pod.memory)
            view.pod_count[node] += 1
            view.running[i] = pod
            view.recent.append(Binding(pod, node, k))
            by_departure.setdefault(max(pod.departure_step, k + 1), []).append(i)
            policy.bound(pod, name, view)  # type: ignore[arg-type]
        queue = still
        # 5. truth for step k
        if view.running:
            idx = np.fromiter(view.running.keys(), dtype=np.int64, count=len(view.running))
            nodes = np.fromiter((pods[i].node for i in idx.tolist()), dtype=np.int64, count=len(idx))
            ratio = scenario.pod_usage[idx, k, :].astype(float)
            for r, req in enumerate((scenario.pod_cpu, scenario.pod_memory)):
                view._usage[:, k, r] = np.bincount(nodes, weights=req[idx] * ratio[:, r], minlength=N)
        requested_t[:, k] = view.requested
        count_t[:, k] = view.pod_count
        if progress is not None:
            progress(k + 1, T)
    policy.close()
    median_pod = np.array([np.median(scenario.pod_cpu), np.median(scenario.pod_memory)]) if scenario.n_pods else np.zeros(2)
    return RunResult(policy.name, policy.mode, scenario.name, view._usage, view.alloc.copy(), requested_t, count_t, pods,
                     attempts, rejected, time.perf_counter() - t_start, policy.latencies, scenario.step_s, median_pod,
                     extra=getattr(policy, "extra", {}))
