"""kso.core.views: views gathered from the store (taken from its store-wide view) equal the store's own columns
whatever the list (shuffled, rotating, repeated), LastKept, and the read-only store-wide view."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.config import load_config
from extender.protocol import parse_extender_args
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from kso.core.views import LastKept, NodeView
from tests.support.decision_cases import (
    node_with,
)
from tests.support.fixtures import make_node, make_pod
from tests.support.view_cases import (
    random_event,
    random_node,
)


def test_view_without_a_state_scans_its_nodes() -> None:
    state = ClusterState()
    state.upsert_node(node_from_k8s(node_with("a", [(0, 10)])))
    view = state.view(["a", "b"])
    assert [n and n.name for n in view.nodes] == ["a", None]  # taken from the store on first use
    view.state = None
    assert view.image_sizes(["docker.io/library/nginx:1.27.3"]).tolist() == [[10.0], [0.0]]


def test_all_known_counts_the_views_unknown_nodes() -> None:
    state = ClusterState()
    for i in range(3):
        state.upsert_node(node_from_k8s(make_node(f"n{i}")))
    for names, expect in ((["n0", "n1"], True), (["n0", "x", "n2", "y"], False), ([], True)):
        view = state.view(names)
        assert view.all_known() is expect and view.unknown == len(names) - int(view.known.sum())
    ext = Extender(load_config({"KSO_AGENTS": "safe", "KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder(),
                   cache_bodies=False)
    body = {"Pod": make_pod("p"), "Nodes": {"items": [make_node("n0"), make_node("new")]}}
    view = ext.call_of(parse_extender_args(orjson.dumps(body))).view
    assert view.all_known() and view.known.all()  # the body's node, judged for this call only


FIELDS = ("known", "alloc", "requested", "mean_free", "std_free", "forecast_free", "recent", "congestion", "rows")


def gathered_from_the_store(state: ClusterState, names: list[str]) -> dict[str, np.ndarray]:
    """The reference: each column of ``names``' rows read from the store's own (live) columns."""
    rows = np.array([state.row_of.get(n, 0) for n in names], dtype=np.intp)
    columns = {f: getattr(state, f)[rows] for f in FIELDS if f not in ("known", "rows")}
    return {**columns, "known": rows > 0, "rows": rows}


def same_as_the_store(view: NodeView, state: ClusterState, names: list[str]) -> None:
    expected = gathered_from_the_store(state, names)
    assert view.names == names and view.columns == state.columns
    unknown = sum(n not in state.row_of for n in names)
    assert (view.unknown, view.total_nodes, view.layout) == (unknown, len(state.row_of), state.layout)
    for field in FIELDS:
        a, b = getattr(view, field), expected[field]
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), field
    whole = view.whole
    assert whole is not None and whole.whole is None
    for field in FIELDS:  # shared by every call while the store's node columns do not change
        assert not getattr(whole, field).flags.writeable, field


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9), window=st.sampled_from([0.0, 300.0]))
def test_views_of_any_list_equal_the_stores_columns(seed: int, window: float) -> None:
    """Lists as kube-scheduler sends them (a window rotating through the nodes, each in a new order, some repeated,
    unknown names among them) give the store's own rows, event after event: the store-wide view they are taken
    from follows every change (a node added, changed or removed, a pod bound, assumed or deleted, a new column)."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(12)]
    state = ClusterState(recent_window_s=window)
    for name in names[:10]:
        state.upsert_node(node_from_k8s(random_node(rng, name)))
    start = 0
    for step in range(40):
        random_event(rng, [state], names, step)
        window_ = [names[(start + j) % len(names)] for j in range(5)] + ["ghost"]
        start = (start + 5) % len(names)
        for listed in (rng.sample(window_, len(window_)), rng.sample(names, len(names)), window_):
            same_as_the_store(state.view(listed), state, listed)
        again = state.view(window_)
        assert again.whole is state.whole()  # nothing changed: the same store-wide view


def test_the_store_wide_view_is_the_same_until_its_node_columns_change() -> None:
    """Binds change requested (and recent) with every pod: the store-wide view does not hold them (no copy per
    bind); each call's view takes them from the store itself."""
    state = ClusterState()
    state.upsert_node(node_from_k8s(make_node("n0")))
    first = state.whole()
    assert state.whole() is first and state.view(["n0"]).whole is first
    assert first.requested.shape[0] == 0 and first.recent.shape[0] == 0
    state.upsert_pod(pod_from_k8s(make_pod("p", cpu="1", node="n0", uid="u")))
    assert state.whole() is first
    assert state.view(["n0"]).requested[0, state.columns["cpu"]] == 1000.0
    state.upsert_node(node_from_k8s(make_node("n1")))
    added = state.whole()
    assert added is not first and added.names[state.row_of["n1"]] == "n1" and added.known[state.row_of["n1"]]


def test_last_kept_matches_the_very_arrays_it_was_kept_for() -> None:
    a, b, c = np.zeros(3), np.ones(3), np.zeros(3)
    for x in (a, b, c):
        x.flags.writeable = False
    kept = LastKept()
    assert kept.get(a) is None and kept.value is None
    value = object()
    assert kept.keep(value, a, b) is value
    assert kept.get(a, b) is value and kept.value is value
    assert kept.get(c, b) is None and kept.get(a, c) is None  # equal values are not the same arrays
    assert kept.get(a) is None  # fewer arrays than it was kept for
    assert kept.get(a, b, c) is value  # kept for the first two: the third does not count
    writable = np.zeros(3)
    assert kept.keep(object(), a, writable) is not value and kept.get(a, b) is value  # not read only: not kept
    assert kept.keep(object(), a, None) is not value and kept.get(a, b) is value
    other = object()
    kept.keep(other, c)
    assert kept.get(c) is other and kept.get(a, b) is None


def test_agents_cannot_write_a_view_and_a_list_gets_its_view_again_until_either_changes() -> None:
    state = ClusterState()
    for name in ("n0", "n1"):
        state.upsert_node(node_from_k8s(make_node(name)))
    with pytest.raises(ValueError, match="read-only"):
        state.whole().requested[0, 0] = 1.0
    listed = ["n1", "n0"]
    view = state.view(listed)
    with pytest.raises(ValueError, match="read-only"):  # shared by the calls that get it again
        view.requested[0, 0] = 1.0
    assert state.view(listed) is view  # prioritize's list after filter's: the same bytes, the same list
    assert state.view(["n1", "n0"]) is not view  # another list
    listed.reverse()  # changed in place: gathered again
    assert state.view(listed).names == ["n0", "n1"] and state.view(listed).rows.tolist() == [1, 2]
    again = state.view(listed)
    state.upsert_pod(pod_from_k8s(make_pod("p", cpu="1", node="n0", uid="u")))
    changed = state.view(listed)
    assert changed is not again and changed.requested[0, state.columns["cpu"]] == 1000.0
    assert np.isnan(state.view(["x"]).alloc).all()


def test_a_views_node_columns_are_one_gather_of_the_packed_store_wide_block() -> None:
    """The node columns of a call's view are slices of one row-major block gathered by its rows (one take per call,
    not one per column), read only, with the store's values; requested and recent are the store's own rows."""
    state = ClusterState()
    for i in range(6):
        state.upsert_node(node_from_k8s(make_node(f"n{i}", cpu=str(i + 1))))
    state.upsert_pod(pod_from_k8s(make_pod("p", cpu="1", node="n3", uid="u")))
    listed = ["n4", "ghost", "n1", "n3"]
    view = state.view(listed)
    node_columns = ("alloc", "mean_free", "std_free", "forecast_free", "congestion")
    block = view.alloc.base
    assert block is not None and block.flags.c_contiguous and block.shape == (len(listed), len(state.columns) + 7)
    for field in node_columns:
        column = getattr(view, field)
        assert column.base is block and not column.flags.writeable, field
        expected = getattr(state, field)[view.rows]
        assert np.array_equal(column, expected, equal_nan=True), field
    assert view.requested[listed.index("n3"), state.columns["cpu"]] == 1000.0
    assert view.unknown == 1 and not view.known[1] and np.isnan(view.alloc[1]).all()
