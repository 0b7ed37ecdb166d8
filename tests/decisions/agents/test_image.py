"""decisions.agents.image (and congestion) without annotations or images: the rule's scores."""

from __future__ import annotations

from decisions.agents.base import Call
from decisions.agents.image import ImageAgent, ImageParams
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from tests.support.decision_cases import (
    reference_image_locality,
)
from tests.support.fixtures import make_node, make_pod


def test_congestion_and_image_scores_without_annotations_or_images_equal_the_rule() -> None:
    from decisions.agents.congestion import CongestionAgent, CongestionParams, congestion_score

    state = ClusterState()
    for i in range(5):
        state.upsert_node(node_from_k8s(make_node(f"n{i}")))
    call = Call(pod_from_k8s(make_pod("p", images=["nginx", "redis:7"])), state.view([*(f"n{i}" for i in range(5)), "x"]))
    got = CongestionAgent(CongestionParams()).score(call)
    assert got.dtype == congestion_score(call.view.congestion, 100).dtype
    assert got.tolist() == congestion_score(call.view.congestion, 100).tolist() == [10] * 6
    got = ImageAgent(ImageParams()).image_locality(call)
    assert got.dtype == reference_image_locality(call).dtype
    assert got.tolist() == reference_image_locality(call).tolist() == [0] * 6
