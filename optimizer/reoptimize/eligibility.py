"""Which bound pods ``kso reoptimize`` may move: pure rules on the pod as the API sends it (the
descheduler's ``defaultevictor``), with their arguments, defaults and validation. No API calls: the
owner's replica count comes in as a function (kso.core.cluster_source.RawCluster.replicas).

Never moved: mirror (static) pods, DaemonSet pods, system-critical pods (priorityClassName
system-cluster-critical / system-node-critical or priority >= 2000000000), pods with local storage
(emptyDir or hostPath volumes), pods that are not owned by a ReplicaSet or StatefulSet with more than
one replica, pods annotated ``kso.io/evict: "false"``, terminating or not-running pods, and pods in the
excluded namespaces (default kube-system).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kso.core.cluster_source import REPLICATED_KINDS, RawCluster, controller_owner
from kso.core.objects import PodInfo

OPT_OUT_ANNOTATION = "kso.io/evict"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CRITICAL_CLASSES = ("system-cluster-critical", "system-node-critical")
CRITICAL_PRIORITY = 2_000_000_000
MOVABLE_OWNERS = REPLICATED_KINDS
DEFAULT_EXCLUDED_NAMESPACES = "kube-system"

Replicas = Callable[[str, str, str], tuple[int | None, str]]  # (ns, kind, name) -> (spec.replicas, why unknown)


@dataclass(frozen=True)
class EligibilityArgs:
    exclude_namespaces: frozenset[str] = field(default_factory=lambda: frozenset({DEFAULT_EXCLUDED_NAMESPACES}))

    @classmethod
    def from_flag(cls, exclude_namespaces: str) -> EligibilityArgs:
        """From ``--exclude-namespaces NS,...`` (blanks and empty items ignored; "" excludes none)."""
        return cls(frozenset(ns.strip() for ns in exclude_namespaces.split(",") if ns.strip()))


def not_movable_reason(raw: dict[str, Any], pod: PodInfo, exclude_namespaces: set[str] | frozenset[str],
                       replicas: Replicas) -> str | None:
    """Why this bound pod must not be evicted, or None when it may be."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if pod.namespace in exclude_namespaces:
        return f"namespace {pod.namespace} excluded"
    if str(annotations.get(OPT_OUT_ANNOTATION, "")).strip().lower() == "false":
        return f"opted out ({OPT_OUT_ANNOTATION}: \"false\")"
    if MIRROR_ANNOTATION in annotations:
        return "mirror (static) pod"
    if any(isinstance(r, dict) and r.get("kind") == "DaemonSet" for r in meta.get("ownerReferences") or []):
        return "DaemonSet pod"
    priority = spec.get("priority")
    if spec.get("priorityClassName") in CRITICAL_CLASSES or (isinstance(priority, int) and priority >= CRITICAL_PRIORITY):
        return "system-critical pod"
    for v in spec.get("volumes") or []:
        if isinstance(v, dict) and ("emptyDir" in v or "hostPath" in v):
            return "local storage (emptyDir/hostPath)"
    if meta.get("deletionTimestamp"):
        return "terminating"
    if pod.phase != "Running":
        return f"not running ({pod.phase or 'no phase'})"
    kind, name = controller_owner(raw)
    if not kind:
        return "no controller owner (single pod)"
    if kind not in MOVABLE_OWNERS:
        return f"owner kind {kind} (only ReplicaSet and StatefulSet pods are moved)"
    count, why = replicas(pod.namespace, kind, name)
    if count is None:
        return why
    if count <= 1:
        return f"single replica ({kind} {name})"
    return None


def movable_pods(cluster: RawCluster, args: EligibilityArgs) -> tuple[list[PodInfo], Counter[str]]:
    """The bound pods that may move, and how many may not, by reason."""
    movable: list[PodInfo] = []
    skipped: Counter[str] = Counter()
    for pod in cluster.state.bound_pods():
        raw = cluster.raw_pods.get((pod.namespace, pod.name))
        if raw is None:
            skipped["not in the pod list"] += 1
            continue
        why = not_movable_reason(raw, pod, args.exclude_namespaces, cluster.replicas)
        if why is None and cluster.state.node(pod.node_name) is None:
            why = "on a node kso does not know"
        if why is None:
            movable.append(pod)
        else:
            # Group owner-specific reasons ("single replica (ReplicaSet web)") under their kind.
            skipped[why.split(" (")[0] if why.startswith(("single replica", "owner ")) else why] += 1
    return movable, skipped
