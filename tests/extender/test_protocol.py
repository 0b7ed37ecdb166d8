"""extender.protocol: request bodies parsed as orjson would decode them whole (KnownNodeItems, KnownPods, the
NodeNames check, the depth check), with the same errors."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.protocol import DEFAULT_LIMITS, KnownPods, ProtocolError, parse_extender_args
from tests.support.decision_cases import (
    SETTINGS,
    full_body,
    go_node,
)
from tests.support.engine_cases import (
    MANY_EXAMPLES,
)
from tests.support.fixtures import make_pod


def reference_names_check(names: Any) -> None:
    for i, n in enumerate(names):
        if not isinstance(n, str) or not n:
            raise ProtocolError(f"NodeNames[{i}] must be a non-empty string", "wrong_type")


def _same_as_decoding_whole(known: Any, body: bytes, max_depth: int = 100) -> str:
    """Parse ``body`` through ``known`` as parse_extender_args does; assert it gives what decoding the whole body
    gives (the document, or the same ProtocolError), and say which path answered."""
    from extender.protocol import FOREIGN, Limits, loads

    limits = Limits(max_depth=max_depth)
    try:
        expected: Any = loads(body, limits)
    except ProtocolError as exc:
        expected = str(exc)
    doc, raws = known.decode_raw(body, limits)
    path = "assembled" if doc is not None and doc is not FOREIGN else "whole"
    if path == "whole":
        assert raws is None
        try:
            doc = loads(body, limits)
        except ProtocolError as exc:
            doc = str(exc)
        if doc is not None and not isinstance(doc, str):
            raws = known.learn(body, doc)
    else:
        assert raws is not None  # an assembled body always has its items' bytes
    assert doc == expected
    if isinstance(doc, dict):  # same key order too (the reply echoes the list's fields in order)
        assert orjson.dumps(doc) == orjson.dumps(expected)
    if raws is not None:  # the items' bytes, when given, are exactly orjson's for the decoded items
        assert isinstance(doc, dict) and raws == [orjson.dumps(n) for n in doc["Nodes"]["items"]]
    return path


@SETTINGS
@given(st.lists(st.one_of(st.text(max_size=3), st.integers(-2**63, 2**63 - 1), st.none(), st.booleans(), st.just(""),
                          st.lists(st.integers(0, 9), max_size=1)), max_size=8))
def test_node_names_check_gives_the_same_message(names: list[Any]) -> None:
    body = orjson.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": names})
    try:
        reference_names_check(names)
        expected = None
    except ProtocolError as exc:
        expected = str(exc)
    try:
        parse_extender_args(body)
        got = None
    except ProtocolError as exc:
        got = str(exc)
    assert got == expected


def test_known_node_items_give_what_decoding_the_whole_body_gives() -> None:
    from extender.protocol import KnownNodeItems

    rng = random.Random(7)
    known = KnownNodeItems()
    nodes = [go_node(f"n{i}", cpu=str(2 + i % 3)) for i in range(12)]
    pod = make_pod("p")
    body = full_body(pod, nodes)
    assert _same_as_decoding_whole(known, body) == "whole"  # first sight: decoded whole, learnt
    for _ in range(5):  # any order, any subset, another pod: assembled from the known nodes
        sub = rng.sample(nodes, rng.randint(0, len(nodes)))
        assert _same_as_decoding_whole(known, full_body(make_pod(f"p{rng.random()}"), sub)) == "assembled"
    changed = [*nodes[:3], {**nodes[3], "spec": {"unschedulable": True}}, *nodes[4:]]
    assert _same_as_decoding_whole(known, full_body(pod, changed)) == "whole"  # a changed node: decoded, relearnt
    assert _same_as_decoding_whole(known, full_body(pod, changed)) == "assembled"
    assert _same_as_decoding_whole(known, full_body(pod, nodes)) == "whole"  # and back
    # the list's own fields decoded every time, in order
    assert _same_as_decoding_whole(known, full_body(pod, nodes, {"kind": "NodeList", "metadata": {"x": 1}})) == \
        "assembled"
    assert _same_as_decoding_whole(known, full_body(pod, nodes, {})) == "assembled"
    # Go's HTML escape: bytes orjson does not write; never kept, always decoded whole
    odd = go_node("odd")
    odd["metadata"]["annotations"] = {"a": "<b>"}
    escaped = full_body(pod, [odd, *nodes]).replace(b"<b>", b"\\u003cb\\u003e")
    for _ in range(2):
        assert _same_as_decoding_whole(known, escaped) == "whole"
    assert b"odd" in known.foreign


def test_known_node_items_refuse_what_decoding_refuses() -> None:
    """Bodies that look like kube-scheduler's layout but are not what it looks like are decoded whole: the same
    document or the same 400."""
    from extender.protocol import KnownNodeItems

    known = KnownNodeItems()
    nodes = [go_node(f"m{i}") for i in range(4)]
    pod = make_pod("p")
    _same_as_decoding_whole(known, full_body(pod, nodes))
    good = full_body(pod, nodes)
    cases = [
        good[:-1],  # truncated
        good.replace(b'"NodeNames":null}', b'"NodeNames":null} '),  # trailing byte (layout differs)
        good.replace(b'{"Pod":{', b'{"Pod":{"Nodes":{"items":[', 1),  # a "Nodes" key inside the pod: cut badly
        full_body({"Nodes": {"metadata": {}, "items": []}}, nodes),  # ... or the pod ends early
        full_body(pod, nodes, {"metadata": {"items": [1]}}),  # an "items" array inside the list's metadata
        full_body(pod, nodes, {"items": 5, "metadata": {}}),  # "items" twice
        good.replace(b'},{"metadata"', b'} ,{"metadata"', 1),  # space between items
        good.replace(b'"items":[', b'"items":[5,', 1),  # a non-object item
        full_body(pod, [*nodes, nodes[0]]),  # the same node twice
        full_body(5, nodes),  # type: ignore[arg-type]  # a pod that is not an object (refused later, as before)
    ]
    deep: Any = "x"
    for _ in range(120):
        deep = [deep]
    cases.append(full_body({**pod, "deep": deep}, nodes))  # too deep in the pod
    cases.append(full_body(pod, nodes).replace(b'"x":1', b'"x":[[[[1]]]]'))
    for body in cases:
        _same_as_decoding_whole(known, body)
    # nodes nested deep enough that only a lower limit refuses them: the limit is checked on assembled bodies too
    deep_node = go_node("deepnode")
    deep_node["metadata"]["annotations"] = {}
    deep_node["spec"] = {"a": [[[[[[[[{"b": 1}]]]]]]]]}
    body = full_body(pod, [deep_node])
    _same_as_decoding_whole(known, body)
    assert _same_as_decoding_whole(known, body) == "assembled"
    for limit in (8, 10, 12, 14, 16):
        _same_as_decoding_whole(known, body, max_depth=limit)


def test_known_node_items_on_captured_kube_scheduler_bodies(fixtures_dir: Any) -> None:
    """kube-scheduler 1.36's own full-Nodes bodies are assembled from the second sight on."""
    from extender.protocol import KnownNodeItems

    known = KnownNodeItems()
    paths = sorted((fixtures_dir / "full-nodes").glob("*-filter.request.json")) + \
        sorted((fixtures_dir / "full-nodes").glob("*-prioritize.request.json"))
    assert paths
    for path in paths:
        _same_as_decoding_whole(known, path.read_bytes())
    assert {_same_as_decoding_whole(known, p.read_bytes()) for p in paths} == {"assembled"}


def test_known_node_items_stay_within_their_bounds() -> None:
    from extender.protocol import KnownNodeItems

    nodes = [go_node(f"b{i}") for i in range(10)]
    raw = len(orjson.dumps(nodes[0]))
    for known in (KnownNodeItems(limit=4), KnownNodeItems(max_bytes=3 * raw + 10)):
        for i in range(0, 10, 2):
            body = full_body(make_pod("p"), nodes[i:i + 2])
            _same_as_decoding_whole(known, body)
            assert _same_as_decoding_whole(known, body) == "assembled"
            # past a bound it is emptied before the next body is learnt: at most one body's nodes beyond it
            assert len(known.items) <= max(known.limit, 3) + 2 and known.size <= known.max_bytes + 2 * raw


def test_learnt_items_bytes_only_when_the_items_are_exactly_them() -> None:
    """learn gives the items' bytes only when the items array is those bytes, comma-joined, up to the tail."""
    from extender.protocol import KnownNodeItems

    nodes = [go_node(f"r{i}") for i in range(3)]
    pod = make_pod("p")
    good = full_body(pod, nodes)
    known = KnownNodeItems()
    assert known.learn(good, orjson.loads(good)) == [orjson.dumps(n) for n in nodes]
    assert known.learn(good, orjson.loads(good)) == [orjson.dumps(n) for n in nodes]  # known ones too
    # a first "Nodes" with other items than the one decoding keeps: the walk's bytes are not the decoded items
    twice = good.replace(b',"NodeNames":null}', b',"Nodes":{"items":[' + orjson.dumps(nodes[0]) + b']},"NodeNames":null}')
    assert KnownNodeItems().learn(twice, orjson.loads(twice)) is None
    for cache in (KnownNodeItems(), known):
        _same_as_decoding_whole(cache, twice)


def test_known_items_arrays_are_kept_whole_and_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same items array again (another pod) is taken from the kept run, without walking its items; it gives what
    decoding the whole body gives even after its nodes left the item cache or changed."""
    from extender.protocol import KnownNodeItems

    known = KnownNodeItems()
    nodes = [go_node(f"w{i}") for i in range(6)]
    assert _same_as_decoding_whole(known, full_body(make_pod("p0"), nodes)) == "whole"
    assert _same_as_decoding_whole(known, full_body(make_pod("p1"), nodes)) == "assembled"  # walked, kept
    assert len(known.runs) == 1

    def no_walk(*args: Any) -> None:
        raise AssertionError("walked a kept run")

    with monkeypatch.context() as m:
        m.setattr(known, "_walk", no_walk)
        for i in range(3):
            assert _same_as_decoding_whole(known, full_body(make_pod(f"q{i}"), nodes, {"kind": "NodeList"})) == \
                "assembled"
        known.items.clear()  # a run is the same bytes, so the same objects, whatever happened to the items since
        assert _same_as_decoding_whole(known, full_body(make_pod("r"), nodes)) == "assembled"
    # another order is another run; at most RUNS are kept, most recent first
    for k in range(KnownNodeItems.RUNS + 2):
        order = nodes[k % 6:] + nodes[:k % 6]
        _same_as_decoding_whole(known, full_body(make_pod("s"), order))
        _same_as_decoding_whole(known, full_body(make_pod("t"), order))
    assert len(known.runs) == KnownNodeItems.RUNS
    # a prefix of a kept run, or a kept run with a byte changed, is not that run
    short = full_body(make_pod("u"), nodes[:5])
    assert _same_as_decoding_whole(known, short) == "assembled"
    changed = full_body(make_pod("u"), nodes).replace(b'"w5"', b'"w7"')
    assert _same_as_decoding_whole(known, changed) == "whole"


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                               st.sampled_from(["Nodes", "NodeNames", "a", "Pod", 'q"']), inner, max_size=3),
                           max_leaves=8)


def whole(body: bytes) -> tuple[str, object]:
    """parse_extender_args' answer from decoding the whole body (the path before KnownPods)."""
    from extender import protocol

    try:
        doc = protocol.loads(body)
    except protocol.ProtocolError as exc:
        return "error", str(exc)
    f = protocol._folded(doc)
    return "doc", (f.get("pod"), f.get("nodenames"), f.get("nodes"))


@MANY_EXAMPLES
@given(pod=JSON_VALUES, names=st.lists(JSON_VALUES, max_size=4), cut=st.integers(0, 400), junk=st.binary(max_size=3))
def test_names_bodies_decode_as_the_whole_body(pod: object, names: list[object], cut: int, junk: bytes) -> None:
    """Bodies in kube-scheduler's NodeNames layout, with any Pod and names (nested "Nodes"/"NodeNames" keys
    too), whole or with a few bytes replaced: the same Pod and names as decoding the whole body, or None (then the
    whole body is decoded, as before). Twice, so the second takes the Pod from the memo."""
    from extender.protocol import DEFAULT_LIMITS, KnownPods

    pods = KnownPods()
    body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    bodies = [body, body[:cut] + junk + body[cut + len(junk):]]
    for b in bodies + bodies:
        try:
            got = pods.names_body(b, DEFAULT_LIMITS)
        except Exception as exc:  # noqa: BLE001 - only check_depth's 400 may come out, as loads gives it
            assert whole(b) == ("error", str(exc))
            continue
        if got is not None:
            kind, want = whole(b)
            assert kind == "doc" and (got["Pod"], got["NodeNames"], got["Nodes"]) == want


DEEP = st.recursive(st.integers(0, 3) | st.text(alphabet="[]{}a", max_size=3),
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["a", "[", "}"]), inner,
                                                                               max_size=2), max_leaves=10)


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


def test_new_names_lists_without_brackets_are_checked_once_and_refused_as_before() -> None:
    """kube-scheduler's arrays (a new list each call, no bracket in them: no depth scan of the body) are found
    checked once kept; a list with an empty or a non-string name is not, and parse_extender_args refuses it."""
    pods = KnownPods(names_limit=2)
    body = orjson.dumps({"Pod": make_pod("p"), "Nodes": None, "NodeNames": ["a", "b-1.x"]})
    got = pods.names_body(body, DEFAULT_LIMITS)
    assert got is not None and pods.checked_names(got["NodeNames"])
    for names in (["a", ""], ["a", 1]):
        bad = orjson.dumps({"Pod": make_pod("p"), "Nodes": None, "NodeNames": names})
        got = pods.names_body(bad, DEFAULT_LIMITS)
        assert got is not None and not pods.checked_names(got["NodeNames"])
        with pytest.raises(ProtocolError, match=r"NodeNames\[1\] must be a non-empty string"):
            parse_extender_args(bad)
