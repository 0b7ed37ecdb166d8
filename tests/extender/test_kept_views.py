"""Session 10 of issue 16: what a call keeps from the last one (ClusterState's remembered views of a NodeNames list,
the agents' values derived from a view's columns alone, the protocol's kept names list) gives what computing it
afresh gives, bit for bit, whatever changed in between (nodes, pods, binds, recent binds expiring, columns)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.config import load_config
from extender.protocol import DEFAULT_LIMITS, KnownPods, parse_extender_args
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from kso.core.views import LastKept, NodeView
from tests.support.fixtures import make_node, make_pod

FIELDS = ("known", "alloc", "requested", "mean_free", "std_free", "forecast_free", "recent", "congestion", "rows")


class FreshState(ClusterState):
    """The path the remembered views skip: every view gathered afresh."""

    def view(self, names: Any, stable: bool = False) -> NodeView:
        return super().view(names)


def same_view(kept: NodeView, fresh: NodeView) -> None:
    assert kept.names == fresh.names and kept.columns == fresh.columns
    assert (kept.unknown, kept.total_nodes, kept.layout) == (fresh.unknown, fresh.total_nodes, fresh.layout)
    assert kept.all_known() == fresh.all_known()
    for field in FIELDS:
        a, b = getattr(kept, field), getattr(fresh, field)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), field
        assert not a.flags.writeable, field  # shared by the calls that get it


def node(rng: random.Random, name: str) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if rng.random() < 0.5:  # load statistics, some partial or unusable
        ann["mean-free-cpu"] = str(rng.choice([0, 50, 900, 3900, 4000]))
        if rng.random() < 0.8:
            ann["mean-free-memory"] = str(rng.choice([10, 2000, 8000, "x"]))
        ann["std-free-cpu"] = str(rng.choice([0, 10, 400, 2000]))
        ann["std-free-memory"] = str(rng.choice([0, 30, 900]))
        if rng.random() < 0.4:
            ann["forcasted-free-cpu"] = str(rng.choice([100, 3000]))
    if rng.random() < 0.3:
        ann["congestion-factor"] = str(rng.choice([0, 20, 99, 150]))
    extra = {"example.com/gpu": "2"} if rng.random() < 0.15 else {}
    return make_node(name, cpu=rng.choice(["4", "8", "0"]) if rng.random() < 0.1 else rng.choice(["4", "8"]),
                     memory=rng.choice(["8Gi", "16Gi"]), annotations=ann, **extra)


def random_event(rng: random.Random, states: list[ClusterState], names: list[str], step: int) -> None:
    """One change, applied to every state alike."""
    kind = rng.choice(["node", "node", "remove", "bind", "bind", "bind", "unbind", "assume", "nothing"])
    name = rng.choice(names)
    pod = make_pod(f"p{step}", cpu=rng.choice(["100m", "1", "3"]), memory=rng.choice(["64Mi", "4Gi"]),
                   node=name, uid=f"u{step}")
    if kind == "bind" and rng.random() < 0.2:
        pod["spec"]["containers"][0]["resources"]["requests"]["example.com/fpga"] = "1"  # a new column
    made = node(rng, name)
    victims = {uid for s in states for uid in s.pods}
    victim = rng.choice(sorted(victims)) if victims else None
    for s in states:
        if kind == "node":
            s.upsert_node(node_from_k8s(made))
        elif kind == "remove":
            s.remove_node(name)
        elif kind == "bind":
            s.upsert_pod(pod_from_k8s(pod), observed_binding=True)
        elif kind == "unbind" and victim is not None:
            s.remove_pod(victim)
        elif kind == "assume":
            s.assume(pod_from_k8s({**pod, "spec": {**pod["spec"], "nodeName": ""}}), name)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9), window=st.sampled_from([0.0, 300.0]))
def test_remembered_views_equal_fresh_ones(seed: int, window: float) -> None:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(12)]
    kept, fresh = ClusterState(recent_window_s=window), FreshState(recent_window_s=window)
    for name in names[:10]:
        made = node(rng, name)
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


def extenders(window: float) -> tuple[Extender, Extender]:
    def one(state: ClusterState) -> Extender:
        config = load_config({"KSO_AGENTS": "safe,pigeon,congestion,image", "KSO_PLAN_POLICY": "NONE",
                              "KSO_RECENT_BIND_WINDOW_S": str(window)})
        return Extender(config, state, RecordingBinder(), cache_bodies=False)

    return one(ClusterState(recent_window_s=window)), one(FreshState(recent_window_s=window))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9), window=st.sampled_from([0.0, 300.0]))
def test_replies_with_remembered_views_equal_fresh_ones(seed: int, window: float) -> None:
    """filter and prioritize through remembered views (and the safe agent's, pigeon's and the no-capacity check's
    values kept for their read-only columns) against the same calls on a state that gathers every view afresh."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(12)]
    kept, fresh = extenders(window)
    for name in names[:10]:
        made = node(rng, name)
        for e in (kept, fresh):
            e.state.upsert_node(node_from_k8s(made))
    lists = [list(names), names[3:] + ["ghost"], names[:10]]
    pods = [make_pod(f"q{j}", cpu=c, memory=m, uid=f"q{j}")
            for j, (c, m) in enumerate([("100m", "128Mi"), ("100m", "128Mi"), ("2", "1Gi"), ("3500m", "7Gi")])]
    for step in range(30):
        if rng.random() < 0.7:
            random_event(rng, [kept.state, fresh.state], names, step)
        listed = rng.choice(lists)
        pod = rng.choice(pods)
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": listed})
        for _ in range(2):  # the second call of a body meets everything kept by the first
            assert kept.filter(parse_extender_args(body)) == fresh.filter(parse_extender_args(body))
            assert kept.prioritize_json(parse_extender_args(body)) == fresh.prioritize_json(parse_extender_args(body))


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


def test_a_kept_names_list_is_the_same_object_for_the_same_bytes() -> None:
    pods = KnownPods(names_limit=2)
    body = orjson.dumps({"Pod": make_pod("p"), "Nodes": None, "NodeNames": ["a", "b"]})
    first, second = (pods.names_body(body, DEFAULT_LIMITS) for _ in range(2))
    assert first is not None and second is not None and first["NodeNames"] is second["NodeNames"] == ["a", "b"]
    other = orjson.dumps({"Pod": make_pod("p"), "Nodes": None, "NodeNames": ["a", "c"]})
    got = pods.names_body(other, DEFAULT_LIMITS)
    assert got is not None and got["NodeNames"] == ["a", "c"]
    pods.names_body(orjson.dumps({"Pod": make_pod("p"), "Nodes": None, "NodeNames": ["d"]}), DEFAULT_LIMITS)
    assert len(pods.names) <= 2  # bounded


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


DEEP = st.recursive(st.integers(0, 3) | st.text(alphabet="[]{}a", max_size=3),
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["a", "[", "}"]), inner,
                                                                               max_size=2), max_leaves=10)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=st.dictionaries(st.sampled_from(["a", "b"]), DEEP, min_size=1, max_size=2),
       names=st.lists(DEEP | st.text(max_size=3), max_size=3), depth=st.integers(1, 8))
def test_kept_parts_are_depth_checked_as_the_whole_body(pod: Any, names: list[Any], depth: int) -> None:
    """A body whose Pod and names bytes are kept is not scanned again: the same 400 (or none) as check_depth on the
    whole body gives, for any nesting and limit (brackets inside strings too), every time;
    and a kept names list of non-empty strings only is found checked."""
    from extender.protocol import Limits, ProtocolError, check_depth

    pods = KnownPods()
    limits = Limits(max_depth=depth)
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    try:
        check_depth(body, depth)
        want: object = None
    except ProtocolError as exc:
        want = str(exc)
    pods.names_body(body, Limits(max_depth=100))  # its parts kept (the limit of another call, or none reached)
    for _ in range(3):
        try:
            got = pods.names_body(body, limits)
            assert want is None and got is not None and got["NodeNames"] == names
            assert pods.checked_names(got["NodeNames"]) == (all(isinstance(n, str) and n for n in names))
        except ProtocolError as exc:
            assert str(exc) == want


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9))
def test_safe_inputs_from_the_kept_base_equal_the_reference(seed: int) -> None:
    """SafeAgent._inputs (the view's pod-independent part kept, the pod's demand added) against _inputs_from (every
    step from the view), field by field, bit for bit; twice, the second from the kept base."""
    from kso.decisions.agents.base import Call
    from kso.decisions.agents.safe import SafeAgent, SafeParams

    rng = random.Random(seed)
    state = ClusterState()
    names = [f"n{i}" for i in range(8)]
    for name in names:
        state.upsert_node(node_from_k8s(node(rng, name)))
    for step in range(10):
        random_event(rng, [state], names, step)
    agent = SafeAgent(SafeParams())
    listed = names + ["ghost"]
    for _ in range(2):
        pod = pod_from_k8s(make_pod("p", cpu=rng.choice(["100m", "2"]), memory=rng.choice(["64Mi", "3Gi"])))
        call = Call(pod, state.view(listed, stable=True))
        got, want = agent._inputs(call), agent._inputs_from(call)
        for field in ("mu", "sigma", "valid", "capacity", "risk"):
            a, b = getattr(got, field), getattr(want, field)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), field
        assert got.source == want.source and got.u_star == want.u_star
        kept, plain = agent.filter_overload(call), agent.filter_overload(Call(pod, state.view(list(listed))))
        assert kept.passed.tobytes() == plain.passed.tobytes()
        assert (kept.reasons, kept.notes) == (plain.reasons, plain.notes)
