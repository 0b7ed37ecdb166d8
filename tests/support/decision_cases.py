"""Helpers shared by the tests of the decision engine, its agents, the store and the extender's protocol: references
of the code fast paths replaced, random clusters, hypothesis settings and values."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from decisions.agents.base import Call
from decisions.agents.image import image_locality_score
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from tests.support.fixtures import make_node, make_pod

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_image_locality(call: Call) -> np.ndarray:
    """ImageAgent.image_locality before the image columns: every node's image map, per call."""
    images = list(dict.fromkeys(call.pod.images))
    view = call.view
    sizes = np.array(
        [[0 if node is None else node.images.get(img, 0) for img in images] for node in view.nodes],
        dtype=float,
    ).reshape(len(view), len(images))
    total = max(view.total_nodes, 1)
    spread = np.minimum(np.array([view.image_node_count.get(img, 0) / total for img in images]), 1.0)
    return image_locality_score(sizes, spread, len(call.pod.images))


# A small universe of image references as kubelets report them (tagged, digests, short names) and as
# pods write them, so that raw and normalised names collide the way they do in clusters.
IMAGE_NAMES = [
    ["docker.io/library/nginx:1.27.3", "docker.io/library/nginx@sha256:aa"],
    ["nginx:1.27.3"],
    ["busybox:1.36", "docker.io/library/busybox@sha256:bb"],
    ["registry.k8s.io/pause:3.10"],
    ["quay.io/team/app:v1", "quay.io/team/app@sha256:cc"],
    ["localhost/tool"],
    ["redis"],
]


def node_with(name: str, images: list[tuple[int, int]], rv: str = "1") -> dict[str, Any]:
    node = make_node(name, cpu="8", memory="16Gi", images=[(IMAGE_NAMES[k], size) for k, size in images])
    node["metadata"]["resourceVersion"] = rv
    return node


# Values that stress the formatting: ties at the last printed digit (0.0005, 0.00125, ...), both zeros,
# the clip limits, tiny risks in scientific notation, and arbitrary doubles.
tricky = st.one_of(
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 0.0005, 0.00125, 0.00135, 0.12345, 0.9995, 0.99949999, 0.35, 0.005,
                     0.015, 0.025, 1e-9, 8.5e-9, 5e-324, 0.1 + 0.2, 2 / 3]),
    st.integers(0, 100_000).map(lambda k: k / 100_000),
    st.integers(0, 2000).map(lambda k: (k + 0.5) / 2000),
    st.integers(0, 1000).map(lambda k: (k + 0.5) / 1000),
    st.integers(0, 1000).map(lambda k: math.nextafter((k + 0.5) / 1000, 2.0)),
)


def random_cluster(rng: random.Random, n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, pods = [], []
    for i in range(n):
        ann = {}
        if rng.random() < 0.8:
            ann = {"mean-free-cpu": str(rng.randint(0, 8000)), "std-free-cpu": str(rng.randint(0, 2000))}
            if rng.random() < 0.7:
                ann |= {"mean-free-memory": str(rng.randint(0, 16000)), "std-free-memory": str(rng.randint(0, 3000))}
        cpu = "0" if rng.random() < 0.08 else f"{rng.randint(1, 16)}"
        nodes.append(make_node(f"n{i}", cpu=cpu, memory=f"{rng.randint(1, 64)}Gi", annotations=ann,
                               images=[(IMAGE_NAMES[rng.randrange(len(IMAGE_NAMES))], rng.randint(1, 10**9))]))
        for j in range(rng.randint(0, 3)):
            pods.append(make_pod(f"b{i}-{j}", cpu=f"{rng.randint(1, 4000)}m", memory=f"{rng.randint(1, 4096)}Mi",
                                 node=f"n{i}"))
    return nodes, pods


def random_state(rng: random.Random, n: int) -> ClusterState:
    """A store of random_cluster's nodes and bound pods."""
    nodes, pods = random_cluster(rng, n)
    state = ClusterState()
    for node in nodes:
        state.upsert_node(node_from_k8s(node))
    for pod in pods:
        state.upsert_pod(pod_from_k8s(pod))
    return state


def full_body(pod: dict[str, Any], nodes: list[dict[str, Any]], fields: dict[str, Any] | None = None) -> bytes:
    """A full-Nodes body as kube-scheduler writes it (Go's compact encoding, its key order)."""
    return orjson.dumps({"Pod": pod, "Nodes": {**({"metadata": {}} if fields is None else fields), "items": nodes},
                         "NodeNames": None})


def go_node(name: str, **kw: Any) -> dict[str, Any]:
    """A Node as kube-scheduler's informer holds it: no kind / apiVersion, metadata first."""
    node = make_node(name, **kw)
    del node["apiVersion"], node["kind"]
    return node
