"""decisions.engine: the combined scores, the call's nodes from full Node objects, and a bad pod refused whatever
was parsed before."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from decisions.agents.base import Call
from decisions.engine import InputError
from extender.config import load_config
from extender.protocol import parse_extender_args
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from tests.support.decision_cases import (
    full_body,
    go_node,
)
from tests.support.engine_cases import (
    MANY_EXAMPLES,
)
from tests.support.fixtures import make_node, make_pod


def test_a_bad_pod_reusing_a_parsed_pods_uid_and_resource_version_is_still_refused() -> None:
    state = ClusterState()
    state.upsert_node(node_from_k8s(make_node("n0")))
    ext = Extender(load_config({"KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder())
    good = make_pod("p", uid="u-1")
    good["metadata"]["resourceVersion"] = "5"
    ext.filter(parse_extender_args(orjson.dumps({"Pod": good, "NodeNames": ["n0"]})))
    assert len(ext.pod_memo) == 1
    bad = orjson.loads(orjson.dumps(good))
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-1"
    with pytest.raises(InputError, match="negative"):
        ext.filter(parse_extender_args(orjson.dumps({"Pod": bad, "NodeNames": ["n0"]})))


def test_resolve_of_full_nodes_all_known_equals_the_per_item_path() -> None:
    """API mode (bodies never cached): a call whose nodes are all in the cache takes the names in one pass; any
    other call the per-item path, with its errors and its nodes judged from the body."""
    nodes = [go_node(f"k{i}", cpu=str(2 + i)) for i in range(5)]
    state = ClusterState()
    for node in nodes:
        state.upsert_node(node_from_k8s(node))
    ext = Extender(load_config({"KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder(), cache_bodies=False)
    order = [nodes[3], nodes[0], nodes[4], nodes[0]]
    view = ext.call_of(parse_extender_args(full_body(make_pod("p"), order))).view
    ref = state.view([n["metadata"]["name"] for n in order])
    assert view.names == ref.names and view.all_known() and (view.rows == ref.rows).all()
    assert np.array_equal(view.alloc, ref.alloc) and np.array_equal(view.requested, ref.requested)
    # a node the cache does not know: judged from its object, the others from the cache
    stranger = go_node("stranger", cpu="7")
    view = ext.call_of(parse_extender_args(full_body(make_pod("p"), [nodes[1], stranger]))).view
    assert view.names == ["k1", "stranger"] and view.all_known()
    assert view.alloc[1, view.columns["cpu"]] == 7000 and view.alloc[0, view.columns["cpu"]] == 3000
    # items without a usable name: the per-item path's error, naming the item
    for bad in ({"metadata": {}}, {"metadata": []}, {"metadata": {"name": ""}}, {"metadata": {"name": 5}},
                {"spec": {}}):
        args = parse_extender_args(orjson.dumps({"Pod": make_pod("p"), "Nodes": {"items": [nodes[0], bad]}}))
        with pytest.raises(InputError, match=r"Nodes.items\[1\] has no metadata.name"):
            ext.call_of(args)


def extender_with(priorities: dict[str, object], weights: dict[str, int], n: int) -> tuple[Extender, Call]:
    state = ClusterState()
    for i in range(n):
        state.upsert_node(node_from_k8s(make_node(f"n{i}")))
    ext = Extender(load_config({"KSO_AGENTS": "safe", "KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder())
    ext.priorities = dict(priorities)  # type: ignore[arg-type]
    ext.weights = dict(weights)
    return ext, Call(pod_from_k8s(make_pod("p")), state.view([f"n{i}" for i in range(n)] + ["ghost"]))


@MANY_EXAMPLES
@given(seed=st.integers(0, 10**9), n=st.integers(1, 30), k=st.integers(1, 5), floats=st.booleans(),
       ghost=st.booleans())
def test_integer_priorities_combine_as_the_float_sum(seed: int, n: int, k: int, floats: bool, ghost: bool) -> None:
    """prioritize's integer path (every priority gave an integer array) against the float path explain takes:
    out-of-range scores clamped, weights 1..20, unknown nodes 0; a float priority takes the float path."""
    rng = random.Random(seed)
    size = n + 1
    arrays = [np.array([rng.choice([-3, 0, 1, 5, 9, 10, 11, 10**12, rng.randint(0, 10)]) for _ in range(size)])
              for _ in range(k)]
    if floats:
        arrays[0] = arrays[0] + 0.5
    priorities = {f"p{j}": (lambda call, a=a: a if ghost else a.copy()) for j, a in enumerate(arrays)}
    ext, call = extender_with(priorities, {f"p{j}": rng.randint(1, 20) for j in range(k)}, n)
    fast, _ = ext.scores(call, "prioritize", per_agent=False)
    slow, _ = ext.scores(call, "explain", per_agent=True)
    assert fast.dtype == slow.dtype and fast.tobytes() == slow.tobytes()
    assert fast[-1] == 0  # the ghost node


@MANY_EXAMPLES
@given(seed=st.integers(0, 10**9), n=st.integers(1, 30), k=st.integers(1, 5), floats=st.booleans(),
       hit=st.sampled_from([None, "some", "all"]))
def test_prioritize_scores_are_in_range(seed: int, n: int, k: int, floats: bool, hit: str | None) -> None:
    """What prioritize_json hands HostScoreReplies.encode as in range is one int per node, 0..MAX_PRIORITY,
    whatever the priorities give (out of range, floats) and whatever the plan does to it."""
    rng = random.Random(seed)
    arrays = [np.array([rng.choice([-3, 0, 1, 5, 9, 10, 11, 10**12, rng.randint(0, 10)]) for _ in range(n + 1)])
              for _ in range(k)]
    if floats:
        arrays[0] = arrays[0] + rng.choice([0.5, float("nan"), float("inf"), -float("inf")])
    priorities = {f"p{j}": (lambda call, a=a: a.copy()) for j, a in enumerate(arrays)}
    ext, call = extender_with(priorities, {f"p{j}": rng.randint(1, 20) for j in range(k)}, n)
    combined, _ = ext.scores(call, "prioritize", per_agent=False)
    plan = None if hit is None else np.array([hit == "all" or rng.random() < 0.5 for _ in range(n + 1)])
    scores = ext.apply_plan(combined, plan)
    assert scores.dtype.kind == "i" and scores.shape == (n + 1,)
    assert 0 <= scores.min() and scores.max() <= 10
