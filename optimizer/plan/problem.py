"""What the optimizer is asked: nodes with their forecast load, and workload classes to place.

A *workload class* is a set of pods interchangeable for every hard rule: same owner (ReplicaSet,
StatefulSet, Job, ...) or none, same requests, and same placement rules (nodeSelector, required node
affinity incl. matchFields, tolerations): a DaemonSet's pods, each pinned to its node by matchFields
metadata.name, are one class each. The plan reasons
about classes, not pod names, so it can place pods that do not exist yet (the next replicas).
Units are kso's canonical ones: cpu millicores, memory bytes; usage mean and std in the same units.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from kso.core.objects import NodeInfo, PodInfo
from kso.core.resources import CPU, MEMORY, MIB, PODS

# The resources the safe bound is judged on (forecasts exist for these).
LOAD_RESOURCES = (CPU, MEMORY)


class ProblemError(ValueError):
    """An optimisation input that cannot be used; the message names it."""


# Where a node's load before the plan comes from, as the plan file states it per node and resource:
#   forecast     a forecast (Prometheus or a trace): not in the cluster's objects, so the plan states it
#   annotations  kube-safe-scheduler's mean-free-* / std-free-* node annotations: load = allocatable - mean-free
#   requests     the bound pods' requests summed, no spread (a node with neither)
#   given        set by the caller (generated or sampled problems, the re-optimiser's what-if loads)
LOAD_SOURCES = ("forecast", "annotations", "requests", "given")


@dataclass(slots=True)
class NodeLoad:
    """Forecast load of one node and resource, in absolute units; NaN mean = no forecast (the bound pods'
    requests stand in). ``source``: one of LOAD_SOURCES."""

    mean: float = math.nan
    std: float = 0.0
    source: str = "given"


@dataclass(slots=True)
class PlanNode:
    name: str
    allocatable: dict[str, float]  # canonical units, incl. pods and extended resources
    requested: dict[str, float]  # requests of the pods already bound (and kept in place)
    load: dict[str, NodeLoad]  # per LOAD_RESOURCES; forecast of the current load (bound pods' usage)
    cost: float = 1.0
    info: NodeInfo | None = None  # for placement rules (labels, taints, unschedulable)
    has_pods: bool = False  # already hosts pods, so it is "in use" whatever the plan does


@dataclass(slots=True)
class UsageModel:
    """A pod's own usage distribution per resource (absolute units): from its class history where known,
    otherwise its request with no spread."""

    mean: dict[str, float]
    std: dict[str, float]
    source: str  # "history" | "request" | "request+prior" (BEST_EFFORT_PRIOR where it requests nothing)


@dataclass(slots=True)
class WorkloadClass:
    key: str
    requests: dict[str, float]
    count: int  # pods of this class to place
    usage: UsageModel
    example: PodInfo | None = None  # placement rules (selector, tolerations, affinity) of the class
    members: list[str] = field(default_factory=list)  # uids of the pods this count stands for, if known
    pods: list[str] = field(default_factory=list)  # their namespace/name, same order


@dataclass(slots=True)
class PlacementProblem:
    nodes: list[PlanNode]
    classes: list[WorkloadClass]
    u_star: float
    eps: float
    input_ages: dict[str, float] = field(default_factory=dict)  # what -> seconds
    baseline_pods: list[str] = field(default_factory=list)  # uids already bound when the problem was read

    def validate(self) -> None:
        if not 0 < self.u_star <= 1:
            raise ProblemError(f"U* must be in (0, 1], got {self.u_star}")
        if not 0 < self.eps < 1:
            raise ProblemError(f"eps must be in (0, 1), got {self.eps}")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ProblemError("node names must be unique")
        keys = [c.key for c in self.classes]
        if len(set(keys)) != len(keys):
            raise ProblemError("class keys must be unique")
        for c in self.classes:
            if c.count < 0:
                raise ProblemError(f"class {c.key}: negative count")
            for r, v in c.requests.items():
                if not math.isfinite(v) or v < 0:
                    raise ProblemError(f"class {c.key}: request {r}={v} is not a finite non-negative number")


def _shape(requests: dict[str, float]) -> str:
    parts = [f"cpu={requests.get(CPU, 0):g}m", f"mem={requests.get(MEMORY, 0) / 2**20:g}Mi"]
    parts += [f"{r}={v:g}" for r, v in sorted(requests.items()) if r not in (CPU, MEMORY, PODS) and v]
    return ",".join(parts)


def _rules_digest(pod: PodInfo) -> str:
    """Placement rules as a short digest, so pods with different rules never share a class (owned or not:
    the DaemonSet controller gives each of its pods its own node affinity)."""
    if not (pod.node_selector or pod.tolerations or pod.required_terms):
        return ""
    text = repr((sorted(pod.node_selector.items()), pod.tolerations, pod.required_terms))
    return "#" + hashlib.sha1(text.encode()).hexdigest()[:8]


# class key = "<namespace>/<OwnerKind>/<owner>@<shape><rules>" for owned pods, "shape@<shape><rules>"
# otherwise; <rules> = "" without placement rules, else "#" + 8 hex digits of their digest.
def _class_key(pod: PodInfo) -> str:
    shape = _shape(pod.requests)
    if pod.owner_kind and pod.owner_name:
        return f"{pod.namespace}/{pod.owner_kind}/{pod.owner_name}@{shape}{_rules_digest(pod)}"
    return f"shape@{shape}{_rules_digest(pod)}"


# class_key's memo, by everything the key is made of (the extender asks for the pending pod's key on every
# prioritize while a plan is in use, a sha1 of the rules, which most pods have through the default
# not-ready / unreachable tolerations). Emptied when full.
_CLASS_KEYS: dict[tuple[object, ...], str] = {}
_CLASS_KEYS_MAX = 4096


def class_key(pod: PodInfo) -> str:
    requests = pod.requests
    if 0.0 in requests.values():
        # 0.0 == -0.0 but they print "0" and "-0": such a pod is not memoised (its key would be ambiguous).
        return _class_key(pod)
    memo = (pod.namespace, pod.owner_kind, pod.owner_name, tuple(requests.items()),
            tuple(pod.node_selector.items()), pod.tolerations, pod.required_terms)
    key = _CLASS_KEYS.get(memo)
    if key is None:
        if len(_CLASS_KEYS) >= _CLASS_KEYS_MAX:
            _CLASS_KEYS.clear()
        key = _CLASS_KEYS[memo] = _class_key(pod)
    return key


def owner_key(pod: PodInfo) -> str:
    """The class key without the placement rules: "<namespace>/<OwnerKind>/<owner>@<shape>" ("" without an
    owner). Measured usage is also pooled under it, so a class whose own pods have no history (e.g. a
    DaemonSet pod for a new node) counts at its owner's."""
    if pod.owner_kind and pod.owner_name:
        return f"{pod.namespace}/{pod.owner_kind}/{pod.owner_name}@{_shape(pod.requests)}"
    return ""


# A pod that requests nothing of a load resource (BestEffort) still uses some of it: counted at zero, the
# safe bound would let any number of them onto a node already over its bound. Without measured usage of
# its class it counts at kube-scheduler's own stand-in for a missing request (schedutil
# DefaultMilliCPURequest = 100m, DefaultMemoryRequest = 200 MiB), with no spread.
BEST_EFFORT_PRIOR = {CPU: 100.0, MEMORY: 200.0 * MIB}


def request_usage(requests: dict[str, float]) -> UsageModel:
    """A class's usage when nothing was measured: its requests, or the prior where it requests nothing."""
    mean = {r: requests.get(r, 0.0) if requests.get(r, 0.0) > 0 else BEST_EFFORT_PRIOR[r] for r in LOAD_RESOURCES}
    prior = any(not requests.get(r, 0.0) > 0 for r in LOAD_RESOURCES)
    return UsageModel(mean, {r: 0.0 for r in LOAD_RESOURCES}, "request+prior" if prior else "request")


def group_classes(pods: list[PodInfo], usage: dict[str, UsageModel] | None = None) -> list[WorkloadClass]:
    """Pods to place, grouped into classes; ``usage`` maps class key (or owner_key) -> usage model from history."""
    usage = usage or {}
    classes: dict[str, WorkloadClass] = {}
    for pod in pods:
        key = class_key(pod)
        wc = classes.get(key)
        if wc is None:
            model = usage.get(key) or usage.get(owner_key(pod) or key) or request_usage(pod.requests)
            wc = classes[key] = WorkloadClass(key, dict(pod.requests), 0, model, pod)
        wc.count += 1
        if pod.uid:
            wc.members.append(pod.uid)
        wc.pods.append(pod.key)
    return list(classes.values())
