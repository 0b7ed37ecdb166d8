"""The capacity signal's Kubernetes side: placeholder pods that show the cluster-autoscaler the demand kso refuses.

The cluster-autoscaler simulates scheduling without extenders, so a pod kso refuses on every node still "fits" by
requests and no node is added. For each such pod kso keeps one placeholder pod that the autoscaler finds
unschedulable on every existing node and schedulable on a new one, and that can never take capacity itself.

What a placeholder copies from its pod, and why:

* its requests (cpu and memory at least 1m / 1Mi: the namespace's quota counts them), with limits equal to the
  requests for hugepages and extended resources only (the API server refuses those without an equal limit):
  the autoscaler sizes the new node by them;
* its nodeSelector and required node affinity terms: the autoscaler picks a node group whose template satisfies
  them;
* its tolerations of NoSchedule and NoExecute taints (without tolerationSeconds): the taints the autoscaler's
  simulation filters on; PreferNoSchedule only scores.

Nothing else: no ports, volumes, claims, inter-pod (anti-)affinity or topology spread. Instead every node that
exists when the placeholder is made is excluded by a required node affinity ``kubernetes.io/hostname NotIn [every
node's hostname label]`` (plus ``metadata.name NotIn`` for a node without that label): no existing node fits it,
whatever kube-scheduler refused the pod there for (a port, anti-affinity, spread, a volume's zone), while the
autoscaler's template of a new node carries a made-up name in that label (``template-node-for-...``) and fits.
At 5,000 nodes with 43-character hostnames the Pod is ~231 KB (the API server takes 3 MiB, etcd 1.5 MiB). A node
added later is not excluded until kso refuses the pod there too: then a new placeholder excludes every node again.

Never bound: its schedulerName (``KSO_CAPACITY_SCHEDULER_NAME``) is one no scheduler serves, so kso writes the
condition the autoscaler reads itself (``PodScheduled=False``, reason ``Unschedulable``; the autoscaler lists
unschedulable pods by that condition, whatever their scheduler, unless its ``--allowed-scheduler-names`` leaves
the name out). deploy/capacity.yaml's admission policy refuses any Binding in the namespace, and a placeholder
found bound anyway is deleted at once and counted (``kso_capacity_placeholders_bound_total``).

Why this form (the autoscaler's own rules, see its FAQ and simulator):

* Priority -10 (the PriorityClass of deploy/capacity.yaml): the autoscaler ignores pods below its
  ``--expendable-pods-priority-cutoff`` (default -10), so -10 is the lowest priority that still scales up.
  ``preemptionPolicy: Never``: a placeholder never preempts anything.
* Node names and hostnames, not a node label: the autoscaler builds a node group's template from one of its
  existing nodes, labels included, so a "hot" label on every node would be on the template too and nothing would
  fit there. The same holds for a taint not under the autoscaler's startup/status prefixes; a taint also refuses
  every pod (not only the ones kso judged) and needs write access to every Node. The hostname label is the one
  label the autoscaler rewrites on its template.

One signal per pod: each kso reconciles against every live kso's placeholders (one list of the namespace): it
makes none for a pod another live kso holds one for, and of two made in the same round the kso whose identity
sorts last deletes its own.

Fail safe: every placeholder is labelled ``app.kubernetes.io/managed-by: kso`` and with its kso's identity, and
is owned by that kso's Lease (renewed while it runs). kso deletes its own placeholders and Lease when it stops and
when it starts (a restart keeps the identity, the pod's name); any kso running the signal in the same namespace
deletes those of an identity whose Lease has expired; deleting a Lease (or the namespace) lets the garbage
collector delete its placeholders. Nothing else expires them: an expired Lease is an object like any other, so
what a killed kso left when no kso with the signal runs again (uninstalled but for deploy/capacity.yaml, scaled to
zero, restarted with the signal off) stays, and the autoscaler keeps reading it as demand, until someone deletes
namespace kso-capacity (node marks: kso.core.capacity_marks). kso lists, creates and deletes only pods and
Leases carrying those labels, in its own namespace; it writes no Node unless node marks are on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from kso.core.capacity_names import default_identity, dns_label, lease_seconds, rfc3339_micro
from kso.core.logs import FirstWarnings
from kso.core.resources import CPU, MEMORY, PODS, needs_limit, quantity
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
# The cluster-autoscaler's node annotation: with the value "true" the node is never a scale-down candidate.
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
# Beside it on a node kso marked: which kso set it (kso removes only the marks it set).
MARKED_BY = "kso.io/scale-down-disabled-by"


# Every kso's capacity Lease is named LEASE_PREFIX + its identity (as a DNS label), and owns its placeholders.
LEASE_PREFIX = "kso-capacity-"
# The node label the placeholders exclude every current node by (the cluster-autoscaler's template node carries
# its own made-up name in it, so a template still fits; kube-scheduler and the autoscaler both evaluate it).
HOSTNAME = "kubernetes.io/hostname"
# The scheduler name of the placeholders by default: one no scheduler serves, so nothing ever binds one; kso
# writes the PodScheduled=False/Unschedulable condition the cluster-autoscaler reads itself.
UNSERVED_SCHEDULER = "kso-capacity-no-scheduler"
UNSCHEDULABLE_MESSAGE = ("kso capacity placeholder for {pod}: kso's safe filter refused the pod on every node it was "
                         "offered; no existing node may take this placeholder")


class _OwnedPod(Protocol):
    owner_kind: str
    owner_name: str


def is_placeholder(pod: _OwnedPod) -> bool:
    """A pod kso made to stand for refused demand: its controller is a kso capacity Lease. An owner reference, not an
    annotation or a label a tenant could put on its own pods to hide them from kso's load and drain accounting: a
    pod owned by a Lease that does not exist in its namespace is deleted by the garbage collector, and
    deploy/capacity.yaml's admission policy admits pods in kso-capacity only of the placeholder's shape."""
    return pod.owner_kind == "Lease" and pod.owner_name.startswith(LEASE_PREFIX)


@dataclass
class CapacitySettings:
    enabled: bool = setting("KSO_CAPACITY_SIGNAL", False,
                            help="show the cluster-autoscaler the demand kso refuses on every node, as placeholder pods "
                                 "(needs deploy/capacity.yaml: the namespace, PriorityClass and RBAC)")
    namespace: str = setting("KSO_CAPACITY_NAMESPACE", "kso-capacity", kind="dns-label",
                             help="namespace of the placeholder pods and of kso's capacity Lease")
    priority_class: str = setting("KSO_CAPACITY_PRIORITY_CLASS", "kso-capacity-placeholder", kind="dns-subdomain",
                                  help="PriorityClass of the placeholders (value -10: the autoscaler's expendable-pods "
                                       "cutoff, below every pod without a class)")
    image: str = setting("KSO_CAPACITY_IMAGE", "registry.k8s.io/pause:3.10", help="the placeholders' container image")
    scheduler_name: str = setting("KSO_CAPACITY_SCHEDULER_NAME", UNSERVED_SCHEDULER, kind="dns-subdomain",
                                  help="schedulerName of the placeholders: one no scheduler serves, so none is ever bound "
                                       "(kso marks them PodScheduled=False/Unschedulable itself, what the autoscaler "
                                       "reads); deploy/capacity.yaml's admission policy admits only this name")
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
    keep_nodes: bool = setting("KSO_CAPACITY_KEEP_NODES", False,
                               help="annotate the nodes holding a pod the safe agent would refuse on every other node "
                                    "cluster-autoscaler.kubernetes.io/scale-down-disabled=true, so the autoscaler does "
                                    "not remove them (needs deploy/optional/capacity-node-marks.yaml: patch on nodes)")
    keep_below: float = setting("KSO_CAPACITY_KEEP_BELOW", 0.5, lo=0.0, hi=1.0,
                                help="node marks: judge the nodes whose requested cpu or memory is below this fraction "
                                     "of allocatable (the autoscaler's --scale-down-utilization-threshold: only such a "
                                     "node can be removed) and the nodes kso marked")
    keep_hold_s: float = setting("KSO_CAPACITY_KEEP_HOLD_S", 3600.0, lo=0, hi=86400,
                                 help="node marks: a mark stays this long after the node was last needed, seconds")
    identity: str = setting("KSO_CAPACITY_IDENTITY", "",
                            help="this kso's name on its Lease and placeholders; empty = the host name (the pod's name)")


@dataclass(frozen=True, slots=True)
class PlaceholderSpec:
    """One placeholder: the refused pod it stands for, the nodes hot for it (decisions.capacity decides) and
    the nodes it excludes (every node that existed when it was made: no existing node fits it, whatever
    kube-scheduler filtered the pod on)."""

    for_uid: str
    for_key: str  # namespace/name
    requests: tuple[tuple[str, float], ...]  # resource -> canonical quantity (kso.core.resources)
    avoid: tuple[str, ...]  # the nodes hot for the pod (sorted)
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str, str], ...] = ()  # (key, operator, value, effect)
    required_terms: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()
    # (node name, its kubernetes.io/hostname label or "") of every node to exclude, sorted; empty: ``avoid``
    exclude: tuple[tuple[str, str], ...] = ()
    # exclusion_digest(exclude), when the caller has it: hashing 5,000 nodes takes ~8 ms, and a round names each
    # placeholder several times
    exclude_digest: str = ""

    def excluded(self) -> tuple[tuple[str, str], ...]:
        return self.exclude or tuple((name, "") for name in self.avoid)

    def digest(self) -> str:
        """A short hash of everything that shapes the pod (its spec cannot change after creation: a new spec is a
        new pod). The hot nodes are not in it: the exclusion covers them."""
        text = json.dumps([self.for_uid, self.requests, self.exclude_digest or exclusion_digest(self.excluded()),
                           self.node_selector, self.tolerations, self.required_terms], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def name(self) -> str:
        return f"kso-capacity-{self.digest()}"


def exclusion_digest(exclude: Iterable[tuple[str, str]]) -> str:
    """The hash of an exclusion (PlaceholderSpec.exclude), as PlaceholderSpec.digest takes it."""
    return hashlib.sha256(json.dumps(list(exclude), separators=(",", ":")).encode()).hexdigest()[:16]


# The taint effects the autoscaler's simulation (kube-scheduler's TaintToleration filter) checks; a toleration of
# PreferNoSchedule only scores, so a placeholder does not carry it.
FILTERED_EFFECTS = ("", "NoSchedule", "NoExecute")


@dataclass
class Owner:
    """The labels and owner reference every object this kso writes carries."""

    identity: str
    lease_name: str = ""
    lease_uid: str = ""


def node_exclusion(excluded: Iterable[tuple[str, str]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The requirements (matchExpressions, matchFields) that no node in ``excluded`` satisfies: one
    ``kubernetes.io/hostname NotIn`` listing every hostname label (one requirement, any number of values), and a
    ``metadata.name NotIn`` per node without that label (the API server takes exactly one value for In / NotIn on a
    node field)."""
    hosts = sorted({host for _, host in excluded if host})
    bare = sorted({name for name, host in excluded if not host})
    expressions = [{"key": HOSTNAME, "operator": "NotIn", "values": hosts}] if hosts else []
    fields = [{"key": "metadata.name", "operator": "NotIn", "values": [name]} for name in bare]
    return expressions, fields


def placeholder_manifest(spec: PlaceholderSpec, settings: CapacitySettings, owner: Owner) -> dict[str, Any]:
    """The Pod of ``spec``: a pause container with the pod's requests (limits equal to them only where the API server
    requires them), a scheduler no one runs, every existing node excluded, no service account token, removed at
    once (grace 0), owned by this kso's Lease."""
    avoid_exprs, avoid_fields = node_exclusion(spec.excluded())
    terms: list[dict[str, Any]] = []
    for term in spec.required_terms or ((),):
        # kso.core.objects keeps a term's matchFields as "field:<key>" expressions beside its matchExpressions
        expressions, fields = list(avoid_exprs), list(avoid_fields)
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
    # At least 1m cpu and 1Mi memory: the namespace's ResourceQuota counts both, and the API server refuses a pod
    # without them under such a quota (a refused pod may request neither).
    requests = {CPU: "1m", MEMORY: str(2**20), **{r: quantity(r, v) for r, v in spec.requests if r != PODS and v > 0}}
    resources: dict[str, Any] = {"requests": requests}
    limits = {r: q for r, q in requests.items() if needs_limit(r)}
    if limits:
        resources["limits"] = limits
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
        "containers": [{"name": "placeholder", "image": settings.image, "resources": resources,
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "runAsNonRoot": True, "runAsUser": 65535,
                                            "capabilities": {"drop": ["ALL"]}}}],
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    tolerations = [{k: v for k, v in (("key", key), ("operator", op), ("value", value), ("effect", effect)) if v}
                   for key, op, value, effect in spec.tolerations if effect in FILTERED_EFFECTS]
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if affinity:
        pod_spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    bound: list[str] = field(default_factory=list)  # found bound to a node (by anyone's doing): deleted at once
    elsewhere: list[str] = field(default_factory=list)  # wanted, but another live kso holds one for the same pod
    waiting: list[str] = field(default_factory=list)  # a create that failed, not tried again before its backoff


# The deletes ``release`` has in flight at once (each waits on the API server, not on this process's CPU; at 1,000
# refused pods a bind storm slowed the API server's deletes to seconds, and 159 deletes 8 at a time took 27 s).
RELEASE_THREADS = 16
DELETE_TIMEOUT_S = 30.0  # a delete's longest wait: a hung connection must not hold up kso's stop
# A create refused by the API server is tried again after interval x 2^(failures - 1), at most this long, seconds.
CREATE_BACKOFF_MAX_S = 300.0


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
        self.owner = Owner(identity, lease_name=f"{LEASE_PREFIX}{dns_label(identity)}")
        self.ns = settings.namespace
        self.refused = FirstWarnings(log)  # a refused create / status patch / delete, by (what, HTTP status)
        self._backoff: dict[str, tuple[int, float]] = {}  # placeholder name -> (creates refused in a row, next try)
        # This kso's placeholders as last listed, created or kept: name -> the uid of the pod it stands for (what
        # ``release`` reads between rounds; rebuilt by every ``apply``)
        self.held: dict[str, str] = {}
        self._released: set[str] = set()  # deleted by ``release`` since the last ``apply`` began
        self._releasing: set[str] = set()  # ``release``'s deletes in flight
        self._deletes: ThreadPoolExecutor | None = None
        self._held_lock = threading.Lock()

    @property
    def mine(self) -> str:
        return f"{MANAGED_BY}=kso,{COMPONENT}={PLACEHOLDER_COMPONENT},{HOLDER}={self.owner.identity}"

    ALL_PLACEHOLDERS = f"{MANAGED_BY}=kso,{COMPONENT}={PLACEHOLDER_COMPONENT}"
    ALL_LEASES = f"{MANAGED_BY}=kso,{COMPONENT}={LEASE_COMPONENT}"

    def renew(self) -> None:
        """Create or renew this kso's Lease (its uid is the placeholders' owner)."""
        from kubernetes.client.exceptions import ApiException

        now = rfc3339_micro(self.clock())
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.owner.lease_name, "namespace": self.ns,
                             "labels": {MANAGED_BY: "kso", COMPONENT: LEASE_COMPONENT, HOLDER: self.owner.identity}},
                "spec": {"holderIdentity": self.owner.identity, "leaseDurationSeconds": int(math.ceil(self.settings.lease_s)),
                         "renewTime": now, "acquireTime": now}}
        try:
            try:
                lease = self.coord.patch_namespaced_lease(
                    self.owner.lease_name, self.ns,
                    {"spec": {"renewTime": now, "leaseDurationSeconds": body["spec"]["leaseDurationSeconds"]}})
            except ApiException as exc:
                if exc.status != 404:
                    raise
                lease = self.coord.create_namespaced_lease(self.ns, body)
        except ApiException as exc:
            if exc.status == 403:
                self.refused.log(("lease", 403), "capacity: the API server refused this kso's Lease %s/%s (403 %s): "
                                  "its ServiceAccount needs deploy/capacity.yaml's Role in %s", self.ns,
                                  self.owner.lease_name, _message(exc), self.ns)
            raise
        self.owner.lease_uid = lease.metadata.uid

    # ---- placeholders ------------------------------------------------------------------------
    def _list(self, selector: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.ns, label_selector=selector).items)

    def _delete_pod(self, name: str) -> str:
        """"deleted", "gone" (404: deleted already) or "" (refused; logged)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0, _request_timeout=DELETE_TIMEOUT_S)
            return "deleted"
        except ApiException as exc:
            if exc.status == 404:
                return "gone"
            self.refused.log(("delete", exc.status), "capacity: cannot delete placeholder %s/%s: %s %s", self.ns,
                             name, exc.status, _message(exc))
            return ""

    def mark_unschedulable(self, name: str, for_key: str) -> bool:
        """Write the condition the cluster-autoscaler reads (PodScheduled=False, reason Unschedulable) on placeholder
        ``name``: no scheduler serves its schedulerName, so no one else does."""
        from kubernetes.client.exceptions import ApiException

        now = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                           "message": UNSCHEDULABLE_MESSAGE.format(pod=for_key),
                                           "lastTransitionTime": now, "lastProbeTime": None}]}}
        try:
            self.core.patch_namespaced_pod_status(name, self.ns, body,
                                                  _content_type="application/strategic-merge-patch+json")
            return True
        except ApiException as exc:
            if exc.status != 404:
                hint = " (needs patch on pods/status: deploy/capacity.yaml's Role)" if exc.status == 403 else ""
                self.refused.log(("status", exc.status), "capacity: cannot mark placeholder %s/%s Unschedulable%s: "
                                  "%s %s", self.ns, name, hint, exc.status, _message(exc))
            return False

    def _create(self, spec: PlaceholderSpec, name: str, now: float, result: ApplyResult) -> None:
        from kubernetes.client.exceptions import ApiException

        failures, next_try = self._backoff.get(name, (0, 0.0))
        if now < next_try:
            result.waiting.append(name)
            return
        try:
            self.core.create_namespaced_pod(self.ns, placeholder_manifest(spec, self.settings, self.owner))
        except ApiException as exc:
            if exc.status == 409:  # made already (by this kso, in a round whose answer was lost)
                self._backoff.pop(name, None)
                result.kept.append(name)
                return
            failures += 1
            wait = min(self.settings.interval_s * 2 ** (failures - 1), CREATE_BACKOFF_MAX_S)
            self._backoff[name] = (failures, now + wait)
            self.refused.log(("create", exc.status), "capacity: cannot create the placeholder of %s: %s %s (tried "
                              "again in %.0f s, doubling to %.0f s; further refusals with this status are logged at "
                              "DEBUG)", spec.for_key, exc.status, _message(exc), wait, CREATE_BACKOFF_MAX_S)
            result.failed.append(name)
            return
        self._backoff.pop(name, None)
        result.created.append(name)
        with self._held_lock:
            self.held[name] = spec.for_uid
        self.mark_unschedulable(name, spec.for_key)

    def apply(self, specs: Iterable[PlaceholderSpec], live: set[str] | None = None,
              still_pending: Callable[[str], bool] | None = None) -> ApplyResult:
        """Renew the Lease, then make the namespace hold one placeholder per wanted pod: create this kso's missing
        ones (unless another live kso, in ``live``, holds one for the same pod: one signal per pod, or the pod is
        no longer pending by ``still_pending(uid)``, asked just before each create) and delete its others. Any
        placeholder found bound to a node is deleted at once; one found without its Unschedulable condition gets
        it."""
        self.renew()
        with self._held_lock:
            self._released.clear()
        now = self.clock()
        live = {self.owner.identity} if live is None else live | {self.owner.identity}
        wanted = {spec.name(): spec for spec in specs}
        result = ApplyResult()
        mine: dict[str, Any] = {}
        held_by: dict[str, set[str]] = {}  # pod uid -> the other live holders with a placeholder for it
        for pod in self._list(self.ALL_PLACEHOLDERS):
            if pod.metadata.deletion_timestamp is not None:
                continue
            name = pod.metadata.name
            if pod.spec.node_name:  # never meant to happen (no scheduler serves it, admission refuses the binding)
                log.warning("capacity: placeholder %s/%s was bound to node %s: deleted", self.ns, name,
                            pod.spec.node_name)
                if self._delete_pod(name):
                    result.bound.append(name)
                continue
            holder = (pod.metadata.labels or {}).get(HOLDER, "")
            if holder == self.owner.identity:
                mine[name] = pod
            elif holder in live:
                uid = (pod.metadata.annotations or {}).get(PLACEHOLDER_FOR_UID, "")
                held_by.setdefault(uid, set()).add(holder)
        for name in sorted(mine.keys() - wanted.keys()):
            (result.deleted if self._delete_pod(name) else result.failed).append(name)
        for name, spec in wanted.items():
            others = held_by.get(spec.for_uid, set())
            # Two live kso holding one each for the same pod (both created in the same round): the one whose
            # identity sorts first keeps its own, the other deletes its own.
            if others and (name not in mine or min(others) < self.owner.identity):
                if name in mine and self._delete_pod(name):
                    result.deleted.append(name)
                result.elsewhere.append(name)
                continue
            pod = mine.get(name)
            if pod is None:
                if still_pending is None or still_pending(spec.for_uid):  # (a round at 1,000 pods takes seconds)
                    self._create(spec, name, now, result)
                continue
            result.kept.append(name)
            if not _marked_unschedulable(pod):
                self.mark_unschedulable(name, spec.for_key)
        for name in [n for n in self._backoff if n not in wanted]:
            del self._backoff[name]
        with self._held_lock:  # (what ``release`` deleted meanwhile is not held again)
            self.held = {name: wanted[name].for_uid for name in (*result.kept, *result.created)
                         if name in wanted and name not in self._released}
        if result.created or result.deleted or result.bound:
            log.info("capacity: placeholders created %d, deleted %d (bound %d), kept %d, held by another kso %d",
                     len(result.created), len(result.deleted), len(result.bound), len(result.kept),
                     len(result.elsewhere))
        return result

    def release(self, still_pending: Callable[[str], bool], deleted: Callable[[str], None] = lambda name: None
                ) -> list[str]:
        """Start deleting each placeholder of this kso whose pod is no longer pending (bound or deleted, by the
        ``still_pending(uid)`` of kso's watch), without waiting for the next round: a placeholder must not outlive
        its pod's bind. Each delete runs on its own, up to RELEASE_THREADS at once, so a slow answer holds up no
        other delete and no later call; ``deleted(name)`` follows each one done. Returns the deletes started."""
        with self._held_lock:
            started = [name for name, uid in self.held.items() if name not in self._releasing and not still_pending(uid)]
            self._releasing.update(started)
        if started and self._deletes is None:
            self._deletes = ThreadPoolExecutor(RELEASE_THREADS, thread_name_prefix="kso-capacity-delete")
        for name in started:
            self._deletes.submit(self._release_one, name, deleted)  # type: ignore[union-attr]
        return started

    def _release_one(self, name: str, deleted: Callable[[str], None]) -> None:
        outcome = ""
        try:
            outcome = self._delete_pod(name)
        except Exception as exc:  # (a connection error: the next look, or the round, deletes it)
            log.warning("capacity: cannot delete placeholder %s/%s: %s: %s", self.ns, name, type(exc).__name__, exc)
        finally:
            with self._held_lock:
                self._releasing.discard(name)
                if outcome:
                    self.held.pop(name, None)
                    self._released.add(name)
        if outcome == "deleted":
            deleted(name)

    def close(self) -> None:
        """Wait for the deletes ``release`` has in flight, drop those not started (on stop; ``clear`` follows)."""
        deletes, self._deletes = self._deletes, None
        if deletes is not None:
            deletes.shutdown(wait=True, cancel_futures=True)

    def clear(self) -> list[str]:
        """Delete this kso's placeholders and Lease (on start and on stop)."""
        from kubernetes.client.exceptions import ApiException

        with self._held_lock:
            self.held.clear()
        deleted = [p.metadata.name for p in self._list(self.mine) if self._delete_pod(p.metadata.name)]
        try:
            self.coord.delete_namespaced_lease(self.owner.lease_name, self.ns)
        except ApiException as exc:
            if exc.status != 404:
                log.warning("capacity: cannot delete Lease %s/%s: %s", self.ns, self.owner.lease_name, exc.reason)
        self.owner.lease_uid = ""
        return deleted

    def reap(self, live: set[str] | None = None) -> list[str]:
        """Delete the placeholders of every other kso whose Lease is missing or expired, and such Leases (``live``:
        the ``live_holders`` already found this round)."""
        live = self.live_holders() if live is None else live
        reaped = []
        for pod in self._list(self.ALL_PLACEHOLDERS):
            holder = (pod.metadata.labels or {}).get(HOLDER, "")
            if holder not in live and self._delete_pod(pod.metadata.name):
                reaped.append(pod.metadata.name)
        if reaped:
            log.info("capacity: deleted %d placeholders of kso instances that are gone", len(reaped))
        return reaped

    def live_holders(self) -> set[str]:
        """The identities of the kso instances whose Lease is current (this one's always); the expired Leases are
        deleted."""
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        live = {self.owner.identity}
        for lease in self.coord.list_namespaced_lease(self.ns, label_selector=self.ALL_LEASES).items:
            holder = (lease.metadata.labels or {}).get(HOLDER, "")
            renewed = lease_seconds(lease.spec.renew_time) or lease_seconds(lease.metadata.creation_timestamp) or 0.0
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
        return live


def _marked_unschedulable(pod: Any) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in ((pod.status.conditions if pod.status else None) or []))


def _message(exc: Any) -> str:
    from kso.core.kube import api_message

    return api_message(exc)
