"""``kso reoptimize``: re-optimise the running placement with a move budget, and (with --execute) act on it.

Reads the cluster (API server, a snapshot file or the embedded demo) and the load (Prometheus, a trace,
or kube-safe-scheduler's node annotations), solves the placement with a budget of moves and a cost per
move (optimizer.migration), and prints the moves (pod, from, to, why) and the expected result per
node, before and after. Dry-run by default: it prints where every evicted pod would land.

With ``--execute`` it evicts through the Eviction API (policy/v1), so PodDisruptionBudgets hold, one
pod at a time, each at most once: a refusal (429), a pod that is gone (404), a conflict (409) or a
server error is reported and skipped, never retried. Each eviction and each skipped move is recorded
as a Kubernetes Event on the pod; the target plan (the evicted pods' landing slots) is published to
KSO_PLAN_FILE and to ConfigMap ``kso-plan`` (key ``plan.json``) so the extender places the
replacement pods where the plan says.

Never moved: mirror (static) pods, DaemonSet pods, system-critical pods (priorityClassName
system-cluster-critical / system-node-critical or priority >= 2000000000), pods with local storage
(emptyDir or hostPath volumes), pods that are not owned by a ReplicaSet or StatefulSet with more than
one replica, pods annotated ``kso.io/evict: "false"``, terminating or not-running pods, and pods in the
excluded namespaces (default kube-system).

Exit codes: 0 done, 1 configuration error (message on stderr), 2 some evictions failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import socket
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kso.cluster import ClusterState
from kso.objects import ObjectError, PodInfo, node_from_k8s, pod_from_k8s
from kso.settings import load_settings, read_config_file

OPT_OUT_ANNOTATION = "kso.io/evict"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CRITICAL_CLASSES = ("system-cluster-critical", "system-node-critical")
CRITICAL_PRIORITY = 2_000_000_000
MOVABLE_OWNERS = ("ReplicaSet", "StatefulSet")
EVENT_COMPONENT = "kso-reoptimize"
REASON_EVICTED = "KsoReoptimizeEvicted"
REASON_SKIPPED = "KsoReoptimizeSkipped"
PLAN_CONFIGMAP = "kso-plan"
PLAN_KEY = "plan.json"
SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_PLAN_NAMESPACE = "kso-system"
CONFIGMAP_LIMIT = 1024 * 1024  # bytes of data a ConfigMap may hold
REQUEST_TIMEOUT_S = 30.0

EXIT_OK, EXIT_CONFIG, EXIT_EVICTIONS_FAILED = 0, 1, 2


class ConfigError(ValueError):
    """A problem with what kso reoptimize was asked to do or read; the message says what."""


def add_commands(subparsers: Any) -> None:
    from forecasting.cli import _source_args
    from optimizer.migration import MIGRATION_POLICIES

    p = subparsers.add_parser(
        "reoptimize", help="re-optimise the running placement with a move budget (dry-run unless --execute)",
        description="Solve the current placement with a budget of moves and a cost per move; print the moves (pod, "
                    "from, to, why) and the expected result per node. Dry-run unless --execute, which evicts through "
                    "the Eviction API (PodDisruptionBudgets hold) and publishes the plan's target slots. Never moves "
                    "mirror, DaemonSet, system-critical, local-storage (emptyDir/hostPath) or single-replica pods, "
                    f"nor pods annotated {OPT_OUT_ANNOTATION}: \"false\". Exit 0 ok, 1 configuration error, "
                    "2 some evictions failed.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--snapshot", metavar="PATH", help="cluster from a snapshot file instead of the API server (dry-run only)")
    where.add_argument("--demo", action="store_true", help="the embedded demo cluster (dry-run only)")
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    _source_args(p)  # --prometheus / --trace and the forecast options, as `kso forecast`
    p.add_argument("--execute", action="store_true", help="evict for real (default: dry-run, nothing is changed)")
    p.add_argument("--max-moves", type=int, default=10, metavar="N", help="evictions in total (default 10)")
    p.add_argument("--max-per-node", type=int, default=None, metavar="N", help="evictions from one node (default: no limit)")
    p.add_argument("--max-per-namespace", type=int, default=None, metavar="N",
                   help="evictions in one namespace (default: no limit)")
    p.add_argument("--exclude-namespaces", default="kube-system", metavar="NS,...",
                   help="namespaces whose pods are never moved (default kube-system)")
    p.add_argument("--policy", type=str.lower, choices=MIGRATION_POLICIES,
                   help="objective after risk (default KSO_PLAN_POLICY; none = only relieve nodes over their safe bound)")
    p.add_argument("--move-cost", type=float, default=0.2, metavar="X",
                   help="cost of one eviction as a share of the policy's gain of one node (default 0.2: emptying a "
                        "node is worth up to 4 evictions)")
    p.add_argument("--time-limit", type=float, help="solver seconds (default KSO_SOLVER_TIME_LIMIT_S)")
    p.add_argument("--workers", type=int, help="solver workers (default KSO_SOLVER_WORKERS)")
    p.add_argument("--plan-namespace", metavar="NS",
                   help="namespace of ConfigMap kso-plan (default: this pod's namespace, else kso-system)")
    p.add_argument("--config", metavar="PATH", help="settings file (YAML/JSON of setting names; env wins)")
    p.add_argument("--all-nodes", action="store_true", help="list every node in the per-node table, not only changed ones")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_reoptimize)


# ---- the cluster, with the raw pods the eligibility rules need -------------------------------------
@dataclass
class Cluster:
    state: ClusterState
    raw_pods: dict[tuple[str, str], dict[str, Any]]  # (namespace, name) -> Pod as the API sends it
    replicas: Callable[[str, str, str], tuple[int | None, str]]  # (ns, kind, name) -> (spec.replicas, why unknown)
    source: str
    api_client: Any = None


def _owner(raw: dict[str, Any]) -> tuple[str, str]:
    """The controller owner (kind, name) of a pod, or ("", "")."""
    for ref in (raw.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return "", ""


def _count_owners(raw_pods: dict[tuple[str, str], dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    count: Counter[tuple[str, str, str]] = Counter()
    for (ns, _), raw in raw_pods.items():
        if ((raw.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
            continue
        kind, name = _owner(raw)
        if kind:
            count[(ns, kind, name)] += 1
    return count


def _fill_state(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], where: str) -> tuple[ClusterState, dict]:
    state = ClusterState()
    raw_pods: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in nodes:
        try:
            state.upsert_node(node_from_k8s(obj))
        except ObjectError as exc:
            print(f"kso reoptimize: {where}: node skipped: {exc}", file=sys.stderr)
    for obj in pods:
        try:
            pod = pod_from_k8s(obj)
        except ObjectError as exc:
            print(f"kso reoptimize: {where}: pod skipped (never moved): {exc}", file=sys.stderr)
            continue
        if not pod.uid:
            # ClusterState keys pods by uid; hand-written snapshots often have none.
            pod.uid = f"no-uid:{pod.namespace}/{pod.name}"
        state.upsert_pod(pod)
        raw_pods[(pod.namespace, pod.name)] = obj
    return state, raw_pods


def read_snapshot(path: str | None) -> Cluster:
    """Nodes, pods and (when the file has them) ReplicaSets / StatefulSets from a snapshot file or the
    embedded demo. Without the owner object, an owner's replica count is its pods in the snapshot."""
    import yaml

    from kso.snapshot import SnapshotError, _objects, parse_snapshot, read_snapshot

    try:
        text, where = read_snapshot(path)
    except SnapshotError as exc:
        raise ConfigError(str(exc)) from None
    try:
        parse_snapshot(text, where)  # the same validation as every other snapshot reader
        try:
            docs: list[Any] = [orjson.loads(text)]
        except orjson.JSONDecodeError:
            docs = list(yaml.safe_load_all(text))
        nodes, pods, owners = [], [], {}
        for d, doc in enumerate(docs):
            for kind, obj in _objects(doc, f"{where} document {d}"):
                if kind == "Node":
                    nodes.append(obj)
                elif kind == "Pod":
                    pods.append(obj)
                elif kind in MOVABLE_OWNERS and isinstance(obj, dict):
                    meta = obj.get("metadata") or {}
                    replicas = (obj.get("spec") or {}).get("replicas", 1)
                    owners[(meta.get("namespace") or "default", kind, meta.get("name") or "")] = replicas
    except SnapshotError as exc:
        raise ConfigError(str(exc)) from None
    state, raw_pods = _fill_state(nodes, pods, where)
    state.mark_synced(f"snapshot:{where}")
    counts = _count_owners(raw_pods)

    def replicas(ns: str, kind: str, name: str) -> tuple[int | None, str]:
        if (ns, kind, name) in owners:
            value = owners[(ns, kind, name)]
            return (value, "") if isinstance(value, int) else (None, f"{kind} {name} has no usable spec.replicas")
        return counts.get((ns, kind, name), 0), ""

    return Cluster(state, raw_pods, replicas, where)


def _body(resp: Any) -> bytes:
    """Read a raw (``_preload_content=False``) response whole, then give its connection back to the pool
    (an unread body left on a pooled connection would corrupt the next request on it)."""
    try:
        return bytes(resp.data)
    finally:
        resp.release_conn()


def _list_raw(list_fn: Callable[..., Any], **kw: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False, "_request_timeout": REQUEST_TIMEOUT_S, **kw}
    while True:
        body = orjson.loads(_body(list_fn(**kwargs)))
        items += [i for i in body.get("items") or [] if isinstance(i, dict)]
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items
        kwargs["_continue"] = token


def read_api(api_client: Any) -> Cluster:
    """One consistent read of nodes and non-terminal pods; owners' replica counts on demand (apps/v1)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from kso.kube import POD_FIELD_SELECTOR, _api_message

    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    try:
        nodes = _list_raw(core.list_node)
        pods = _list_raw(core.list_pod_for_all_namespaces, field_selector=POD_FIELD_SELECTOR)
    except ApiException as exc:
        raise ConfigError(f"cannot list nodes and pods: HTTP {exc.status}: {_api_message(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - connection refused, TLS, DNS...: all say the same to the user
        raise ConfigError(f"cannot list nodes and pods: {type(exc).__name__}: {exc}") from None
    where = api_client.configuration.host
    state, raw_pods = _fill_state(nodes, pods, where)
    state.mark_synced("api")
    cache: dict[tuple[str, str, str], tuple[int | None, str]] = {}
    readers = {"ReplicaSet": apps.read_namespaced_replica_set, "StatefulSet": apps.read_namespaced_stateful_set}

    def replicas(ns: str, kind: str, name: str) -> tuple[int | None, str]:
        key = (ns, kind, name)
        if key not in cache:
            try:
                obj = orjson.loads(_body(readers[kind](name, ns, _preload_content=False,
                                                       _request_timeout=REQUEST_TIMEOUT_S)))
                value = (obj.get("spec") or {}).get("replicas", 1)
                cache[key] = (value, "") if isinstance(value, int) else (None, f"{kind} {name}: no spec.replicas")
            except ApiException as exc:
                cache[key] = (None, f"owner {kind} {name} unreadable (HTTP {exc.status})")
            except Exception as exc:  # noqa: BLE001 - unknown owner size: the pod is not moved
                cache[key] = (None, f"owner {kind} {name} unreadable ({type(exc).__name__})")
        return cache[key]

    return Cluster(state, raw_pods, replicas, f"API server {where}", api_client)


# ---- which pods may move -------------------------------------------------------------------------
def not_movable_reason(raw: dict[str, Any], pod: PodInfo, exclude_namespaces: set[str],
                       replicas: Callable[[str, str, str], tuple[int | None, str]]) -> str | None:
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
    kind, name = _owner(raw)
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


def movable_pods(cluster: Cluster, exclude_namespaces: set[str]) -> tuple[list[PodInfo], Counter[str]]:
    movable: list[PodInfo] = []
    skipped: Counter[str] = Counter()
    for pod in cluster.state.bound_pods():
        raw = cluster.raw_pods.get((pod.namespace, pod.name))
        if raw is None:
            skipped["not in the pod list"] += 1
            continue
        why = not_movable_reason(raw, pod, exclude_namespaces, cluster.replicas)
        if why is None and cluster.state.node(pod.node_name) is None:
            why = "on a node kso does not know"
        if why is None:
            movable.append(pod)
        else:
            # Group owner-specific reasons ("single replica (ReplicaSet web)") under their kind.
            skipped[why.split(" (")[0] if why.startswith(("single replica", "owner ")) else why] += 1
    return movable, skipped


# ---- forecasts -----------------------------------------------------------------------------------
def _forecasts(args: argparse.Namespace, state: ClusterState) -> tuple[dict[str, Any] | None, float | None, str]:
    if not (args.prometheus or args.trace):
        return None, None, "node annotations (kube-safe-scheduler) where present, else the pods' requests"
    from forecasting.models import DEFAULT_FORECASTER, get_forecaster
    from forecasting.store import ForecastStore

    try:
        forecaster = get_forecaster(args.model or DEFAULT_FORECASTER)
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"forecasting model: {exc}") from None
    store = ForecastStore()
    if args.trace:
        from forecasting.traces import TraceError, TraceSource

        names = sorted(state.node_names())
        try:
            source = TraceSource(args.trace, n_series=args.nodes or len(names), window_s=args.window,
                                 start_offset_s=args.offset)
            now = source.now()
        except (TraceError, OSError, ValueError) as exc:
            raise ConfigError(f"trace {args.trace}: {exc}") from None
        if not store.refresh(source, forecaster, args.horizon, now=now):
            raise ConfigError(f"forecasts from trace {args.trace} failed: {store.last_error}")
        snap = store.snapshot(now)
        # Synthetic join: the trace's i-th series (by key) stands for the cluster's i-th node (by name).
        mapped = dict(zip(names, (snap[k] for k in sorted(snap)), strict=False))
        return mapped, now, (f"trace {args.trace} ({store.model}); series given to the nodes in name order, "
                             "a synthetic join")
    from forecasting.prometheus import PrometheusSource

    try:
        source_p = PrometheusSource(url=args.prometheus)
    except Exception as exc:  # noqa: BLE001 - bad URL or settings
        raise ConfigError(f"prometheus {args.prometheus}: {exc}") from None
    if not store.refresh(source_p, forecaster, args.horizon):
        raise ConfigError(f"forecasts from Prometheus {args.prometheus} failed: {store.last_error} "
                          "(run without --prometheus to use the node annotations)")
    return store.snapshot(), None, f"prometheus {args.prometheus} ({store.model})"


# ---- executing -----------------------------------------------------------------------------------
@dataclass
class Outcome:
    move: Any  # optimizer.migration.Move
    evicted: bool
    detail: str  # "evicted" or why not
    status: int | None = None  # HTTP status of a failed eviction


@dataclass
class Execution:
    outcomes: list[Outcome] = field(default_factory=list)
    event_errors: list[str] = field(default_factory=list)
    published: list[str] = field(default_factory=list)
    plan_id: str = ""
    publish_errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.evicted and o.status is not None]


def _eviction_failure(exc: Any) -> tuple[int | None, str]:
    from kubernetes.client.exceptions import ApiException

    from kso.kube import _api_message

    if isinstance(exc, ApiException):
        status = exc.status
        message = _api_message(exc)
        try:  # the PDB refusal names the budget in details.causes
            causes = (orjson.loads(exc.body or b"{}").get("details") or {}).get("causes") or []
        except (orjson.JSONDecodeError, AttributeError):
            causes = []
        extra = "; ".join(str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("message"))
        if extra:
            message = f"{message} ({extra})"
        if status == 429:
            return status, f"refused (429, PodDisruptionBudget): {message}"
        if status == 404:
            return status, f"pod gone (404): {message}"
        if status == 409:
            return status, f"conflict (409, the pod changed): {message}"
        return status, f"HTTP {status}: {message}"
    return 0, f"request failed: {type(exc).__name__}: {exc}"


def _evict(core: Any, move: Any) -> tuple[bool, int | None, str]:
    """One eviction request, never retried. Returns (evicted, HTTP status on failure, detail)."""
    from kubernetes import client

    body = client.V1Eviction(
        api_version="policy/v1", kind="Eviction",
        metadata=client.V1ObjectMeta(name=move.pod, namespace=move.namespace),
        # The uid is a precondition: a pod re-created under the same name is not evicted by mistake.
        delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=move.uid) if move.uid else None),
    )
    try:
        # Raw response: the API answers with a Status, not an Eviction.
        _body(core.create_namespaced_pod_eviction(move.pod, move.namespace, body, _preload_content=False,
                                                  _request_timeout=REQUEST_TIMEOUT_S))
    except Exception as exc:  # noqa: BLE001 - every failure is reported and the move skipped
        status, detail = _eviction_failure(exc)
        return False, status, detail
    return True, None, "evicted"


def _event(core: Any, move: Any, reason: str, message: str, warning: bool) -> str | None:
    """Record a core/v1 Event on the pod; returns an error message instead of raising."""
    from kubernetes import client

    now = dt.datetime.now(dt.UTC)
    body = client.CoreV1Event(
        api_version="v1", kind="Event",
        metadata=client.V1ObjectMeta(name=f"{move.pod[:236]}.{uuid.uuid4().hex[:16]}", namespace=move.namespace),
        involved_object=client.V1ObjectReference(api_version="v1", kind="Pod", name=move.pod, namespace=move.namespace,
                                                 uid=move.uid or None),
        reason=reason, message=message[:1024], type="Warning" if warning else "Normal",
        source=client.V1EventSource(component=EVENT_COMPONENT), reporting_component=EVENT_COMPONENT,
        reporting_instance=socket.gethostname(), first_timestamp=now, last_timestamp=now, count=1,
        action="Evict",
    )
    try:
        _body(core.create_namespaced_event(move.namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S))
    except Exception as exc:  # noqa: BLE001 - an event that cannot be written is reported, not fatal
        _, detail = _eviction_failure(exc)
        return f"event {reason} on {move.namespace}/{move.pod}: {detail}"
    return None


def execute(cluster: Cluster, result: Any, limits: Any) -> Execution:
    """Evict the moves in order (risk first), within the limits, each once; record events."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client)
    out = Execution()
    total = 0
    per_node: Counter[str] = Counter()
    per_ns: Counter[str] = Counter()
    for move in result.moves:
        # The model already keeps within the limits; this is the last line, should it ever not.
        limit = None
        if limits.max_moves is not None and total >= limits.max_moves:
            limit = f"--max-moves {limits.max_moves} reached"
        elif limits.max_per_node is not None and per_node[move.from_node] >= limits.max_per_node:
            limit = f"--max-per-node {limits.max_per_node} reached on {move.from_node}"
        elif limits.max_per_namespace is not None and per_ns[move.namespace] >= limits.max_per_namespace:
            limit = f"--max-per-namespace {limits.max_per_namespace} reached in {move.namespace}"
        if limit:
            out.outcomes.append(Outcome(move, False, f"skipped: {limit}"))
            err = _event(core, move, REASON_SKIPPED, f"kso reoptimize did not evict this pod: {limit}", True)
        else:
            ok, status, detail = _evict(core, move)
            out.outcomes.append(Outcome(move, ok, detail, status))
            if ok:
                total += 1
                per_node[move.from_node] += 1
                per_ns[move.namespace] += 1
                err = _event(core, move, REASON_EVICTED,
                             f"evicted by kso reoptimize ({move.reason}): from node {move.from_node}, planned to land "
                             f"on {move.to_node}", False)
            else:
                err = _event(core, move, REASON_SKIPPED, f"kso reoptimize could not evict this pod: {detail}", True)
        if err:
            out.event_errors.append(err)
    return out


def plan_namespace(flag: str | None) -> str:
    if flag:
        return flag
    try:
        ns = Path(SA_NAMESPACE_FILE).read_text().strip()
    except OSError:
        ns = ""
    return ns or DEFAULT_PLAN_NAMESPACE


def publish(plan: Any, api_client: Any, namespace: str, plan_file: str, execution: Execution) -> None:
    """The plan to KSO_PLAN_FILE (if set) and to ConfigMap kso-plan (created or replaced); failures are
    recorded in ``execution``, never raised."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from kso.kube import _api_message
    from optimizer.plan import write_plan

    execution.plan_id = plan.plan_id
    if plan_file:
        try:
            write_plan(plan, plan_file)
            execution.published.append(f"file {plan_file}")
        except OSError as exc:
            execution.publish_errors.append(f"plan file {plan_file}: {exc.strerror or exc}")
    data = orjson.dumps(plan.to_dict()).decode()
    where = f"ConfigMap {namespace}/{PLAN_CONFIGMAP}"
    if len(data) > CONFIGMAP_LIMIT:
        execution.publish_errors.append(f"{where}: the plan is {len(data)} bytes, over the ConfigMap limit")
        return
    core = client.CoreV1Api(api_client)
    body = client.V1ConfigMap(
        api_version="v1", kind="ConfigMap",
        metadata=client.V1ObjectMeta(name=PLAN_CONFIGMAP, namespace=namespace,
                                     labels={"app.kubernetes.io/name": "kso", "app.kubernetes.io/component": "plan",
                                             "app.kubernetes.io/managed-by": EVENT_COMPONENT}),
        data={PLAN_KEY: data})
    try:
        try:
            current = orjson.loads(_body(core.read_namespaced_config_map(
                PLAN_CONFIGMAP, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)))
        except ApiException as exc:
            if exc.status != 404:
                raise
            _body(core.create_namespaced_config_map(namespace, body, _preload_content=False,
                                                    _request_timeout=REQUEST_TIMEOUT_S))
            execution.published.append(f"{where} (created)")
            return
        body.metadata.resource_version = (current.get("metadata") or {}).get("resourceVersion")
        _body(core.replace_namespaced_config_map(PLAN_CONFIGMAP, namespace, body, _preload_content=False,
                                                 _request_timeout=REQUEST_TIMEOUT_S))
        execution.published.append(f"{where} (replaced)")
    except ApiException as exc:
        execution.publish_errors.append(f"{where}: HTTP {exc.status}: {_api_message(exc)}")
    except Exception as exc:  # noqa: BLE001 - publishing is best effort; the evictions are done
        execution.publish_errors.append(f"{where}: {type(exc).__name__}: {exc}")


# ---- output --------------------------------------------------------------------------------------
def _pct(v: float) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:.0f}%"


def _why(move: Any, result: Any, by_node: dict[str, Any]) -> str:
    src = by_node.get(move.from_node)
    if move.reason == "risk" and src is not None:
        return f"risk: {move.from_node} P(util>U*) {_pct(src.risk_before)} > eps {_pct(result.eps)}"
    if src is not None and src.in_use_before and not src.in_use_after:
        return f"policy ({result.policy}): empties {move.from_node}"
    return f"policy ({result.policy})"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def report_lines(result: Any, *, all_nodes: bool = False) -> list[str]:
    by_node = {n.name: n for n in result.nodes}
    lines = []
    if result.moves:
        rows = [["POD", "FROM", "TO", "WHY"]]
        rows += [[f"{m.namespace}/{m.pod}", m.from_node, m.to_node, _why(m, result, by_node)] for m in result.moves]
        lines += ["Moves (each evicted pod and the node its replacement is planned on):", *_table(rows)]
    else:
        lines.append("Moves: none")
    lines.append("")
    shown = [n for n in result.nodes if all_nodes or n.moved_in or n.moved_out or n.over_before or n.over_after]
    if shown:
        rows = [["NODE", "PODS", "CPU MEAN", "MEM MEAN", "RISK", "STATE"]]
        for n in shown:
            state = ("over" if n.over_before else "ok") + " -> " + ("over" if n.over_after else "ok")
            if n.in_use_before and not n.in_use_after:
                state += ", emptied"
            rows.append([n.name, f"{n.pods_before} -> {n.pods_after}",
                         f"{_pct(n.mean_before['cpu'])} -> {_pct(n.mean_after['cpu'])}",
                         f"{_pct(n.mean_before['memory'])} -> {_pct(n.mean_after['memory'])}",
                         f"{_pct(n.risk_before)} -> {_pct(n.risk_after)}", state])
        lines += ["Expected per node, before -> after (mean load / allocatable; risk = P(util > U*), exact rule):",
                  *_table(rows)]
        rest = len(result.nodes) - len(shown)
        if rest:
            lines.append(f"({rest} other nodes unchanged and under their safe bound; --all-nodes lists them)")
    if result.plan.classes:
        lines += ["", "Target plan (slots the replacement pods are sent to):"]
        rows = [["CLASS", "SLOTS"]]
        for key, c in sorted(result.plan.classes.items()):
            rows.append([key, ", ".join(f"{n}: {k}" for n, k in sorted(c.slots.items()))])
        lines += _table(rows)
    return lines


def _json(result: Any, skipped: Counter[str], load_from: str, source: str, execution: Execution | None) -> bytes:
    doc: dict[str, Any] = {
        "dryRun": execution is None, "cluster": source, "loadFrom": load_from, "policy": result.policy,
        "uStar": result.u_star, "eps": result.eps, "status": result.status, "solveSeconds": result.wall_s,
        "candidates": result.candidates, "notMovable": dict(skipped), "notes": result.notes,
        "moves": [{"pod": m.pod, "namespace": m.namespace, "from": m.from_node, "to": m.to_node, "reason": m.reason,
                   "class": m.class_key} for m in result.moves],
        "nodes": [{"name": n.name, "podsBefore": n.pods_before, "podsAfter": n.pods_after, "meanBefore": n.mean_before,
                   "meanAfter": n.mean_after, "riskBefore": n.risk_before, "riskAfter": n.risk_after,
                   "overBefore": n.over_before, "overAfter": n.over_after, "inUseBefore": n.in_use_before,
                   "inUseAfter": n.in_use_after} for n in result.nodes],
        "plan": result.plan.to_dict(),
    }
    if execution is not None:
        doc["evictions"] = [{"pod": o.move.pod, "namespace": o.move.namespace, "evicted": o.evicted, "detail": o.detail,
                             "status": o.status} for o in execution.outcomes]
        doc["published"] = execution.published
        doc["errors"] = execution.publish_errors + execution.event_errors
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


# ---- the command ---------------------------------------------------------------------------------
def _options(args: argparse.Namespace) -> tuple[Any, Any]:
    from optimizer.migration import MigrationOptions, MoveLimits
    from optimizer.settings import PlanSettings

    if args.config and not Path(args.config).is_file():
        raise ConfigError(f"--config {args.config}: no such file")
    settings = load_settings(PlanSettings, None, read_config_file(args.config))
    for flag in ("max_moves", "max_per_node", "max_per_namespace", "workers"):
        value = getattr(args, flag)
        if value is not None and value < (1 if flag == "workers" else 0):
            raise ConfigError(f"--{flag.replace('_', '-')} must be >= {1 if flag == 'workers' else 0}, got {value}")
    if args.time_limit is not None and not args.time_limit > 0:
        raise ConfigError(f"--time-limit must be > 0, got {args.time_limit}")
    if not (math.isfinite(args.move_cost) and args.move_cost >= 0):
        raise ConfigError(f"--move-cost must be a number >= 0, got {args.move_cost}")
    options = MigrationOptions(
        policy=args.policy or settings.policy_name, move_cost=args.move_cost,
        limits=MoveLimits(args.max_moves, args.max_per_node, args.max_per_namespace),
        time_limit_s=args.time_limit or settings.time_limit_s, workers=args.workers or settings.workers)
    return settings, options


def _load_cluster(args: argparse.Namespace) -> Cluster:
    if args.snapshot or args.demo:
        if args.execute:
            raise ConfigError("--execute needs the API server: a snapshot or the demo cluster can only be dry-run")
        return read_snapshot(args.snapshot or None)
    from kso.kube import KubeConfigError, load_api_client

    try:
        api_client = load_api_client(args.kubeconfig, args.context)
    except KubeConfigError as exc:
        raise ConfigError(str(exc)) from None
    return read_api(api_client)


def cmd_reoptimize(args: argparse.Namespace) -> int:
    from optimizer.migration import plan_migration
    from optimizer.planner import ProtectedSolver

    try:
        settings, options = _options(args)
        cluster = _load_cluster(args)
        forecasts, now, load_from = _forecasts(args, cluster.state)
    except ConfigError as exc:
        print(f"kso reoptimize: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    exclude = {ns.strip() for ns in args.exclude_namespaces.split(",") if ns.strip()}
    movable, skipped = movable_pods(cluster, exclude)
    # The CP-SAT solve runs in the protected child (seed retry, wall-clock limit), as for kso plan.
    solver = ProtectedSolver(on_crash=lambda note: print(f"kso reoptimize: {note}", file=sys.stderr))
    result = plan_migration(cluster.state, forecasts, settings.u_star, settings.eps, movable, options,
                            cost_key=settings.cost_key, now=now, solver=solver)
    execution = execute(cluster, result, options.limits) if args.execute else None
    if execution is not None:
        done = [o.move for o in execution.outcomes if o.evicted]
        if done:
            publish(result.plan_for(done), cluster.api_client, plan_namespace(args.plan_namespace), settings.plan_file,
                    execution)
    if args.json:
        sys.stdout.write(_json(result, skipped, load_from, cluster.source, execution).decode() + "\n")
        if execution is not None:
            _print_errors(execution)
    else:
        _print_text(args, result, skipped, load_from, cluster, execution)
    if execution is not None and execution.failed:
        return EXIT_EVICTIONS_FAILED
    return EXIT_OK


def _print_text(args: argparse.Namespace, result: Any, skipped: Counter[str], load_from: str, cluster: Cluster,
                execution: Execution | None) -> None:
    state = cluster.state
    mode = "EXECUTE" if execution is not None else "DRY-RUN: nothing is evicted (add --execute to act)"
    print(f"kso reoptimize: {mode}")
    print(f"cluster: {cluster.source}; {len(state.node_names())} nodes, {len(state.pods)} bound pods, "
          f"{result.candidates} movable")
    print(f"load from: {load_from}")
    print(f"policy {result.policy}, U* {_pct(result.u_star)}, eps {_pct(result.eps)}, move cost {args.move_cost:g}; "
          f"limits: {_limits(args)}")
    if skipped:
        print("not movable: " + ", ".join(f"{n} {why}" for why, n in skipped.most_common()))
    used = result.nodes_in_use()
    risk = sum(m.reason == "risk" for m in result.moves)
    print(f"solver {result.status} in {result.wall_s:.2f} s: {len(result.moves)} moves ({risk} risk, "
          f"{len(result.moves) - risk} policy); nodes over their safe bound {len(result.over_before)} -> "
          f"{len(result.over_after)}; nodes in use {used[0]} -> {used[1]}")
    for note in result.notes:
        print(f"  note: {note}")
    print()
    for line in report_lines(result, all_nodes=args.all_nodes):
        print(line)
    if execution is None:
        if result.moves:
            print("\nDry-run: no pod was evicted and no plan was published.")
        return
    print("\nEvictions:")
    for o in execution.outcomes:
        print(f"  {o.move.namespace}/{o.move.pod}: {o.detail}")
    if not execution.outcomes:
        print("  none")
    for p in execution.published:
        print(f"plan {execution.plan_id} published: {p}")
    _print_errors(execution)


def _print_errors(execution: Execution) -> None:
    for e in execution.publish_errors:
        print(f"kso reoptimize: could not publish the plan: {e}", file=sys.stderr)
    for e in execution.event_errors:
        print(f"kso reoptimize: {e}", file=sys.stderr)
    for o in execution.failed:
        print(f"kso reoptimize: eviction of {o.move.namespace}/{o.move.pod} failed: {o.detail}", file=sys.stderr)


def _limits(args: argparse.Namespace) -> str:
    def v(x: int | None) -> str:
        return "-" if x is None else str(x)

    return f"total {v(args.max_moves)}, per node {v(args.max_per_node)}, per namespace {v(args.max_per_namespace)}"


