"""``kso``, ``kso-http`` and ``kso-inproc``: kube-scheduler's default profile plus the real kso extender (its
default agents and weights), the way kube-scheduler drives an extender with ``nodeCacheCapable: true``. ``kso`` is
kso's default configuration, exactly what ``kso extender`` does out of the box (statistics from its forecaster, no
capacity signal, pods judged at their requests), in-process; ``kso-inproc`` and ``kso-http`` take every knob below
(``kso bench --scenario`` gives ``kso-inproc`` and ``kso-plan`` the 15-minute window's statistics unless the spec
says ``stats=``).

Per pod: the in-tree filters and node sampling pick the feasible nodes; ``/filter`` (NodeNames) removes
the ones kso judges unsafe; if more than one is left, ``/prioritize``; final score = the default profile's
plugin scores + extender score (0..10) x weight x 10 (extender-protocol.md), random tie-break; ``/bind``
through the extender (RecordingBinder), so kso's own assumed-pod accounting is what decides the next pod.

``kso-http`` talks HTTP to the FastAPI app on 127.0.0.1 (uvicorn in a thread, one keep-alive connection) and
records each call's client-side latency; ``kso`` and ``kso-inproc`` call ``extender.verbs.Extender`` directly.

The replay's clock: second 0 of the replay is ``SIM_EPOCH`` (UTC); a pod's ``metadata.creationTimestamp`` is the
time it (re-)entered the queue (an evicted, OOM-killed or drained pod comes back as a new pod of its Deployment), and
the safe agent's clock reads the step being scheduled, so its bounded holding (``KSO_SAFE_MAX_HOLD_S``) counts
simulated time, never wall time.

Load statistics: at every step the node annotations kube-safe-scheduler's annotator would write are
recomputed from the visible history and the nodes are upserted into kso's ClusterState:
``mean-free-*`` = allocatable - 15-minute mean usage, ``std-free-*`` = the forecaster's std of the next
15 minutes, ``forcasted-free-*`` = allocatable - the forecast mean (cpu millicores, memory MB). With
``stats="window"`` the std is the 15-minute std and there is no forecast (cheaper). With ``stats="trend"``
(what a production kso must plan with: a spread that covers the time until the next decision) the
15-minute mean is raised by the upward trend of the node's current pods' summed usage over the last hour
times the horizon, and the std is the larger of the 15-minute std and that hour's std (``trend_stats``).

Recent binds: a pod counts at full weight (its size, below) on its node until the 15-minute window has fully
seen it: within its step through kso's recent-bind list, after it through the statistics themselves
(``settled_window_stats``); the forecast's mean is corrected by the same amount (its history has the pod's partial
samples only).

``judge``: the size kso judges a pod at. "request" (kso's default): its requests. "usage": what it will use, its
Deployment's measured mean usage / request over the last hour (``owner_usage_ratio``, its running pods' samples
since each was bound) times its request, its request where fewer than ``MIN_USAGE_SAMPLES`` samples exist; the
pod kso is asked about (and binds, hence its recent-bind load) carries that size as its cpu and memory requests,
kube-scheduler's own filters and scores keep the real ones.

``capacity``: the capacity signal kso sends the cluster-autoscaler (``benchmarks.sim.engine.CapacityRequest``,
``Policy.capacity_taints``). "none" (kso's default: ``KSO_CAPACITY_SIGNAL`` off). "placeholder": one placeholder
per pod kso's filter refused on every node it was offered in this step and still pending (the oldest first, at
most ``max_placeholders``), requesting that pod's requests, avoiding the nodes kso refused it on (its own hot
nodes; a new node is none of them). "taint": the capacity taint on the nodes whose load alone the safe agent
judges over U* (risk > eps for a pod of no size), kept until that risk has fallen to ``exit_ratio`` x eps
(hysteresis). "both": the two.

``mark``: which nodes kso annotates ``cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"``
(``Policy.scale_down_disabled``), so the autoscaler does not take away a node whose pods kso would have nowhere to
put. "none" (the default): no node. "refused": every step, each ready node whose requested cpu or memory is below
``mark_below`` of allocatable (the autoscaler's scale-down-utilization-threshold: only such a node can be taken
away) or that carries the mark is judged: it needs the mark when one of its pods, at the size kso judges it
(``judge``), is refused by the safe agent (risk > eps) on every other ready node kube-scheduler could offer it
(requests fit, a pod slot, no NoSchedule taint). Other nodes able to take it by requests but all refusing it is the
loop the mark stops: drained, that pod is pending, refused, and orders a node back. A pod no other node could take
by requests is left to the autoscaler's own drain check. The mark stays ``mark_hold`` steps after the rule last held
(0: it goes the step the rule stops holding), so the cluster shrinks again once kso would place the pods elsewhere.
"""

from __future__ import annotations

import http.client
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson

from benchmarks.sim.engine import MEMORY_PRESSURE_TAINT, CapacityRequest, Policy, SimPod, SimView
from benchmarks.sim.policies.framework import Framework
from benchmarks.sim.policies.kso_load import (  # noqa: F401 - re-exported: kso_plan and the tests import them from here
    TREND_STEPS,
    WINDOW_S,
    node_load_stats,
    owner_usage_ratio,
    settled_window_stats,
    trend_stats,
)
from kso.core.resources import MIB

EXTENDER_WEIGHT = 5  # the README's KubeSchedulerConfiguration (extenders[].weight)
EXTENDER_SCORE_SCALE = 10  # MaxNodeScore / MaxExtenderPriority
FORECAST_HORIZON_S = 900.0
# the extender's "recent bind" window is wall-clock based; the replay runs faster than real time, so it is
# reset at each step boundary and left open within the step; a pod bound at an earlier step that the statistics
# window has not fully seen is counted at its request by the statistics themselves (settled_window_stats).
OPEN_WINDOW_S = 1e9
# kso filters whose verdict is a function of the pod's requests and the nodes' cached rows alone (see
# KsoExtenderPolicy._repeat_key)
PURE_FILTERS = frozenset({"safe-overload"})
SIM_EPOCH = datetime(2019, 5, 1, tzinfo=UTC)  # second 0 of the replay (the Google 2019 trace's month)
USAGE_STEPS = 12  # judge="usage": the last hour of each Deployment's running pods' measured usage
JUDGE_MODES = {
    "request": "a pod judged at its requests",
    "usage": "a pod judged at its Deployment's measured mean usage over the last hour (its requests where unknown)",
}
CAPACITY_MODES = {
    "none": "no capacity signal",
    "placeholder": "placeholder pods for the demand kso refuses, avoiding the nodes it refused them on",
    "taint": "the capacity taint on nodes whose load alone is over U* (hysteresis)",
    "both": "placeholders and the capacity taint",
}
MARK_MODES = {
    "none": "no node marked scale-down-disabled",
    "refused": "nodes holding a pod the safe agent refuses on every other node marked scale-down-disabled",
}
MARK_BELOW = 0.5  # mark="refused": the cluster-autoscaler's default scale-down-utilization-threshold
EXIT_RATIO = 0.8  # capacity="taint": a tainted node is released when its risk falls to this fraction of eps
MAX_PLACEHOLDERS = 200  # capacity="placeholder": at most this many at once (the oldest refused pods first)
STATS_MODES = {
    "forecast": "node statistics: the kso forecaster's mean and std of the next 15 minutes",
    "window": "node statistics: the 15-minute window's mean and std (load-watcher's)",
    "trend": "node statistics: 15-minute mean + upward trend of the node's current pods' summed usage over the last "
             "hour x the horizon, std = max(15-minute std, that hour's std)",
}


def node_object(name: str, cpu_milli: float, memory_bytes: float, max_pods: int, labels: dict[str, str],
                taints: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels), "annotations": {}},
        "spec": {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in taints]},
        "status": {"allocatable": {"cpu": f"{int(cpu_milli)}m", "memory": str(int(memory_bytes)), "pods": str(max_pods)},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def sim_time(seconds: float) -> float:
    """Epoch seconds of the replay's second ``seconds``."""
    return SIM_EPOCH.timestamp() + seconds


def pod_object(pod: SimPod, step_s: float | None = None, size: tuple[float, float] | None = None) -> dict[str, Any]:
    """The Pod kube-scheduler would send; with ``step_s``, created when it (re-)entered the queue; with ``size``,
    requesting that (cpu millicores, memory bytes) instead of its requests (judge="usage")."""
    cpu, memory = size if size is not None else (pod.cpu, pod.memory)
    meta: dict[str, Any] = {"name": pod.name, "namespace": "sim", "uid": pod.uid}
    if step_s is not None and pod.queued_step >= 0:
        when = datetime.fromtimestamp(sim_time(pod.queued_step * step_s), UTC)
        meta["creationTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    if pod.owner:  # the Deployment's ReplicaSet: kso's workload class
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": pod.owner, "uid": pod.owner,
                                    "controller": True}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "sim/workload:1",
                                 "resources": {"requests": {"cpu": f"{int(cpu)}m", "memory": str(int(memory))}}}],
                 **({"nodeSelector": pod.node_selector} if pod.node_selector else {})},
        "status": {"phase": "Pending"},
    }


# Annotations (kube-safe-scheduler units: cpu millicores, memory MB):
#   mean-free = alloc - mean usage (15 min); std-free = std (forecast, else 15-min window);
#   forcasted-free = alloc - forecast mean x alloc.
def load_annotations(alloc: np.ndarray, mean_used: np.ndarray, std_used: np.ndarray,
                     forecast_used: np.ndarray | None) -> list[dict[str, str]]:
    scale = np.array([1.0, 1.0 / MIB])
    mean_free = np.maximum(alloc - mean_used, 0.0) * scale
    std = std_used * scale
    fc_free = None if forecast_used is None else np.maximum(alloc - forecast_used, 0.0) * scale
    out = []
    for i in range(len(alloc)):
        ann = {"mean-free-cpu": f"{mean_free[i, 0]:.0f}", "mean-free-memory": f"{mean_free[i, 1]:.0f}",
               "std-free-cpu": f"{std[i, 0]:.0f}", "std-free-memory": f"{std[i, 1]:.0f}"}
        if fc_free is not None:
            ann["forcasted-free-cpu"] = f"{fc_free[i, 0]:.0f}"
            ann["forcasted-free-memory"] = f"{fc_free[i, 1]:.0f}"
        out.append(ann)
    return out


class KsoExtenderPolicy(Policy):
    """kube-scheduler (default profile) + the kso extender over HTTP."""

    name = "kso-http"
    mode = "HTTP: real kso extender (uvicorn on 127.0.0.1), NodeNames mode"
    retries_within_step = True  # the safe agent's hold (KSO_SAFE_MAX_HOLD_S) can expire within a step
    http = True

    def __init__(self, seed: int = 0, sample: bool = True, stats: str = "forecast", forecaster: str = "",
                 env: dict[str, str] | None = None, extender_weight: int = EXTENDER_WEIGHT, judge: str = "request",
                 capacity: str = "none", exit_ratio: float = EXIT_RATIO,
                 max_placeholders: float = MAX_PLACEHOLDERS, mark: str = "none", mark_hold: float = 0,
                 mark_below: float = MARK_BELOW) -> None:
        super().__init__(seed)
        self.framework = Framework(seed, sample)
        for what, value, known in (("stats", stats, STATS_MODES), ("judge", judge, JUDGE_MODES),
                                   ("capacity", capacity, CAPACITY_MODES), ("mark", mark, MARK_MODES)):
            if value not in known:
                raise ValueError(f"{self.name}: {what} must be one of {', '.join(known)}, not {value!r}")
        if not 0.0 <= exit_ratio <= 1.0 or max_placeholders < 0:
            raise ValueError(f"{self.name}: exit_ratio must be in [0, 1] and max_placeholders at least 0")
        if mark_hold < 0 or mark_hold != int(mark_hold) or not 0.0 < mark_below <= 1.0:
            raise ValueError(f"{self.name}: mark_hold must be a whole number of steps >= 0 and mark_below in (0, 1], "
                             f"not {mark_hold!r} and {mark_below!r}")
        self.mark, self.mark_hold, self.mark_below = mark, int(mark_hold), float(mark_below)
        self._keep: Any = None  # mark="refused": decisions.capacity.KeepDecision (when each node was last needed)
        self.stats, self.judge, self.capacity = stats, judge, capacity
        self.exit_ratio, self.max_placeholders = float(exit_ratio), int(max_placeholders)
        self.mode = f"{self.mode}; {STATS_MODES[stats]}; {JUDGE_MODES[judge]}; {CAPACITY_MODES[capacity]}"
        if mark != "none":
            self.mode = f"{self.mode}; {MARK_MODES[mark]}"
        self._owner_ratio: dict[str, np.ndarray] = {}  # judge="usage": Deployment -> measured usage / request
        self._sizes: dict[int, np.ndarray] = {}  # pod index -> the size kso judged (and bound) it at
        self._refused: dict[int, tuple[int, np.ndarray]] = {}  # pod index -> (step, nodes kso's filter refused it on)
        self._tainted_nodes: np.ndarray | None = None  # capacity="taint": the nodes carrying the taint
        self.forecaster = forecaster
        self.env = env or {}
        if self.env:  # a non-default configuration is labelled in every table
            self.name = f"{self.name}[{','.join(f'{k}={v}' for k, v in sorted(self.env.items()))}]"
        self.extender_weight = extender_weight
        self.extra: dict[str, Any] = {"observe_s": 0.0, "forecast_s": 0.0, "filtered_out": 0, "filter_calls": 0}
        self._rejected: dict[tuple[Any, ...], np.ndarray] = {}  # see ``_repeat_key``
        self._pods: dict[int, dict[str, Any]] = {}
        self._server: Any = None
        self.safe: Any = None  # the extender's safe agent, when enabled
        self._conn: http.client.HTTPConnection | None = None

    # ---- lifecycle ----
    def setup(self, sim: SimView) -> None:
        from extender.config import load_config
        from extender.verbs import Extender
        from kso.core.binder import RecordingBinder
        from kso.core.cluster import ClusterState
        from kso.core.objects import node_from_k8s

        config = load_config({"KSO_CLUSTER_SOURCE": "SNAPSHOT", "LOG_LEVEL": "WARNING", **self.env})
        self.state = ClusterState(recent_window_s=OPEN_WINDOW_S)
        # The Extender over a ClusterState we fill ourselves (extender.server.build would load a snapshot file).
        self.extender = Extender(config, self.state, RecordingBinder())
        self.base_nodes = [node_from_k8s(node_object(n, *sim.alloc[i], int(sim.max_pods[i]), sim.labels[i],
                                                     sim.scenario_taints[i]))
                           for i, n in enumerate(sim.node_names)]
        # the same nodes carrying the memory-pressure taint (built when a node first gets it)
        self.pressure_nodes: list[Any] = [None] * len(self.base_nodes)
        self._tainted = np.zeros(len(self.base_nodes), dtype=bool)  # what kso's node watch last reported
        for node in self.base_nodes:
            self.state.upsert_node(node)
        self.state.mark_synced("benchmarks.sim")
        self.safe = self.extender.agents.get("safe")
        if self.safe is not None:  # bounded holding counts the replay's time
            self.safe.clock = lambda: sim_time(sim.now)
        if self.http:
            from extender.app import create_app
            from extender.demo import BackgroundServer

            self._server = BackgroundServer(create_app(self.extender)).__enter__()
            self._conn = http.client.HTTPConnection("127.0.0.1", self._server.port, timeout=30)

    def close(self) -> None:
        self.extra["safe_released"] = int(self.extender.metrics.safe_released._value.get())
        if self._conn is not None:
            self._conn.close()
        if self._server is not None:
            self._server.__exit__(None, None, None)
            self._server = None

    # ---- calls ----
    def _post(self, verb: str, body: dict[str, Any]) -> Any:
        t0 = time.perf_counter()
        if self.http:
            assert self._conn is not None
            data = orjson.dumps(body)
            try:
                self._conn.request("POST", f"/{verb}", data, {"Content-Type": "application/json"})
            except (BrokenPipeError, ConnectionResetError):
                # the server closed the idle keep-alive connection (KSO_HEADER_TIMEOUT_S: e.g. a slow forecast
                # step between two calls): open a new one, as kube-scheduler's HTTP client does
                self._conn.close()
                self._conn.request("POST", f"/{verb}", data, {"Content-Type": "application/json"})
            resp = self._conn.getresponse()
            raw = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"extender /{verb}: HTTP {resp.status}: {raw[:300]!r}")
            out = orjson.loads(raw)
        else:
            from extender.protocol import parse_binding_args, parse_extender_args

            data = orjson.dumps(body)  # same bytes as on the wire: the in-process path parses them too
            ext = self.extender
            if verb == "filter":
                out = ext.filter(parse_extender_args(data))
            elif verb == "prioritize":
                out = ext.prioritize(parse_extender_args(data))
            else:
                out = ext.bind(parse_binding_args(data))
        self.latencies.setdefault(verb, []).append(time.perf_counter() - t0)
        return out

    # ---- monitoring -> annotations ----
    def observe(self, sim: SimView) -> None:
        t0 = time.perf_counter()
        self._rejected.clear()  # new statistics, nodes added or removed
        if self.judge == "usage":
            from optimizer.plan.cluster_problem import MIN_USAGE_SAMPLES

            self._owner_ratio = owner_usage_ratio(sim, USAGE_STEPS, MIN_USAGE_SAMPLES)
        mean, std, has = node_load_stats(sim, self.stats, FORECAST_HORIZON_S / sim.step_s,
                                         self._sizes if self.judge == "usage" else None)
        # the node watch: nodes the autoscaler removed leave kso's cache, provisioned ones join it, the
        # memory-pressure taint comes and goes
        for i, node in enumerate(self.base_nodes):
            if not sim.active[i] and self.state.node(node.name) is not None:
                self.state.remove_node(node.name)
            elif sim.active[i] and (self.state.node(node.name) is None or self._tainted[i] != sim.memory_pressure[i]):
                self.state.upsert_node(self._node(i, sim))
        self._tainted[:] = sim.memory_pressure
        # the statistics count every pod bound before this step (settled_window_stats): expire kso's recent-bind
        # list, then reopen it
        self.state.recent_window_s = 0.0
        self.state.view([])
        self.state.recent_window_s = OPEN_WINDOW_S
        if not has:
            return
        forecast_used = None
        if self.stats == "forecast":
            t1 = time.perf_counter()
            fc = sim.node_forecasts(self.forecaster, FORECAST_HORIZON_S)
            self.extra["forecast_s"] += time.perf_counter() - t1
            if fc is not None:
                # the forecast's history has the partial samples of the pods the window has not fully seen: the
                # same correction as the window's mean (those pods at their size, settled_window_stats)
                raw_mean, _, _ = sim.window_stats(max(1, int(round(WINDOW_S / sim.step_s))))
                forecast_used = np.maximum(fc["mean"] * sim.alloc + (mean - raw_mean), 0.0)
                std = fc["std"] * sim.alloc
        for i, ann in enumerate(load_annotations(sim.alloc, mean, std, forecast_used)):
            if sim.active[i]:
                self.state.upsert_node(replace(self._node(i, sim), annotations=ann, memo={}))
        self.extra["observe_s"] += time.perf_counter() - t0

    def _node(self, i: int, sim: SimView) -> Any:
        """Node ``i`` as the API server has it now: with the memory-pressure taint while it carries it."""
        if not sim.memory_pressure[i]:
            return self.base_nodes[i]
        if self.pressure_nodes[i] is None:
            from kso.core.objects import node_from_k8s

            self.pressure_nodes[i] = node_from_k8s(node_object(sim.node_names[i], *sim.alloc[i], int(sim.max_pods[i]),
                                                               sim.labels[i],
                                                               [*sim.scenario_taints[i], MEMORY_PRESSURE_TAINT]))
        return self.pressure_nodes[i]

    def released(self, pod: SimPod, node: str, sim: SimView) -> None:
        self.state.remove_pod(pod.uid)  # what kso's pod watch would report
        self._rejected.clear()
        self._pods.pop(pod.index, None)
        self._sizes.pop(pod.index, None)

    def size(self, pod: SimPod) -> tuple[float, float]:
        """The size kso judges ``pod`` at (``judge``): cpu millicores, memory bytes."""
        ratio = self._owner_ratio.get(pod.owner) if self.judge == "usage" else None
        if ratio is None:
            return pod.cpu, pod.memory
        return float(pod.cpu * ratio[0]), float(pod.memory * ratio[1])

    # ---- the capacity signal ----
    def capacity_requests(self, sim: SimView) -> CapacityRequest | None:
        """capacity="placeholder"/"both": a placeholder per pod still pending that kso's filter refused on every node
        it was offered in this step, oldest first, avoiding those nodes."""
        if self.capacity not in ("placeholder", "both"):
            return None
        refused = [(p, self._refused[p.index][1]) for p in sim.pending
                   if p.index in self._refused and self._refused[p.index][0] == sim.step][: self.max_placeholders]
        self._refused.clear()
        self.extra["placeholders"] = self.extra.get("placeholders", 0) + len(refused)
        if not refused:
            return None
        return CapacityRequest(np.array([(p.cpu, p.memory) for p, _ in refused]), np.stack([m for _, m in refused]))

    def capacity_taints(self, sim: SimView) -> np.ndarray | None:
        """capacity="taint"/"both": the nodes whose load alone the safe agent judges over U* (risk > eps for a pod of
        no size); a tainted node keeps the taint until that risk is at most exit_ratio x eps."""
        if self.capacity not in ("taint", "both") or self.safe is None:
            return None
        from decisions.agents.base import Call
        from kso.core.objects import pod_from_k8s

        if self._tainted_nodes is None:
            self._tainted_nodes = np.zeros(len(sim.node_names), dtype=bool)
        active = np.flatnonzero(sim.active)
        risk = np.zeros(len(sim.node_names))
        if len(active):
            probe = pod_from_k8s(pod_object(SimPod(-1, "kso-hot-probe", "kso-hot-probe", 0.0, 0.0, 0, 0)))
            inputs = self.safe.inputs(Call(probe, self.state.view([sim.node_names[i] for i in active.tolist()])))
            risk[active] = np.where(inputs.valid, inputs.risk, 0.0).max(axis=1)
        eps = self.safe.eps
        self._tainted_nodes = sim.active & ((risk > eps) | (self._tainted_nodes & (risk > self.exit_ratio * eps)))
        return self._tainted_nodes.copy()

    def scale_down_disabled(self, sim: SimView) -> np.ndarray | None:
        """mark="refused": the nodes to annotate scale-down-disabled now (the rule in the module's docstring: the
        product's, decisions.capacity's ``refused_on_every_other`` and ``KeepDecision``)."""
        if self.mark == "none" or self.safe is None:
            return None
        from decisions.capacity import KeepDecision

        t0 = time.perf_counter()
        if self._keep is None:
            self._keep = KeepDecision(hold_s=self.mark_hold * sim.step_s)
        share = (sim.requested / sim.alloc).max(axis=1)
        judge = sim.active & (sim.pod_count > 0) & ((share < self.mark_below) | sim.scale_down_disabled)
        needed = []
        if judge.any():
            on: dict[int, list[SimPod]] = {}
            for p in sim.running.values():
                if judge[p.node]:
                    on.setdefault(p.node, []).append(p)
            needed = [sim.node_names[n] for n in np.flatnonzero(judge).tolist()
                      if self._pods_refused_elsewhere(on.get(n, []), n, sim)]
        kept = self._keep.step(sim.now, needed, [sim.node_names[i] for i in np.flatnonzero(sim.active).tolist()])
        marked = np.zeros(len(sim.node_names), dtype=bool)
        marked[[sim.node_index[n] for n in kept]] = True
        self.extra["mark_s"] = self.extra.get("mark_s", 0.0) + time.perf_counter() - t0
        return marked

    def _pods_refused_elsewhere(self, pods: list[SimPod], node: int, sim: SimView) -> bool:
        """Some pod of ``pods`` (bound on ``node``), at the size kso judges it, is refused by the safe agent on every
        other ready node kube-scheduler could offer it by its requests, and at least one such node exists."""
        from decisions.capacity import refused_on_every_other
        from kso.core.objects import pod_from_k8s

        others = np.flatnonzero(sim.active & ~sim.no_schedule)
        others = others[others != node]
        if not len(others) or not pods:
            return False
        free = sim.alloc[others] - sim.requested[others]
        slots = sim.pod_count[others] < sim.max_pods[others]
        view = self.state.view([sim.node_names[i] for i in others.tolist()])
        for p in pods:
            can = slots & (free[:, 0] >= p.cpu) & (free[:, 1] >= p.memory)
            probe = pod_from_k8s(pod_object(SimPod(-1, "kso-mark-probe", "kso-mark-probe", *self.size(p), 0, 0)))
            if can.any() and refused_on_every_other(self.safe, view, probe, can):
                return True
        return False

    # ---- scheduling ----
    def place(self, pod: SimPod, sim: SimView) -> str | None:
        idx = self.framework.feasible(pod, sim)
        if len(idx) == 0:
            return None
        size = self.size(pod)
        cached = self._pods.get(pod.index)
        if cached is None or cached[0] != size:
            cached = self._pods[pod.index] = (size, pod_object(pod, sim.step_s, size if self.judge == "usage" else None))
        body = cached[1]
        names = [sim.node_names[i] for i in idx.tolist()]
        self.extra["filter_calls"] += 1
        key = self._repeat_key(pod, size)
        known = self._rejected.get(key) if key is not None and not self._held(pod, sim) else None
        if known is not None and known[idx].all():
            self.extender.parse_pod(body)  # what the call would leave behind: kso remembers the pending pod
            self.extra["filtered_out"] += len(names)
            self.extra["filter_repeats"] = self.extra.get("filter_repeats", 0) + 1
            passed: list[str] = []
        else:
            reply = self._post("filter", {"Pod": body, "NodeNames": names})
            passed = reply.get("NodeNames") or []
            self.extra["filtered_out"] += len(names) - len(passed)
            if not passed and key is not None:
                if known is None:
                    known = self._rejected[key] = np.zeros(len(sim.node_names), dtype=bool)
                known[idx] = True
        if not passed:
            rest = self._unoffered(pod, idx, sim)
            if len(rest):  # the step's retries: kube-scheduler offers the pod the next samples
                rest_names = [sim.node_names[i] for i in rest.tolist()]
                self.extra["filter_calls"] += 1
                if known is not None and known[rest].all():
                    self.extra["filtered_out"] += len(rest_names)
                    self.extra["filter_repeats"] = self.extra.get("filter_repeats", 0) + 1
                else:
                    passed = self._post("filter", {"Pod": body, "NodeNames": rest_names}).get("NodeNames") or []
                    self.extra["filtered_out"] += len(rest_names) - len(passed)
                    if not passed and known is not None:
                        known[rest] = True
            if not passed:
                self._refuse(pod, np.concatenate([idx, rest]), sim)
                return None
        if len(passed) == 1:  # prioritize is not called when only one node is feasible
            return str(passed[0])
        scores = self._post("prioritize", {"Pod": body, "NodeNames": passed})
        ext = {s["Host"]: int(s["Score"]) for s in scores}
        pidx = np.array([sim.node_index[n] for n in passed], dtype=np.int64)
        total = self.framework.default_scores(pod, sim, pidx) + np.array(
            [ext.get(n, 0) for n in passed], dtype=np.int64) * self.extender_weight * EXTENDER_SCORE_SCALE
        return sim.node_names[self.framework.pick(pidx, total)]

    # kso's filters here (only "safe-overload") judge each node from the pod's requests and that node's row
    # alone. So a pod with the same requests, owner and rules as pods kso rejected on every node of their
    # calls is rejected again on every node of a call whose nodes are all among those, as long as those rows
    # did not change: a bind forgets its node, a release or new statistics forget everything. The in-process
    # replay answers such a call without making it (a queue of pending replicas, asked every step over the
    # rotating node sample, was most of a long run's filter time). The counters count it as the call it
    # stands for; HTTP calls are always made (their latency is measured). None: no reuse.
    # A pod held past KSO_SAFE_MAX_HOLD_S may be released where the same requests were refused: never reused.
    def _held(self, pod: SimPod, sim: SimView) -> bool:
        from kso.core.safety import held_past

        return (self.safe is not None and pod.queued_step >= 0  # never queued: no creationTimestamp (pod_object)
                and held_past(pod.queued_step * sim.step_s, sim.now, self.safe.params.max_hold_s))

    def _repeat_key(self, pod: SimPod, size: tuple[float, float]) -> tuple[Any, ...] | None:
        if self.http or not set(self.extender.filters) <= PURE_FILTERS:
            return None
        return *size, pod.owner, tuple(sorted(pod.node_selector.items())), pod.tolerations

    def _unoffered(self, pod: SimPod, idx: np.ndarray, sim: SimView) -> np.ndarray:
        """The feasible nodes this attempt did not offer ``pod``. On a large cluster kube-scheduler offers a pod only
        a sample of the feasible nodes per attempt (percentageOfNodesToScore, rotating start) and retries a pending
        pod every few seconds with the next sample; the replay makes one attempt per 5-minute step, so when kso
        refuses every offered node the rest are offered too, as the step's retries would (and the product adds a
        pending pod's refused nodes up over its filter calls). Empty on a cluster of at most 100 nodes: every
        feasible node is offered."""
        offered = np.zeros(len(sim.node_names), dtype=bool)
        offered[idx] = True
        return np.flatnonzero(self.framework.filter_mask(pod, sim) & sim.active & ~offered)

    def _refuse(self, pod: SimPod, idx: np.ndarray, sim: SimView) -> None:
        """kso's filter refused ``pod`` on every node of ``idx`` in this step (its placeholder avoids them)."""
        if self.capacity not in ("placeholder", "both"):
            return
        mask = np.zeros(len(sim.node_names), dtype=bool)
        mask[idx] = True
        self._refused[pod.index] = (sim.step, mask)

    def bound(self, pod: SimPod, node: str, sim: SimView) -> None:
        j = sim.node_index[node]
        if self.judge == "usage":
            self._sizes[pod.index] = np.array(self._pods[pod.index][0]) if pod.index in self._pods else pod.requests
        for known in self._rejected.values():  # the bind changed that node's row only
            known[j] = False
        reply = self._post("bind", {"PodName": pod.name, "PodNamespace": "sim", "PodUID": pod.uid, "Node": node})
        if reply.get("Error"):
            raise RuntimeError(f"extender /bind {pod.name} -> {node}: {reply['Error']}")


class KsoInprocPolicy(KsoExtenderPolicy):
    name = "kso-inproc"
    mode = "in-process: extender.verbs.Extender called directly (same bodies, no HTTP)"
    http = False
