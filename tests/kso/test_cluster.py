"""kso.core.cluster, the store: its image columns follow node updates, removals, row reuse, growth and eviction, and
equal a scan of every node."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from decisions.agents.base import Call
from decisions.agents.image import ImageAgent, ImageParams
from kso.core import cluster as cluster_module
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from kso.core.views import image_sizes_scan
from tests.support.decision_cases import (
    IMAGE_NAMES,
    SETTINGS,
    node_with,
    reference_image_locality,
)
from tests.support.fixtures import make_pod

POD_IMAGES = ["nginx:1.27.3", "docker.io/library/nginx:1.27.3", "busybox:1.36", "registry.k8s.io/pause:3.10",
              "quay.io/team/app:v1", "localhost/tool", "redis", "redis:latest", "absent:1", "nginx"]


def assert_columns_match(state: ClusterState, names: list[str], images: list[str]) -> None:
    view = state.view(names)
    fast = view.image_sizes(images)
    slow = image_sizes_scan(view.nodes, images)
    assert fast.shape == slow.shape == (len(names), len(images))
    assert np.array_equal(fast, slow), (names, images, fast, slow)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.integers(0, 11),
                  st.lists(st.tuples(st.integers(0, len(IMAGE_NAMES) - 1), st.integers(0, 2_000_000_000)), max_size=5)),
        st.tuples(st.just("remove"), st.integers(0, 11), st.just([])),
        st.tuples(st.just("pod"), st.integers(0, 11), st.just([])),
        st.tuples(st.just("unpod"), st.integers(0, 11), st.just([])),
        st.tuples(st.just("query"), st.integers(0, 11), st.lists(st.sampled_from(POD_IMAGES), min_size=1, max_size=4)),
    ),
    max_size=40,
)


def test_image_columns_follow_node_updates_removals_and_row_reuse() -> None:
    state = ClusterState()
    for i in range(5):
        state.upsert_node(node_from_k8s(node_with(f"n{i}", [(0, 100 + i), (2, 50)])))
    names = [f"n{i}" for i in range(5)] + ["unknown"]
    images = ["nginx:1.27.3", "docker.io/library/nginx:1.27.3", "busybox:1.36", "docker.io/library/busybox:1.36"]
    normalised = [pod_from_k8s(make_pod("p", images=images)).images[i] for i in range(4)]
    assert_columns_match(state, names, normalised)  # builds the columns
    state.upsert_node(node_from_k8s(node_with("n1", [(1, 7)], rv="2")))  # n1's images change
    state.remove_node("n2")
    state.upsert_node(node_from_k8s(node_with("n9", [(2, 999)])))  # takes n2's freed row
    assert_columns_match(state, [*names, "n9"], normalised)
    view = state.view(["n1", "n2", "n9"])
    assert view.image_sizes(["docker.io/library/nginx:1.27.3"]).ravel().tolist() == [7.0, 0.0, 0.0]
    assert view.image_sizes(["docker.io/library/busybox:1.36"]).ravel().tolist() == [0.0, 0.0, 999.0]
    state.clear()
    assert state.view(["n1"]).image_sizes(["docker.io/library/nginx:1.27.3"]).tolist() == [[0.0]]


def test_image_columns_survive_growth_and_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "IMAGE_COLUMNS", 3)
    state = ClusterState()
    state.upsert_node(node_from_k8s(node_with("a", [(3, 11)])))
    assert_columns_match(state, ["a"], ["registry.k8s.io/pause:3.10"])
    for i in range(300):  # past the initial 64 rows, several times
        state.upsert_node(node_from_k8s(node_with(f"g{i}", [(3, i + 1), (i % 7, 5)])))
    names = ["a", *(f"g{i}" for i in range(0, 300, 7))]
    assert_columns_match(state, names, ["registry.k8s.io/pause:3.10"])
    for image in POD_IMAGES:  # more images than columns: older ones are dropped and rebuilt
        assert_columns_match(state, names, [image])
    assert len(state._image_columns) == 3
    assert_columns_match(state, names, POD_IMAGES)


@SETTINGS
@given(ops)
def test_image_columns_equal_a_scan_of_every_node(steps: list[tuple[str, int, list[Any]]]) -> None:
    state = ClusterState()
    rv = 0
    agent = ImageAgent(ImageParams())
    for op, i, arg in steps:
        rv += 1
        name = f"n{i}"
        if op == "upsert":
            state.upsert_node(node_from_k8s(node_with(name, arg, rv=str(rv))))
        elif op == "remove":
            state.remove_node(name)
        elif op == "pod":
            state.upsert_pod(pod_from_k8s(make_pod(f"p{i}", node=name)))
        elif op == "unpod":
            state.remove_pod(f"uid-default-p{i}")
        else:
            names = [f"n{k}" for k in range(12)]
            random.Random(rv).shuffle(names)
            pod = pod_from_k8s(make_pod("q", images=arg))
            assert_columns_match(state, names, list(dict.fromkeys(pod.images)))
            call = Call(pod, state.view(names))
            assert agent.image_locality(call).tolist() == reference_image_locality(call).tolist()
