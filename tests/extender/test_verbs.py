"""extender.verbs: the decision engine's answers in kube-scheduler's wire format (filter's reply, the pod of a call,
replies with the store-wide view's values taken by rows)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decisions.agents.base import Call, PredicateResult
from decisions.engine import InputError
from extender.config import load_config
from extender.protocol import ExtenderArgs, dumps, parse_extender_args
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from tests.support.decision_cases import (
    SETTINGS,
    full_body,
    go_node,
    random_state,
)
from tests.support.fixtures import make_node, make_pod
from tests.support.foo_agent import foo_registered
from tests.support.view_cases import (
    FreshState,
    random_event,
    random_node,
)


def reference_filter(ext: Extender, args: ExtenderArgs, predicates: list[str]) -> dict[str, Any]:
    """Extender.filter before Verdicts (NodeNames mode): dict-of-lists bookkeeping per node. Uses the
    extender's predicates, so it judges exactly as the fast path does."""
    from decisions.engine import run_guarded

    pod = pod_from_k8s(args.pod)
    view = ext.state.view(args.node_names or [])
    call = Call(pod, view)
    failed: dict[int, list[str]] = {}
    unresolvable: dict[int, str] = {}
    alloc = view.alloc  # known nodes without allocatable cpu or memory
    for i in np.flatnonzero(view.known & ~((alloc[:, view.columns["cpu"]] > 0) & (alloc[:, view.columns["memory"]] > 0))):
        unresolvable[int(i)] = (f"node reports no allocatable cpu or memory (cpu {view.alloc[i, view.columns['cpu']]:g}m,"
                                f" memory {view.alloc[i, view.columns['memory']]:g} bytes); kso cannot place pods there")
    for name in predicates:
        res = run_guarded(f"predicate {name}", ext.predicates[name], call, ext.metrics, "filter")
        if res is None:
            continue
        known = view.known.tolist()
        for i, reason in res.reasons.items():
            if i in unresolvable or not known[i]:
                continue
            failed.setdefault(i, []).append(reason)
    keep = [i for i in range(len(view)) if i not in failed and i not in unresolvable]
    return {
        "FailedNodes": {view.names[i]: "; ".join(r) for i, r in failed.items()},
        "FailedAndUnresolvableNodes": {view.names[i]: r for i, r in unresolvable.items()},
        "Error": "",
        "NodeNames": [view.names[i] for i in keep],
    }


def _json_values() -> st.SearchStrategy[Any]:
    """Any JSON value orjson writes: escapes, unicode, floats (also -0.0 and huge), deep nesting."""
    leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                       st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                       st.sampled_from(['"', "\\", "\n\t\x00\x1f", "\u2028", "<a&b>", "\U0001f600", "é", "/"]))
    return st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                        max_leaves=12)


@SETTINGS
@given(seed=st.integers(0, 10**9), n=st.integers(1, 40), two=st.booleans())
def test_filter_equals_the_per_node_bookkeeping(seed: int, n: int, two: bool) -> None:
    rng = random.Random(seed)
    state = random_state(rng, n)
    with foo_registered():
        ext = Extender(load_config({"KSO_AGENTS": "safe,pigeon,congestion,image,foo", "KSO_PLAN_POLICY": "NONE"}),
                       state, RecordingBinder())
    # a second predicate that fails some nodes, so that reasons of two predicates are merged
    odd = {i: f"odd: node {i}" for i in range(1, n + 3, 2)}
    ext.predicates["odd"] = lambda call: PredicateResult(np.ones(len(call.view), dtype=bool),
                                                         {i: r for i, r in odd.items() if i < len(call.view)})
    predicates = ["safe-overload", "foo", *(["odd"] if two else [])]
    names = [f"n{i}" for i in range(n)] + (["ghost-1", "ghost-2"] if rng.random() < 0.5 else [])
    rng.shuffle(names)
    pod = make_pod("p", cpu=f"{rng.randint(1, 8000)}m", memory=f"{rng.randint(1, 8000)}Mi")
    args = parse_extender_args(orjson.dumps({"Pod": pod, "NodeNames": names}))
    fast = ext.filter(args, predicates)
    slow = reference_filter(ext, args, predicates)
    assert orjson.dumps(fast) == orjson.dumps(slow)  # the same keys, values and order


@SETTINGS
@given(extras=st.lists(st.tuples(st.dictionaries(st.text(max_size=6), st.text(max_size=8), max_size=3), _json_values()),
                       min_size=1, max_size=6),
       failing=st.sets(st.integers(0, 5)), go_escapes=st.booleans(), seen=st.booleans())
def test_filter_reply_splices_exactly_the_reencoded_nodes(extras: list[tuple[dict[str, str], Any]], failing: set[int],
                                                         go_escapes: bool, seen: bool) -> None:
    """Full Nodes: filter's reply with the passing items' bytes spliced (KnownNodeItems) is byte for byte the reply
    with the decoded items encoded again, for any node objects; bytes orjson would not write (Go's HTML escapes)
    are never spliced."""
    import dataclasses

    from extender.protocol import NODE_ITEMS

    nodes = []
    NODE_ITEMS.items.clear()  # names another example left as "foreign" (escaped) are decoded whole, not learnt
    NODE_ITEMS.foreign.clear()
    for i, (notes, value) in enumerate(extras):
        node = go_node(f"splice-{i}", annotations={f"x/{k}": v for k, v in notes.items()})
        node["status"]["extra"] = value
        nodes.append(node)
    state = ClusterState()
    for node in nodes[::2]:  # some known to the cache, the others judged from the body
        state.upsert_node(node_from_k8s(node))
    ext = Extender(load_config({"KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder(), cache_bodies=False)
    ext.predicates["some"] = lambda call: PredicateResult(
        np.ones(len(call.view), dtype=bool), {i: f"fails {i}" for i in failing if i < len(call.view)})
    body = full_body(make_pod("p"), nodes, {"metadata": {"resourceVersion": "7"}})
    if go_escapes:
        body = body.replace(b"<", b"\\u003c").replace(b"&", b"\\u0026")
    for _ in range(2 if seen else 1):  # first sight (decoded whole, learnt), then assembled from the known nodes
        args = parse_extender_args(body)
        spliced = dumps(ext.filter(args, ["some"]))
        encoded = dumps(ext.filter(dataclasses.replace(args, node_raw=None), ["some"]))
        assert spliced == encoded
        assert orjson.loads(spliced)["Nodes"]["items"] == [n for i, n in enumerate(orjson.loads(body)["Nodes"]["items"])
                                                           if i not in failing]
        escaped = go_escapes and (b"\\u003c" in body or b"\\u0026" in body)
        assert (args.node_raw is None) == escaped  # spliced whenever the bytes are orjson's own


def test_a_repeated_pod_is_parsed_once_and_a_changed_or_bad_one_afresh() -> None:
    state = ClusterState()
    state.upsert_node(node_from_k8s(make_node("n0")))
    ext = Extender(load_config({"KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder())
    pod = make_pod("p", uid="u-9", cpu="300m")
    pod["metadata"]["resourceVersion"] = "7"
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": ["n0"]})
    first, second = (parse_extender_args(body) for _ in range(2))
    assert first.pod is second.pod  # the same bytes: the kept object
    info = ext.call_of(first).pod
    assert ext.call_of(second).pod is info and info.requests["cpu"] == 300
    changed = orjson.loads(body)
    changed["Pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    assert ext.call_of(parse_extender_args(orjson.dumps(changed))).pod.requests["cpu"] == 500
    bad = orjson.loads(body)
    bad["Pod"]["metadata"]["uid"] = "u-10"
    bad["Pod"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-1"
    for _ in range(2):  # refused each time, never kept
        with pytest.raises(InputError, match="negative"):
            ext.filter(parse_extender_args(orjson.dumps(bad)))
    other = Extender(load_config({"KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder())
    assert other.call_of(first).pod is not info  # another extender parses for itself


def extenders(window: float) -> tuple[Extender, Extender]:
    def one(state: ClusterState) -> Extender:
        config = load_config({"KSO_AGENTS": "safe,pigeon,congestion,image", "KSO_PLAN_POLICY": "NONE",
                              "KSO_RECENT_BIND_WINDOW_S": str(window)})
        return Extender(config, state, RecordingBinder(), cache_bodies=False)

    return one(ClusterState(recent_window_s=window)), one(FreshState(recent_window_s=window))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**9), window=st.sampled_from([0.0, 300.0]))
def test_replies_with_store_wide_views_equal_fresh_ones(seed: int, window: float) -> None:
    """filter and prioritize with the per-node values taken from the store-wide view (the safe agent's, sight's,
    congestion's and the no-capacity check's, kept for its read-only columns) against the same calls computed from
    each call's own columns, with lists as kube-scheduler sends them (a rotating window, a new order each call)."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(12)]
    kept, fresh = extenders(window)
    for name in names[:10]:
        made = random_node(rng, name)
        for e in (kept, fresh):
            e.state.upsert_node(node_from_k8s(made))
    lists = [list(names), names[3:] + ["ghost"], names[:10]]
    start = 0
    pods = [make_pod(f"q{j}", cpu=c, memory=m, uid=f"q{j}")
            for j, (c, m) in enumerate([("100m", "128Mi"), ("100m", "128Mi"), ("2", "1Gi"), ("3500m", "7Gi")])]
    for step in range(30):
        if rng.random() < 0.7:
            random_event(rng, [kept.state, fresh.state], names, step)
        listed = rng.choice(lists)
        if rng.random() < 0.5:  # kube-scheduler's: a window rotating through the nodes, in completion order
            listed = rng.sample([names[(start + j) % len(names)] for j in range(5)], 5)
            start = (start + 5) % len(names)
        pod = rng.choice(pods)
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": listed})
        for _ in range(2):  # the second call of a body meets everything kept by the first
            assert kept.filter(parse_extender_args(body)) == fresh.filter(parse_extender_args(body))
            assert kept.prioritize_json(parse_extender_args(body)) == fresh.prioritize_json(parse_extender_args(body))
