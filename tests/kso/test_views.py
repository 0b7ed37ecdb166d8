"""kso.core.views: views gathered from the store, remembered views equal fresh ones, LastKept, and read-only shared
columns."""

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
from kso.core.objects import node_from_k8s
from kso.core.views import LastKept, NodeView
from tests.support.decision_cases import (
    node_with,
)
from tests.support.fixtures import make_node, make_pod
from tests.support.view_cases import (
    FreshState,
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


def same_view(kept: NodeView, fresh: NodeView) -> None:
    assert kept.names == fresh.names and kept.columns == fresh.columns
    assert (kept.unknown, kept.total_nodes, kept.layout) == (fresh.unknown, fresh.total_nodes, fresh.layout)
    assert kept.all_known() == fresh.all_known()
    for field in FIELDS:
        a, b = getattr(kept, field), getattr(fresh, field)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), field
        assert not a.flags.writeable, field  # shared by the calls that get it


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9), window=st.sampled_from([0.0, 300.0]))
def test_remembered_views_equal_fresh_ones(seed: int, window: float) -> None:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(12)]
    kept, fresh = ClusterState(recent_window_s=window), FreshState(recent_window_s=window)
    for name in names[:10]:
        made = random_node(rng, name)
        for s in (kept, fresh):
            s.upsert_node(node_from_k8s(made))
    lists = [list(names), names[3:] + ["ghost"], list(reversed(names[:6]))]
    for step in range(40):
        random_event(rng, [kept, fresh], names, step)
        for listed in lists:
            first = kept.view(listed, stable=True)
            same_view(first, fresh.view(listed))
            again = kept.view(listed, stable=True)
            assert again is first  # nothing changed: the very same view


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


def test_agents_cannot_write_a_remembered_view() -> None:
    state = ClusterState()
    state.upsert_node(node_from_k8s(make_node("n0")))
    view = state.view(["n0"], stable=True)
    with pytest.raises(ValueError, match="read-only"):
        view.requested[0, 0] = 1.0
    plain = state.view(["n0"])  # a view of a list without that promise: its own arrays, as before
    plain.requested[0, 0] = 1.0
    assert state.view(["n0"], stable=True).requested[0, 0] == 0.0
    assert np.isnan(state.view(["x"], stable=True).alloc).all()
