"""The cluster a command reads (a ClusterSource): the API server (kso.core.kube.load_api_client), a snapshot
file or the embedded demo, read once as raw JSON (no client models: see kso/core/watcher.py) into a
ClusterState, with the raw pods and their owners' replica counts that ``kso reoptimize``'s eligibility rules
need. Objects that cannot be read are skipped and said in ``skipped`` (the command prints them); an unusable
source raises InputError.

Used by ``kso plan``, ``kso reoptimize`` and ``kso annotate`` (their flags: kso.core.cli_flags); their
forecast inputs (--prometheus / --trace) are forecasting.forecast_source.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from kso.core.cluster import ClusterState
from kso.core.objects import NodeInfo, ObjectError, node_from_k8s, pod_from_k8s

REPLICATED_KINDS = ("ReplicaSet", "StatefulSet")  # owners whose replica count is read (spec.replicas)
REQUEST_TIMEOUT_S = 30.0


class InputError(ValueError):
    """A command-line input (cluster, forecast source, flag) that cannot be used; the message says what."""


@dataclass(frozen=True, slots=True)
class ClusterSource:
    """Where a command reads the cluster: a snapshot file, the embedded demo, else the API server (the
    kubeconfig and context to reach it with; in-cluster, then ~/.kube/config by default)."""

    snapshot: str | None = None
    demo: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    # what the error for an unreachable API server suggests instead: the flags of the command that reads it
    offline_flags: str = field(default="--snapshot PATH", compare=False)


@dataclass
class RawCluster:
    state: ClusterState
    raw_pods: dict[tuple[str, str], dict[str, Any]]  # (namespace, name) -> Pod as the API sends it
    replicas: Callable[[str, str, str], tuple[int | None, str]]  # (ns, kind, name) -> (spec.replicas, why unknown)
    source: str
    api_client: Any = None
    skipped: list[str] = field(default_factory=list)  # objects that could not be read, one line each


def controller_owner(raw: dict[str, Any]) -> tuple[str, str]:
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
        kind, name = controller_owner(raw)
        if kind:
            count[(ns, kind, name)] += 1
    return count


def _fill_state(nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
                where: str) -> tuple[ClusterState, dict, list[str]]:
    state = ClusterState(pending_pod_memory=max(len(pods), 1))  # every pending pod of the listing
    raw_pods: dict[tuple[str, str], dict[str, Any]] = {}
    skipped: list[str] = []
    for obj in nodes:
        try:
            state.upsert_node(node_from_k8s(obj))
        except ObjectError as exc:
            skipped.append(f"{where}: node skipped: {exc}")
    for obj in pods:
        try:
            pod = pod_from_k8s(obj)
        except ObjectError as exc:
            skipped.append(f"{where}: pod skipped (never moved): {exc}")
            continue
        if not pod.uid:
            # ClusterState keys pods by uid; hand-written snapshots often have none.
            pod.uid = f"no-uid:{pod.namespace}/{pod.name}"
        state.upsert_pod(pod)
        raw_pods[(pod.namespace, pod.name)] = obj
    return state, raw_pods, skipped


def read_snapshot_cluster(path: str | None) -> RawCluster:
    """Nodes, pods and (when the file has them) ReplicaSets / StatefulSets from a snapshot file or the
    embedded demo (``path`` None). Without the owner object, an owner's replica count is its pods in the
    snapshot."""
    import yaml

    from kso.core.snapshot import SnapshotError, k8s_objects, parse_snapshot, read_snapshot

    try:
        text, where = read_snapshot(path)
    except SnapshotError as exc:
        raise InputError(str(exc)) from None
    try:
        parse_snapshot(text, where)  # the same validation as every other snapshot reader
        try:
            docs: list[Any] = [orjson.loads(text)]
        except orjson.JSONDecodeError:
            docs = list(yaml.safe_load_all(text))
        nodes, pods, owners = [], [], {}
        for d, doc in enumerate(docs):
            for kind, obj in k8s_objects(doc, f"{where} document {d}"):
                if kind == "Node":
                    nodes.append(obj)
                elif kind == "Pod":
                    pods.append(obj)
                elif kind in REPLICATED_KINDS and isinstance(obj, dict):
                    meta = obj.get("metadata") or {}
                    replicas = (obj.get("spec") or {}).get("replicas", 1)
                    owners[(meta.get("namespace") or "default", kind, meta.get("name") or "")] = replicas
    except SnapshotError as exc:
        raise InputError(str(exc)) from None
    state, raw_pods, skipped = _fill_state(nodes, pods, where)
    state.mark_synced(f"snapshot:{where}")
    counts = _count_owners(raw_pods)

    def replicas(ns: str, kind: str, name: str) -> tuple[int | None, str]:
        if (ns, kind, name) in owners:
            value = owners[(ns, kind, name)]
            return (value, "") if isinstance(value, int) else (None, f"{kind} {name} has no usable spec.replicas")
        return counts.get((ns, kind, name), 0), ""

    return RawCluster(state, raw_pods, replicas, where, skipped=skipped)


def response_body(resp: Any) -> bytes:
    """Read a raw (``_preload_content=False``) response whole, then give its connection back to the pool
    (an unread body left on a pooled connection would corrupt the next request on it)."""
    try:
        return bytes(resp.data)
    finally:
        resp.release_conn()


def list_raw(list_fn: Callable[..., Any], **kw: Any) -> list[dict[str, Any]]:
    """Every item of a list call, page by page, as the API sends it (raw JSON, no client models)."""
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False, "_request_timeout": REQUEST_TIMEOUT_S, **kw}
    while True:
        body = orjson.loads(response_body(list_fn(**kwargs)))
        items += [i for i in body.get("items") or [] if isinstance(i, dict)]
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return items
        kwargs["_continue"] = token


def read_api_cluster(api_client: Any) -> RawCluster:
    """One consistent read of nodes and non-terminal pods; owners' replica counts on demand (apps/v1)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from kso.core.kube import api_message
    from kso.core.watcher import POD_FIELD_SELECTOR

    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    try:
        nodes = list_raw(core.list_node)
        pods = list_raw(core.list_pod_for_all_namespaces, field_selector=POD_FIELD_SELECTOR)
    except ApiException as exc:
        raise InputError(f"cannot list nodes and pods: HTTP {exc.status}: {api_message(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - connection refused, TLS, DNS...: all say the same to the user
        raise InputError(f"cannot list nodes and pods: {type(exc).__name__}: {exc}") from None
    where = api_client.configuration.host
    state, raw_pods, skipped = _fill_state(nodes, pods, where)
    state.mark_synced("api")
    cache: dict[tuple[str, str, str], tuple[int | None, str]] = {}
    readers = {"ReplicaSet": apps.read_namespaced_replica_set, "StatefulSet": apps.read_namespaced_stateful_set}

    def replicas(ns: str, kind: str, name: str) -> tuple[int | None, str]:
        key = (ns, kind, name)
        if key not in cache:
            try:
                obj = orjson.loads(response_body(readers[kind](name, ns, _preload_content=False,
                                                               _request_timeout=REQUEST_TIMEOUT_S)))
                value = (obj.get("spec") or {}).get("replicas", 1)
                cache[key] = (value, "") if isinstance(value, int) else (None, f"{kind} {name}: no spec.replicas")
            except ApiException as exc:
                cache[key] = (None, f"owner {kind} {name} unreadable (HTTP {exc.status})")
            except Exception as exc:  # noqa: BLE001 - unknown owner size: the pod is not moved
                cache[key] = (None, f"owner {kind} {name} unreadable ({type(exc).__name__})")
        return cache[key]

    return RawCluster(state, raw_pods, replicas, f"API server {where}", api_client, skipped)


# ---- reading what a ClusterSource names --------------------------------------------------------------
def api_client_for(source: ClusterSource) -> Any:
    """kso.core.kube.load_api_client for the source's kubeconfig and context; InputError saying what was tried."""
    from kso.core.kube import KubeConfigError, load_api_client

    try:
        return load_api_client(source.kubeconfig, source.context)
    except KubeConfigError as exc:  # the commands that read a cluster can read a snapshot instead
        raise InputError(f"{exc}; without an API server, use {source.offline_flags}") from None


def load_cluster(source: ClusterSource) -> RawCluster:
    """The cluster the source names: its snapshot file, the demo, else the API server."""
    if source.snapshot or source.demo:
        return read_snapshot_cluster(source.snapshot or None)
    return read_api_cluster(api_client_for(source))


def load_nodes(source: ClusterSource) -> tuple[list[NodeInfo], Any, list[str]]:
    """Only the nodes (the snapshot file, else the API server), the ApiClient (None for a snapshot) and the
    nodes that could not be read (one line each)."""
    if source.snapshot:
        from kso.core.snapshot import SnapshotError, parse_snapshot, read_snapshot

        try:
            return parse_snapshot(*read_snapshot(source.snapshot))[0], None, []
        except SnapshotError as exc:
            raise InputError(str(exc)) from None
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from kso.core.kube import api_message

    api_client = api_client_for(source)
    try:
        raw = list_raw(client.CoreV1Api(api_client).list_node)
    except ApiException as exc:
        raise InputError(f"cannot list nodes: HTTP {exc.status}: {api_message(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - connection refused, TLS, DNS...: all say the same to the user
        raise InputError(f"cannot list nodes: {type(exc).__name__}: {exc}") from None
    nodes, skipped = [], []
    for obj in raw:
        try:
            nodes.append(node_from_k8s(obj))
        except ObjectError as exc:
            skipped.append(f"{api_client.configuration.host}: node skipped: {exc}")
    return nodes, api_client, skipped
