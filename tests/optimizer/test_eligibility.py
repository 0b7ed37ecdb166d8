"""optimizer.reoptimize.eligibility: which pods ``kso reoptimize`` may move, and why the others stay."""

from __future__ import annotations

import pytest

from kso.core.objects import pod_from_k8s
from optimizer.reoptimize import eligibility
from tests.optimizer.reoptimize_cluster import NEVER, pod


@pytest.mark.parametrize("name", sorted(NEVER))
def test_never_movable_kinds_have_a_reason(name: str) -> None:
    raw = NEVER[name]
    replicas = {("team-a", "ReplicaSet", "web"): 4, ("team-a", "ReplicaSet", "solo"): 1,
                ("team-a", "StatefulSet", "db"): 1, ("kube-system", "ReplicaSet", "coredns"): 2}
    why = eligibility.not_movable_reason(raw, pod_from_k8s(raw), {"kube-system"},
                                        lambda ns, kind, n: (replicas.get((ns, kind, n)), "unknown owner"))
    assert why, name


def test_movable_pod_has_no_reason_and_unknown_owner_is_not_moved() -> None:
    raw = pod("web-0", "n1")
    assert eligibility.not_movable_reason(raw, pod_from_k8s(raw), {"kube-system"}, lambda *a: (4, "")) is None
    assert eligibility.not_movable_reason(raw, pod_from_k8s(raw), set(), lambda *a: (None, "owner unreadable (HTTP 403)")) \
        == "owner unreadable (HTTP 403)"
    assert eligibility.not_movable_reason(raw, pod_from_k8s(raw), {"team-a"}, lambda *a: (4, "")) == "namespace team-a excluded"
    opted_in = pod("w", "n1", annotations={"kso.io/evict": "true"})
    assert eligibility.not_movable_reason(opted_in, pod_from_k8s(opted_in), set(), lambda *a: (4, "")) is None
