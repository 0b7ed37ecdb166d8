"""The capacity signal's Kubernetes side: placeholder pods that show the cluster-autoscaler the demand kso refuses.

The cluster-autoscaler simulates scheduling without extenders, so a pod kso refuses on every node still "fits" by
requests and no node is added. For each such pod kso keeps one placeholder pod: the same requests, node selector,
tolerations and required node affinity, plus required ``matchFields`` ``metadata.name NotIn`` each node kso
refuses it on (the hot nodes). kube-scheduler finds no node for it (``PodScheduled=False``, reason
``Unschedulable``), which is the condition the autoscaler scales up for; the autoscaler's template of a new node
is named ``template-node-for-...``, so the placeholder fits there, and a node is added.

Why placeholders, and why this form (the autoscaler's own rules, see its FAQ and simulator):

* Priority -10 (the PriorityClass of deploy/capacity.yaml): the autoscaler ignores pods below its
  ``--expendable-pods-priority-cutoff`` (default -10), so -10 is the lowest priority that still scales up, and it
  is below every pod without a class (0): real pods preempt a placeholder. ``preemptionPolicy: Never``: a
  placeholder never preempts anything itself.
* Node names, not a node label: the autoscaler builds a node group's template from one of its existing nodes,
  labels included, so a "hot" label on every node would be on the template too and nothing would fit there.
  The same holds for a taint not under the autoscaler's startup/status prefixes; a taint also refuses every pod
  (not only the ones kso judged) and needs write access to every Node. Names change nothing on any node.

Fail safe: every placeholder is labelled ``app.kubernetes.io/managed-by: kso`` and with the identity of the kso
that made it, and has an owner reference to that kso's Lease (renewed while it runs). kso deletes its own
placeholders and Lease when it stops, and when it starts (a restart keeps the identity, the pod's name); any kso
deletes the placeholders and Lease of an identity whose Lease has expired. Deleting a Lease (or the namespace)
lets the garbage collector delete its placeholders. kso lists, creates and deletes only pods and Leases carrying
those labels, in its own namespace; it writes no Node.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kso.core.resources import CPU, PODS
from kso.core.settings import setting

log = logging.getLogger("kso.capacity")

MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "app.kubernetes.io/component"
HOLDER = "kso.io/capacity-holder"
PLACEHOLDER_COMPONENT = "capacity-placeholder"
LEASE_COMPONENT = "capacity-lease"
# On every placeholder: the pod it stands for (namespace/name) and that pod's uid. kso's own node cache reads the
# first to leave placeholders out of its recent-bind load (they run a pause container and use nothing).
PLACEHOLDER_FOR = "kso.io/placeholder-for"
PLACEHOLDER_FOR_UID = "kso.io/placeholder-for-uid"
SPEC_HASH = "kso.io/placeholder-spec"


def is_placeholder(annotations: dict[str, str]) -> bool:
    """A pod kso made to stand for refused demand (by its annotation)."""
    return PLACEHOLDER_FOR in annotations


@dataclass
class CapacitySettings:
    enabled: bool = setting("KSO_CAPACITY_SIGNAL", False,
                            help="show the cluster-autoscaler the demand kso refuses on every node, as placeholder pods "
                                 "(needs deploy/capacity.yaml: the namespace, PriorityClass and RBAC)")
    namespace: str = setting("KSO_CAPACITY_NAMESPACE", "kso-capacity",
                             help="namespace of the placeholder pods and of kso's capacity Lease")
    priority_class: str = setting("KSO_CAPACITY_PRIORITY_CLASS", "kso-capacity-placeholder",
                                  help="PriorityClass of the placeholders (value -10: the autoscaler's expendable-pods "
                                       "cutoff, below every pod without a class)")
    image: str = setting("KSO_CAPACITY_IMAGE", "registry.k8s.io/pause:3.10", help="the placeholders' container image")
    scheduler_name: str = setting("KSO_CAPACITY_SCHEDULER_NAME", "default-scheduler",
                                  help="scheduler of the placeholders (one that sets PodScheduled=False for them)")
    interval_s: float = setting("KSO_CAPACITY_INTERVAL_S", 10.0, lo=0.5, hi=600,
                                help="how often the signal is re-judged and written, seconds")
    lease_s: float = setting("KSO_CAPACITY_LEASE_S", 60.0, lo=5, hi=3600,
                             help="a kso whose capacity Lease is this old is gone: any kso deletes its placeholders, "
                                  "seconds")
    exit_ratio: float = setting("KSO_CAPACITY_EXIT_RATIO", 0.8, lo=0.0, hi=1.0,
                                help="hysteresis: a node hot for a pod cools when its risk falls to this fraction of eps")
    min_hot_s: float = setting("KSO_CAPACITY_MIN_HOT_S", 60.0, lo=0, hi=3600,
                               help="hysteresis: a node hot for a pod stays hot at least this long, seconds")
    max_placeholders: int = setting("KSO_CAPACITY_MAX_PLACEHOLDERS", 200, lo=0, hi=10_000,
                                    help="placeholders at most (the oldest refused pods first)")
    identity: str = setting("KSO_CAPACITY_IDENTITY", "",
                            help="this kso's name on its Lease and placeholders; empty = the host name (the pod's name)")


@dataclass(frozen=True, slots=True)
class PlaceholderSpec:
    """One placeholder: the refused pod it stands for and where it must not go (kso.decisions.capacity decides)."""

    for_uid: str
    for_key: str  # namespace/name
    requests: tuple[tuple[str, float], ...]  # resource -> canonical quantity (kso.core.resources)
    avoid: tuple[str, ...]  # node names (sorted)
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    required_terms: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()

    def digest(self) -> str:
        """A short hash of everything that shapes the pod (its spec cannot change after creation: a new spec is a
        new pod)."""
        text = json.dumps([self.for_uid, self.requests, self.avoid, self.node_selector, self.tolerations,
                           self.required_terms], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def name(self) -> str:
        return f"kso-capacity-{self.digest()}"


def quantity(resource: str, value: float) -> str:
    """A canonical quantity as the API takes it (rounded up, never below what was refused)."""
    if resource == CPU:
        return f"{math.ceil(value)}m"
    return str(math.ceil(value))


@dataclass
class Owner:
    """The labels and owner reference every object this kso writes carries."""

    identity: str
    lease_name: str = ""
    lease_uid: str = ""


def placeholder_manifest(spec: PlaceholderSpec, settings: CapacitySettings, owner: Owner) -> dict[str, Any]:
    """The Pod of ``spec``: requests only (no limits), a pause container, no service account token, removed at once
    (grace 0), owned by this kso's Lease."""
    # One requirement per node: the API server takes exactly one value for In / NotIn on a node field.
    avoid_term = [{"key": "metadata.name", "operator": "NotIn", "values": [node]} for node in spec.avoid]
    terms: list[dict[str, Any]] = []
    for term in spec.required_terms or ((),):
        # kso.core.objects keeps a term's matchFields as "field:<key>" expressions beside its matchExpressions
        expressions, fields = [], list(avoid_term)
        for key, op, vals in term:
            item = {"key": key.removeprefix("field:"), "operator": op,
                    **({"values": list(vals)} if op not in ("Exists", "DoesNotExist") else {})}
            (fields if key.startswith("field:") else expressions).append(item)
        entry: dict[str, Any] = {}
        if expressions:
            entry["matchExpressions"] = expressions
        if fields:
            entry["matchFields"] = fields
        if entry:
            terms.append(entry)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}} \
        if terms else None
    requests = {r: quantity(r, v) for r, v in spec.requests if r != PODS and v > 0}
    meta: dict[str, Any] = {
        "name": spec.name(), "namespace": settings.namespace,
        "labels": {MANAGED_BY: "kso", COMPONENT: PLACEHOLDER_COMPONENT, HOLDER: owner.identity},
        "annotations": {PLACEHOLDER_FOR: spec.for_key, PLACEHOLDER_FOR_UID: spec.for_uid, SPEC_HASH: spec.digest()},
    }
    if owner.lease_uid:
        meta["ownerReferences"] = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": owner.lease_name,
                                    "uid": owner.lease_uid, "blockOwnerDeletion": False, "controller": True}]
    pod_spec: dict[str, Any] = {
        "priorityClassName": settings.priority_class,
        "schedulerName": settings.scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},  # the namespace enforces "restricted"
        "containers": [{"name": "placeholder", "image": settings.image, "resources": {"requests": requests},
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "runAsNonRoot": True, "runAsUser": 65535,
                                            "capabilities": {"drop": ["ALL"]}}}],
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [{k: v for k, v in (("key", key), ("operator", op), ("value", value),
                                                      ("effect", effect)) if v} for key, op, value, effect in spec.tolerations]
    if affinity:
        pod_spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}


def default_identity() -> str:
    """The host name: in a pod, the pod's name, the same after a container restart (so a restarted kso finds and
    deletes what it left)."""
    return socket.gethostname() or f"pid-{os.getpid()}"


def _rfc3339_micro(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(value: Any) -> float | None:
    """A Lease time (datetime from the client, or text) in epoch seconds."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=value.tzinfo or UTC).timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class CapacityReconciler:
    """Makes the cluster hold exactly the placeholders asked for (``apply``), renews this kso's Lease, and
    deletes what a gone kso left (``reap``). Touches only pods and Leases labelled as kso's capacity objects, in
    ``settings.namespace``."""

    def __init__(self, api_client: Any, settings: CapacitySettings, clock: Any = time.time) -> None:
        from kubernetes import client

        self.settings = settings
        self.core = client.CoreV1Api(api_client)
        self.coord = client.CoordinationV1Api(api_client)
        self.clock = clock
        identity = settings.identity or default_identity()
        self.owner = Owner(identity, lease_name=f"kso-capacity-{_dns_label(identity)}")
        self.ns = settings.namespace

    # ---- selectors ---------------------------------------------------------------------------
    @property
    def mine(self) -> str:
        return f"{MANAGED_BY}=kso,{COMPONENT}={PLACEHOLDER_COMPONENT},{HOLDER}={self.owner.identity}"

    ALL_PLACEHOLDERS = f"{MANAGED_BY}=kso,{COMPONENT}={PLACEHOLDER_COMPONENT}"
    ALL_LEASES = f"{MANAGED_BY}=kso,{COMPONENT}={LEASE_COMPONENT}"

    # ---- the Lease ---------------------------------------------------------------------------
    def renew(self) -> None:
        """Create or renew this kso's Lease (its uid is the placeholders' owner)."""
        from kubernetes.client.exceptions import ApiException

        now = _rfc3339_micro(self.clock())
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.owner.lease_name, "namespace": self.ns,
                             "labels": {MANAGED_BY: "kso", COMPONENT: LEASE_COMPONENT, HOLDER: self.owner.identity}},
                "spec": {"holderIdentity": self.owner.identity, "leaseDurationSeconds": int(math.ceil(self.settings.lease_s)),
                         "renewTime": now, "acquireTime": now}}
        try:
            lease = self.coord.patch_namespaced_lease(self.owner.lease_name, self.ns,
                                                      {"spec": {"renewTime": now,
                                                                "leaseDurationSeconds": body["spec"]["leaseDurationSeconds"]}})
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = self.coord.create_namespaced_lease(self.ns, body)
        self.owner.lease_uid = lease.metadata.uid

    # ---- placeholders ------------------------------------------------------------------------
    def _list(self, selector: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.ns, label_selector=selector).items)

    def _delete_pod(self, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return True
            log.warning("capacity: cannot delete placeholder %s/%s: %s %s", self.ns, name, exc.status, exc.reason)
            return False

    def apply(self, specs: Iterable[PlaceholderSpec]) -> ApplyResult:
        """Renew the Lease, then create the placeholders of ``specs`` that are missing and delete this kso's others."""
        from kubernetes.client.exceptions import ApiException

        self.renew()
        wanted = {spec.name(): spec for spec in specs}
        result = ApplyResult()
        have = {p.metadata.name for p in self._list(self.mine) if p.metadata.deletion_timestamp is None}
        for name in sorted(have - wanted.keys()):
            (result.deleted if self._delete_pod(name) else result.failed).append(name)
        for name, spec in wanted.items():
            if name in have:
                result.kept.append(name)
                continue
            try:
                self.core.create_namespaced_pod(self.ns, placeholder_manifest(spec, self.settings, self.owner))
                result.created.append(name)
            except ApiException as exc:
                if exc.status == 409:  # another kso made the same one (same refused pod, same nodes)
                    result.kept.append(name)
                else:
                    log.warning("capacity: cannot create placeholder for %s: %s %s", spec.for_key, exc.status,
                                _message(exc))
                    result.failed.append(name)
        if result.created or result.deleted:
            log.info("capacity: placeholders created %d, deleted %d, kept %d", len(result.created),
                     len(result.deleted), len(result.kept))
        return result

    def clear(self) -> list[str]:
        """Delete this kso's placeholders and Lease (on start and on stop)."""
        from kubernetes.client.exceptions import ApiException

        deleted = [p.metadata.name for p in self._list(self.mine) if self._delete_pod(p.metadata.name)]
        try:
            self.coord.delete_namespaced_lease(self.owner.lease_name, self.ns)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("capacity: cannot delete Lease %s/%s: %s", self.ns, self.owner.lease_name, exc.reason)
        self.owner.lease_uid = ""
        return deleted

    def reap(self) -> list[str]:
        """Delete the placeholders of every other kso whose Lease is missing or expired, and such Leases."""
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        live = {self.owner.identity}
        for lease in self.coord.list_namespaced_lease(self.ns, label_selector=self.ALL_LEASES).items:
            holder = (lease.metadata.labels or {}).get(HOLDER, "")
            renewed = _seconds(lease.spec.renew_time) or _seconds(lease.metadata.creation_timestamp) or 0.0
            duration = float(lease.spec.lease_duration_seconds or self.settings.lease_s)
            if holder == self.owner.identity or now - renewed <= duration:
                live.add(holder)
                continue
            try:
                self.coord.delete_namespaced_lease(lease.metadata.name, self.ns)
                log.info("capacity: Lease %s of %s expired %.0f s ago: deleted", lease.metadata.name, holder,
                         now - renewed - duration)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("capacity: cannot delete expired Lease %s: %s", lease.metadata.name, exc.reason)
        reaped = []
        for pod in self._list(self.ALL_PLACEHOLDERS):
            holder = (pod.metadata.labels or {}).get(HOLDER, "")
            if holder not in live and self._delete_pod(pod.metadata.name):
                reaped.append(pod.metadata.name)
        if reaped:
            log.info("capacity: deleted %d placeholders of kso instances that are gone", len(reaped))
        return reaped


def _message(exc: Any) -> str:
    from kso.core.kube import api_message

    return api_message(exc)


def _dns_label(text: str) -> str:
    """``text`` as a DNS label part (lower case, [a-z0-9-], at most 40 characters plus a hash when cut)."""
    clean = "".join(c if c.isalnum() or c == "-" else "-" for c in text.lower()).strip("-") or "kso"
    if len(clean) > 40:
        clean = f"{clean[:30].strip('-')}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return clean
