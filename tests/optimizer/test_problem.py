"""optimizer.plan.problem.class_key: memoised by what the key is made of, the same keys as computing them."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kso.core.objects import PodInfo, Toleration
from optimizer.plan import problem
from optimizer.plan.problem import class_key

TEXT = st.sampled_from(["", "a", "b", "ns-1", "web", "zone", "x=y"])
VALUES = st.sampled_from([0.0, -0.0, 1.0, 1, 100.0, 128 * 2**20, 0.5, 1e-9, 3e12, float("nan")])
REQUESTS = st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu", "ephemeral-storage"]), VALUES,
                           max_size=5)
TOLERATIONS = st.lists(st.builds(Toleration, TEXT, st.sampled_from(["Equal", "Exists"]), TEXT,
                                 st.sampled_from(["", "NoSchedule", "NoExecute"])), max_size=3).map(tuple)
TERMS = st.lists(st.lists(st.tuples(TEXT, st.sampled_from(["In", "NotIn", "Exists"]),
                                    st.lists(TEXT, max_size=2).map(tuple)), max_size=2).map(tuple),
                 max_size=2).map(tuple)
PODS = st.builds(lambda ns, kind, owner, req, sel, tol, terms: PodInfo(
    "uid", ns, "p", "", req, 0.0, 0.0, (), (), owner_kind=kind, owner_name=owner, node_selector=sel,
    tolerations=tol, required_terms=terms),
    TEXT, st.sampled_from(["", "ReplicaSet", "Job"]), TEXT, REQUESTS, st.dictionaries(TEXT, TEXT, max_size=2),
    TOLERATIONS, TERMS)


@settings(max_examples=300, deadline=None)
@given(st.lists(PODS, min_size=1, max_size=12), st.randoms(use_true_random=False))
def test_memoised_keys_are_the_computed_ones(pods: list[PodInfo], rnd: random.Random) -> None:
    """In any order, repeated, with pods that differ only where a memo could confuse them (0.0 / -0.0,
    1 / 1.0, the order of requests, rules that print alike): each key is what computing it gives."""
    calls = pods * 3
    rnd.shuffle(calls)
    for pod in calls:
        assert class_key(pod) == problem._class_key(pod)


def test_keys_as_before_and_zero_signs_apart() -> None:
    tol = (Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),)
    owned = PodInfo("u", "e2e", "p", "", {"cpu": 100.0, "memory": 128.0 * 2**20, "pods": 1.0}, 100.0, 0.0, (), (),
                    owner_kind="ReplicaSet", owner_name="web", tolerations=tol)
    bare = PodInfo("u", "e2e", "q", "", {"cpu": 250.0, "nvidia.com/gpu": 1.0}, 250.0, 0.0, (), ())
    for _ in range(2):  # computed, then memoised
        assert class_key(owned) == "e2e/ReplicaSet/web@cpu=100m,mem=128Mi#" + problem._rules_digest(owned)[1:]
        assert class_key(bare) == "shape@cpu=250m,mem=0Mi,nvidia.com/gpu=1"
    zero = PodInfo("u", "e2e", "z", "", {"cpu": 0.0}, 0.0, 0.0, (), ())
    minus = PodInfo("u", "e2e", "z", "", {"cpu": -0.0}, 0.0, 0.0, (), ())
    assert [class_key(zero), class_key(minus), class_key(zero)] == [
        "shape@cpu=0m,mem=0Mi", "shape@cpu=-0m,mem=0Mi", "shape@cpu=0m,mem=0Mi"]


def test_memo_is_bounded() -> None:
    for i in range(problem._CLASS_KEYS_MAX + 10):
        pod = PodInfo("u", f"ns{i}", "p", "", {"cpu": 1.0}, 1.0, 0.0, (), (), owner_kind="Job", owner_name="j")
        assert class_key(pod) == f"ns{i}/Job/j@cpu=1m,mem=0Mi"
    assert len(problem._CLASS_KEYS) <= problem._CLASS_KEYS_MAX
