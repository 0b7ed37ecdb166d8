"""extender.replies: prioritize's reply bytes from ready-made entries equal orjson's, whatever happens to the store's
rows."""

from __future__ import annotations

import numpy as np
import orjson
from hypothesis import given
from hypothesis import strategies as st

from extender.replies import HostScoreReplies
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s
from tests.support.decision_cases import (
    SETTINGS,
)
from tests.support.engine_cases import (
    MANY_EXAMPLES,
)
from tests.support.fixtures import make_node


@SETTINGS
@given(names=st.lists(st.text(min_size=1, max_size=6), min_size=0, max_size=8, unique=True),
       asked=st.data(), churn=st.booleans())
def test_host_score_replies_equal_orjson(names: list[str], asked: st.DataObject, churn: bool) -> None:
    state = ClusterState()
    replies = HostScoreReplies(state)
    for name in names:
        state.upsert_node(node_from_k8s(make_node(name)))
    pool = [*names, "not-in-cache", 'q"uote\\', "\u00e9\n"]
    call_names = asked.draw(st.lists(st.sampled_from(pool), max_size=10))
    scores = asked.draw(st.lists(st.integers(0, 10) | st.integers(-3, 30), min_size=len(call_names),
                                 max_size=len(call_names)))
    view = state.view(call_names)
    if churn and names:  # a row changes hands after the view was taken: the reply must still name the view's nodes
        state.remove_node(names[0])
        state.upsert_node(node_from_k8s(make_node("newcomer")))
    expected = orjson.dumps([{"Host": h, "Score": sc} for h, sc in zip(call_names, scores, strict=True)])
    assert replies.encode(view, scores) == expected
    assert replies.encode(view, np.array(scores, dtype=np.int64)) == expected  # prioritize's int array


@MANY_EXAMPLES
@given(st.lists(st.lists(st.integers(0, 10), min_size=4, max_size=4), min_size=1, max_size=4), st.booleans())
def test_host_score_replies_of_a_remembered_view_equal_orjson(rounds: list[list[int]], churn: bool) -> None:
    """HostScoreReplies with its entries kept by row (and prioritize's in_range) gives orjson's
    bytes, round after round, a row changing hands in between or not."""
    state = ClusterState()
    replies = HostScoreReplies(state)
    names = [f"n{i}" for i in range(4)]
    for name in names:
        state.upsert_node(node_from_k8s(make_node(name)))
    for j, scores in enumerate(rounds):
        if churn and j:
            state.remove_node(names[j % 4])
            state.upsert_node(node_from_k8s(make_node(names[j % 4])))
        view = state.view(names)
        expected = orjson.dumps([{"Host": h, "Score": s} for h, s in zip(names, scores, strict=True)])
        arr = np.array(scores, dtype=np.int64)
        assert replies.encode(view, arr, in_range=True) == expected
        assert replies.encode(view, arr) == expected
