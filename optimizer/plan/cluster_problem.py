"""A PlacementProblem from what kso knows of a cluster: ClusterState (API server or snapshot) for nodes,
bound and pending pods, and NodeForecasts (Prometheus or a trace) for the nodes' load."""

from __future__ import annotations

import logging
import math
import os
import pickle
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from forecasting.types import NodeForecast
from kso.core.cluster import ClusterState, PlanCopy
from kso.core.node_costs import DEFAULT_COST_KEY
from kso.core.objects import NodeInfo, PodInfo
from kso.core.resources import CPU, MEMORY
from kso.core.views import STAT_SCALE
from optimizer.plan.problem import (
    LOAD_RESOURCES,
    NodeLoad,
    PlacementProblem,
    PlanNode,
    UsageModel,
    class_key,
    group_classes,
    owner_key,
)

if TYPE_CHECKING:
    from optimizer.plan.compiled import SolverOptions
    from optimizer.plan.placement_plan import PlacementPlan

log = logging.getLogger("kso.optimizer")
FORECAST_NAMES = {CPU: "cpu", MEMORY: "memory"}
DEFAULT_SCHEDULER = "default-scheduler"  # what the API server fills in for a pod without spec.schedulerName


def node_cost(labels: dict[str, str], annotations: dict[str, str], key: str) -> float:
    """Per-node cost from an annotation (Hightower's toy scheduler: ``hightower.com/cost``) or a label of
    that name; missing or unusable -> 1.0 (logged once per node and value)."""
    raw = annotations.get(key, labels.get(key))
    if raw is None:
        return 1.0
    try:
        cost = float(raw)
    except ValueError:
        cost = math.nan
    if not math.isfinite(cost) or cost < 0:
        log.warning("node cost %s=%r is not a non-negative number; using 1.0", key, raw)
        return 1.0
    return cost


MIN_USAGE_SAMPLES = 6  # half an hour of 5-minute samples (or 6 pods' worth) before a class's usage is trusted


def pod_usage_samples(series: dict[str, dict[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """``PrometheusSource.pod_series`` output as class_usage_from_history's input: absolute usage samples
    (y * capacity) per ``namespace/pod`` and resource."""
    return {key: {r: s.y * s.capacity for r, s in per.items()} for key, per in series.items()}


# mean_c = mean of S_c, std_c = std of S_c, S_c = every finite usage sample of every running pod of class c
def class_usage_from_history(bound: list[PodInfo], usage: dict[str, dict[str, Any]]) -> dict[str, UsageModel]:
    """Per class, the mean and spread of its running pods' measured usage. ``usage``: ``namespace/pod`` ->
    resource name (``cpu``/``memory``) -> usage samples over time, absolute (cpu millicores, memory bytes;
    e.g. ``PrometheusSource.pod_series``). Samples of all the class's pods are pooled, so the spread covers
    both how one pod varies over time and how its replicas differ (total variance): what a new pod of the
    class may use. Classes with fewer than MIN_USAGE_SAMPLES finite samples per resource are left out
    (they count at their requests). Samples are also pooled per owner (optimizer.plan.problem.owner_key)."""
    samples: dict[str, dict[str, list[np.ndarray]]] = defaultdict(lambda: defaultdict(list))
    for pod in bound:
        u = usage.get(pod.key)
        if not u:
            continue
        for r in LOAD_RESOURCES:
            v = np.asarray(u.get(FORECAST_NAMES[r], ()), dtype=float).ravel()
            v = v[np.isfinite(v) & (v >= 0)]
            if v.size:
                for key in {class_key(pod), owner_key(pod)} - {""}:
                    samples[key][r].append(v)
    out = {}
    for key, per_r in samples.items():
        pooled = {r: np.concatenate(per_r[r]) if per_r.get(r) else np.empty(0) for r in LOAD_RESOURCES}
        if all(len(v) >= MIN_USAGE_SAMPLES for v in pooled.values()):
            out[key] = UsageModel({r: float(v.mean()) for r, v in pooled.items()},
                                  {r: float(v.std()) for r, v in pooled.items()}, "history")
    return out


def problem_from_state(state: ClusterState, forecasts: dict[str, dict[str, NodeForecast]] | None, u_star: float,
                       eps: float, pending: list[PodInfo] | None = None, cost_key: str = DEFAULT_COST_KEY,
                       class_usage: dict[str, UsageModel] | None = None, max_forecast_age_s: float = 900.0,
                       now: float | None = None, scheduler_names: Sequence[str] = ()) -> PlacementProblem:
    """Nodes (ready ones) with their forecast load, and the pending pods as classes. A node without a
    fresh forecast is judged on kube-safe-scheduler's load annotations when it has them, else on its
    bound pods' requests (no spread). With ``scheduler_names``, only pending pods whose
    spec.schedulerName is one of them are planned (no schedulerName = default-scheduler); bound pods of
    every scheduler count as load either way. The state's lock is held only to copy what the build reads
    (ClusterState.plan_copy), not for the build: the request path needs that lock."""
    return problem_from_copy(state.plan_copy(), forecasts, u_star, eps, pending, cost_key, class_usage,
                             max_forecast_age_s, now, scheduler_names)


def plannable(pods: list[PodInfo], scheduler_names: Sequence[str] = ()) -> list[PodInfo]:
    """The pods a plan places: unbound, not terminal, and (with ``scheduler_names``) for one of those schedulers."""
    names = set(scheduler_names)
    return [p for p in pods if not p.node_name and not p.terminal
            and (not names or (p.scheduler_name or DEFAULT_SCHEDULER) in names)]


def _usable(f: NodeForecast | None, now: float, max_forecast_age_s: float) -> bool:
    return f is not None and not f.stale and f.age_s(now) <= max_forecast_age_s and math.isfinite(f.mean)


def copy_has_statistics(copy: PlanCopy, forecasts: dict[str, dict[str, NodeForecast]] | None,
                        max_forecast_age_s: float = 900.0, now: float | None = None) -> bool:
    """Whether the problem built from ``copy`` would know the current load of some ready node (a fresh forecast or
    load annotations; extender.plan_cache.has_load_statistics of that problem), without building it."""
    now = time.time() if now is None else now
    forecasts = forecasts or {}
    annotated = np.isfinite(copy.mean_free).any(axis=1).tolist()
    for i, info in enumerate(copy.nodes):
        if info is None or not info.ready:
            continue
        if annotated[i]:
            return True
        per = forecasts.get(copy.names[i])
        if per and any(_usable(per.get(FORECAST_NAMES[r]), now, max_forecast_age_s) for r in LOAD_RESOURCES):
            return True
    return False


def problem_from_copy(copy: PlanCopy, forecasts: dict[str, dict[str, NodeForecast]] | None, u_star: float,
                      eps: float, pending: list[PodInfo] | None = None, cost_key: str = DEFAULT_COST_KEY,
                      class_usage: dict[str, UsageModel] | None = None, max_forecast_age_s: float = 900.0,
                      now: float | None = None, scheduler_names: Sequence[str] = ()) -> PlacementProblem:
    """problem_from_state's build, from a copy of the state (no lock held)."""
    now = time.time() if now is None else now
    forecasts = forecasts or {}
    pods = pending if pending is not None else copy.pending
    nodes: list[PlanNode] = []
    ages: list[float] = []
    columns = list(copy.columns.items())
    for i, name in enumerate(copy.names):
        info = copy.nodes[i]
        if info is None or not info.ready:
            continue
        row = copy.requested[i].tolist()
        requested = {r: row[c] for r, c in columns if row[c] != 0.0}
        load = {}
        per = forecasts.get(name, {})
        for ri, r in enumerate(LOAD_RESOURCES):
            f = per.get(FORECAST_NAMES[r])
            cap = info.allocatable.get(r, 0.0)
            # kube-safe-scheduler's annotations are in millicores and MB; STAT_SCALE converts to them.
            free_mean, free_std = copy.mean_free[i, ri] / STAT_SCALE[ri], copy.std_free[i, ri] / STAT_SCALE[ri]
            if f is not None and _usable(f, now, max_forecast_age_s):
                load[r] = NodeLoad(f.mean * cap, f.std * cap if math.isfinite(f.std) else 0.0, "forecast")
                ages.append(f.age_s(now))
            elif math.isfinite(free_mean):  # no forecast: the node's annotations, as the safe agent does
                load[r] = NodeLoad(max(cap - free_mean, 0.0), free_std if math.isfinite(free_std) else 0.0,
                                   "annotations")
            else:
                load[r] = NodeLoad(source="requests")
        nodes.append(PlanNode(name, dict(info.allocatable), requested, load,
                              node_cost(info.labels, info.annotations, cost_key), info, name in copy.occupied))
    classes = group_classes(plannable(pods, scheduler_names), class_usage)
    input_ages = {"forecast_max_s": max(ages) if ages else math.nan, "cluster_s": copy.age_s}
    return PlacementProblem(nodes, classes, u_star, eps, input_ages, list(copy.bound))


UID_SEPARATOR = "\0"  # between the bound pods' uids in a PackedCopy (no uid holds it)


@dataclass(frozen=True, slots=True)
class PackedCopy:
    """A PlanCopy as the extender sends it to its solver child, cheap to pickle: each node already pickled (once per
    NodeInfo object: NodePickles) and the bound pods' uids joined into one string. Pickling the PlanCopy itself cost the
    extender's process ~100 ms of CPU per cycle at 5,000 nodes x 150k pods (the uids one by one, each node through its
    dataclass's Python __getstate__); this costs it a few ms, the node pickles only for nodes that changed."""

    names: list[str]
    nodes: list[bytes | None]
    requested: np.ndarray
    columns: dict[str, int]
    mean_free: np.ndarray
    std_free: np.ndarray
    occupied: set[str]
    bound: str
    pending: list[PodInfo]
    version: int
    age_s: float

    def unpack(self) -> PlanCopy:
        return PlanCopy(self.names, [None if b is None else pickle.loads(b) for b in self.nodes], self.requested,
                        self.columns, self.mean_free, self.std_free, self.occupied,
                        self.bound.split(UID_SEPARATOR) if self.bound else [], self.pending, self.version, self.age_s)


class NodePickles:
    """Each NodeInfo pickled once, without its agents' memo (which may hold what does not pickle) and its images (a
    few KiB per node on real clusters): the plan reads neither (its placement rules are taints, labels and
    cordons, kso.core.placement.rule_violation). A NodeInfo is never changed in place (a node update replaces it), so
    a cycle pickles only the nodes that changed since the last one. Holds the last copy's NodeInfo objects and their
    bytes (bounded by the node count)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[NodeInfo, bytes]] = {}

    def pack(self, copy: PlanCopy) -> PackedCopy:
        last, kept = self._by_id, {}
        blobs: list[bytes | None] = []
        for info in copy.nodes:
            if info is None:
                blobs.append(None)
                continue
            hit = last.get(id(info))
            if hit is None or hit[0] is not info:  # a new object (the id of a dead one may be reused)
                sent = replace(info, memo={}, images={}, raw_image_names=())
                hit = (info, pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL))
            kept[id(info)] = hit
            blobs.append(hit[1])
        self._by_id = kept
        return PackedCopy(copy.names, blobs, copy.requested, copy.columns, copy.mean_free, copy.std_free, copy.occupied,
                          UID_SEPARATOR.join(copy.bound), copy.pending, copy.version, copy.age_s)


@dataclass(frozen=True, slots=True)
class BuildInputs:
    """What problem_from_copy takes besides the copy, as the extender's plan cycle hands it to its solver child."""

    forecasts: dict[str, dict[str, NodeForecast]] | None
    u_star: float
    eps: float
    cost_key: str = DEFAULT_COST_KEY
    scheduler_names: Sequence[str] = ()
    class_usage: dict[str, UsageModel] = field(default_factory=dict)
    niceness: int = 0  # added to the niceness of the process that builds (os.nice): PLAN_CHILD_NICENESS in a child
    plan_file: str = ""  # where the plan is written (KSO_PLAN_FILE), "" nowhere


# The plan child's CPU priority below the extender's (nice 0): CP-SAT's workers otherwise take the cores the serving
# thread needs and filter calls wait on the run queue (on one core at 5,000 x 150k: 1.3-2.1x the filter calls served,
# p50 -35 to -52%; benchmarks/figures/plan-stall.md). The price: where other processes share kso's cgroup, the plan
# takes longer (there, 3x).
PLAN_CHILD_NICENESS = 10


def plan_from_copy(options: SolverOptions, copy: PlanCopy | PackedCopy, inputs: BuildInputs,
                   ffd_notes: list[str] | None = None) -> tuple[PlacementPlan, dict[str, Any]]:
    """The extender's plan cycle past the copy, run in the solver's child (ProtectedSolver.call): the problem built
    from ``copy`` (packed, as the extender sends it, or not), compiled, solved (or, with ``ffd_notes``,
    first-fit-decreasing's placement held to the exact bound, those notes said: the fallback when no solver process
    returned) and made a plan, written to ``inputs.plan_file``, so that the extender's process does none of it while it
    serves. The plan comes back without its baseline pods (``copy.bound``: the caller has them; 150k uids back would
    cost it their unpickling) and without its per-node part (``nodes``: in the file; ~60k objects at 5,000 nodes in
    the caller's young generation), with the whole plan's summary (PlacementPlan.summary)."""
    from optimizer.plan.compiled import compile_problem
    from optimizer.plan.pipeline import plan_cluster
    from optimizer.plan.placement_plan import plan_from_result, write_plan
    from optimizer.plan.protected_solver import ffd_result

    if inputs.niceness:
        os.nice(inputs.niceness)
    if isinstance(copy, PackedCopy):
        copy = copy.unpack()
    problem = problem_from_copy(copy, inputs.forecasts, inputs.u_star, inputs.eps, cost_key=inputs.cost_key,
                                scheduler_names=inputs.scheduler_names, class_usage=inputs.class_usage)
    if ffd_notes is None:
        plan = plan_cluster(problem, options).plan  # the one pipeline, solving here: this is the protected child
    else:
        comp = compile_problem(problem)
        plan = plan_from_result(problem, comp, ffd_result(problem, comp, ffd_notes), options.policy)
    plan.baseline_pods = copy.bound
    if inputs.plan_file:
        try:
            write_plan(plan, inputs.plan_file)
        except OSError as exc:
            log.error("could not write the plan to %s: %s (the plan is used from memory)", inputs.plan_file, exc)
    return replace(plan, baseline_pods=[], nodes={}), plan.summary()


POD_USAGE_WINDOW_S = 3600  # a class's usage from its running pods' last hour


def class_usage_from_prometheus(settings: Any, bound: list[PodInfo]) -> tuple[dict[str, UsageModel], str]:
    """(class key -> usage model, a note saying where usage came from) from the running pods' cAdvisor
    series in Prometheus (``settings``: forecasting.prometheus.PrometheusSettings), so that new pods of a
    known class count at what their siblings use rather than at their requests. A failed query is said
    in the note and leaves every class at its requests."""
    from dataclasses import replace

    from forecasting.prometheus import PrometheusError, PrometheusSource

    try:
        series = PrometheusSource(replace(settings, history_s=POD_USAGE_WINDOW_S)).pod_series()
    except PrometheusError as exc:
        return {}, f"pod usage failed ({exc}); new pods count at their requests"
    out = class_usage_from_history(bound, pod_usage_samples(series))
    return out, f"{len(out)} classes at their pods' measured usage (last {POD_USAGE_WINDOW_S // 60} min)"
