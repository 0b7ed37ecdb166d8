"""Cluster snapshot files: nodes and pods as Kubernetes YAML or JSON, for offline use.

Accepted shapes: a ``List``/``NodeList``/``PodList`` (``items``), a multi-document YAML stream of
objects or lists, or ``{"nodes": [...], "pods": [...]}`` (e.g. ``kubectl get nodes,pods -A -o json``
gives a List). A file with any unusable object is rejected as a whole, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import yaml

from kso.core.cluster import ClusterState
from kso.core.objects import NodeInfo, ObjectError, PodInfo, node_from_k8s, pod_from_k8s

DEMO_SNAPSHOT = "demo-cluster.json"


class SnapshotError(ValueError):
    pass


def k8s_objects(doc: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(kind, object) for every object of one parsed document, in any of the accepted shapes."""
    if doc is None:
        return
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield from k8s_objects(item, f"{where}[{i}]")
        return
    if not isinstance(doc, dict):
        raise SnapshotError(f"{where}: expected an object, got {type(doc).__name__}")
    if "nodes" in doc or "pods" in doc:
        for key in ("nodes", "pods"):
            for item in doc.get(key) or []:
                yield ("Node" if key == "nodes" else "Pod"), item
        return
    kind = doc.get("kind", "")
    if "items" in doc:
        item_kind = kind[:-4] if kind.endswith("List") and kind != "List" else ""
        for i, item in enumerate(doc.get("items") or []):
            if not isinstance(item, dict):
                raise SnapshotError(f"{where}.items[{i}]: expected an object")
            yield (item.get("kind") or item_kind), item
        return
    yield kind, doc


def parse_snapshot(text: str | bytes, where: str = "snapshot") -> tuple[list[NodeInfo], list[PodInfo]]:
    try:
        docs: list[Any] = [orjson.loads(text)]
    except orjson.JSONDecodeError:
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise SnapshotError(f"{where}: neither JSON nor YAML: {exc}") from None
    nodes: list[NodeInfo] = []
    pods: list[PodInfo] = []
    for d, doc in enumerate(docs):
        for kind, obj in k8s_objects(doc, f"{where} document {d}"):
            try:
                if kind == "Node":
                    nodes.append(node_from_k8s(obj))
                elif kind == "Pod":
                    pods.append(pod_from_k8s(obj))
                elif kind:
                    continue  # other kinds (Services, ...) are not ours to judge
                else:
                    raise SnapshotError(f"{where}: an object without kind")
            except ObjectError as exc:
                raise SnapshotError(f"{where}: {exc}") from None
    if not nodes:
        raise SnapshotError(f"{where}: no Node objects")
    return nodes, pods


def read_snapshot(path: str | Path | None) -> tuple[bytes, str]:
    """The bytes of a snapshot file (None = the embedded demo) and a name for messages."""
    if path is None:
        return resources.files("kso.data").joinpath(DEMO_SNAPSHOT).read_bytes(), f"embedded {DEMO_SNAPSHOT}"
    try:
        return Path(path).read_bytes(), str(path)
    except OSError as exc:
        raise SnapshotError(f"snapshot {path}: {exc}") from None


def load_snapshot(path: str | Path | None, state: ClusterState | None = None) -> ClusterState:
    """Fill ``state`` (or a new ClusterState) from a snapshot file; None means the embedded demo."""
    text, where = read_snapshot(path)
    nodes, pods = parse_snapshot(text, where)
    state = ClusterState() if state is None else state
    for node in nodes:
        state.upsert_node(node)
    for pod in pods:
        state.upsert_pod(pod)
    state.mark_synced(f"snapshot:{where}")
    return state
