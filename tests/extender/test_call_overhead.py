"""Session 9 of issue 16: the per-call shortcuts give what the paths they skip give, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.config import load_config
from extender.protocol import parse_extender_args
from extender.replies import HostScoreReplies
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from kso.decisions.agents.base import Call
from kso.decisions.agents.pigeon import DemandStats, PigeonAgent, PigeonParams, albert_zhang, pigeon_scores
from kso.decisions.engine import InputError
from tests.support.fixtures import make_node, make_pod

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

FLOATS = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, -0.0, 0.5, 1.0, 0.1, 0.3]))


def reference_pigeon_scores(values: np.ndarray) -> np.ndarray:
    """pigeon_scores by its masked rule: with a NaN appended (scored 0 and dropped again) no input is all finite."""
    return pigeon_scores(np.append(np.asarray(values, dtype=float), np.nan))[:-1]


@SETTINGS
@given(st.lists(st.one_of(FLOATS, st.just(float("nan"))), max_size=60), st.booleans())
def test_pigeon_scores_equal_the_masked_rule(values: list[float], finite_only: bool) -> None:
    v = np.array([x for x in values if not (finite_only and x != x)], dtype=float)
    got, want = pigeon_scores(v), reference_pigeon_scores(v)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@SETTINGS
@given(st.lists(st.tuples(FLOATS, FLOATS, FLOATS), min_size=1, max_size=40),
       st.sampled_from([None, float("nan"), 0.0, -1.0]))
def test_albert_zhang_equals_the_masked_rule(rows: list[tuple[float, float, float]], odd: float | None) -> None:
    a = np.array(rows)
    mu, quad = a[:, :2], np.abs(a[:, 2]) + 1e-9
    if odd is not None:
        quad[len(quad) // 2] = odd
    denom = np.einsum("...i,...i->...", mu, mu)
    ok = (denom > 0) & (quad > 0)
    with np.errstate(all="ignore"):
        want = np.where(ok, np.sqrt(np.where(ok, quad, 0.0)) / np.where(ok, denom, 1.0), 0.0)
    assert albert_zhang(mu, quad).tobytes() == want.tobytes()


def demand_of(cpu_m: float, mem: float) -> np.ndarray:
    return np.array([cpu_m, mem])


def test_e2e_pods_demand_settles() -> None:
    agent = PigeonAgent(PigeonParams())
    for _ in range(200):
        agent._updated(demand_of(100.0, 2.0**27), commit=True)
    assert agent._settled == demand_of(100.0, 2.0**27).tobytes()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([100.0, 250.0, 1000.0, 33.3]), st.sampled_from([2.0**27, 5e8, 1.0])),
                min_size=1, max_size=8),
       st.lists(st.integers(1, 160), min_size=8, max_size=8))
def test_a_settled_demand_skips_the_update_and_keeps_the_same_moments(demands: list[tuple[float, float]],
                                                                     repeats: list[int]) -> None:
    """Runs of one demand (long enough for the running average to settle) and changes of demand: the agent's
    moments equal those of updating every call, bit for bit, and so does explain's peek."""
    agent = PigeonAgent(PigeonParams())
    plain = DemandStats()
    skipped = 0
    for (cpu, mem), times in zip(demands, repeats, strict=False):  # as many runs as demands
        d = demand_of(cpu, mem)
        for _ in range(times):
            peek = agent._updated(d, commit=False)
            before = agent._settled
            got = agent._updated(d, commit=True)
            skipped += before == d.tobytes()
            plain = plain.updated(d)
            for s in (got, peek):
                assert s.count == plain.count
                assert s.mean is not None and plain.mean is not None and s.second is not None and plain.second is not None
                assert s.mean.tobytes() == plain.mean.tobytes() and s.second.tobytes() == plain.second.tobytes()
    used = [times for _, times in zip(demands, repeats, strict=False)]
    if demands[-1] == (100.0, 2.0**27) and used[-1] >= 150:
        assert skipped > 0  # e2e's pods (100m, 128Mi) settle: the shortcut is taken


def extender_with(priorities: dict[str, object], weights: dict[str, int], n: int) -> tuple[Extender, Call]:
    state = ClusterState()
    for i in range(n):
        state.upsert_node(node_from_k8s(make_node(f"n{i}")))
    ext = Extender(load_config({"KSO_AGENTS": "safe", "KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder())
    ext.priorities = dict(priorities)  # type: ignore[arg-type]
    ext.weights = dict(weights)
    return ext, Call(pod_from_k8s(make_pod("p")), state.view([f"n{i}" for i in range(n)] + ["ghost"]))


@SETTINGS
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


# ---- NodeNames bodies taken apart; the Pod of a repeated body decoded and parsed once ----------------------

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


@SETTINGS
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


WIDE = st.one_of(st.floats(allow_nan=False, allow_infinity=False), FLOATS)


@SETTINGS
@given(st.lists(WIDE, min_size=1, max_size=60))
def test_finite_scores_equal_the_clipped_formula(values: list[float]) -> None:
    """Session 11: _finite_scores in place and without its clip (a no-op up to CLIP_FREE_SPAN) against the formula
    with the clip, bit for bit, over every finite double (spans past 1e300 included, where the clip stays)."""
    from kso.decisions.agents.pigeon import EQUAL_RTOL, MAX_PRIORITY, _finite_scores

    v = np.array(values, dtype=float)
    vmax, vmin = float(v.max()), float(v.min())
    span = vmax - vmin
    with np.errstate(all="ignore"):
        if span <= EQUAL_RTOL * max(1.0, abs(vmax)):
            want = np.full(v.shape, MAX_PRIORITY, dtype=np.int64)
        else:
            x = np.floor(1.0 + (MAX_PRIORITY - 1) * (vmax - v) / span + 0.5)
            want = np.minimum(np.maximum(x, 0, out=x), MAX_PRIORITY, out=x).astype(np.int64)
        got = _finite_scores(v, vmax, vmin)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@SETTINGS
@given(free=st.lists(st.lists(st.one_of(FLOATS, st.just(float("nan"))), min_size=3, max_size=3), max_size=20),
       d=st.lists(FLOATS, min_size=3, max_size=3), r=st.integers(1, 3))
def test_least_free_says_what_the_elementwise_comparison_says(free: list[list[float]], d: list[float], r: int) -> None:
    """Session 11: pigeon's feasibility shortcut (some d_j > min_k free[k, j], NaN left out) against (d > free).any()."""
    from operator import gt

    f = np.array(free, dtype=float).reshape(len(free), 3)[:, :r]
    dv = np.array(d[:r])
    least = np.fmin.reduce(f, axis=0).tolist() if f.size else []
    shortcut = not least or any(map(gt, dv.tolist(), least))
    assert shortcut == (not f.size or bool((dv > f).any()))


UNIT = st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0, 0.5, 0.25, 0.1]))


@SETTINGS
@given(rows=st.lists(st.lists(UNIT, min_size=5, max_size=5), min_size=1, max_size=40),
       new=st.lists(st.lists(UNIT, min_size=5, max_size=5), min_size=40, max_size=40),
       r=st.integers(1, 5), fortran=st.booleans(), gamma=st.sampled_from([0.0, 0.3, 1e-9]))
def test_binpack_stacked_sums_equal_the_einsums(rows: list[list[float]], new: list[list[float]], r: int, fortran: bool,
                                                gamma: float) -> None:
    """Session 11: the objective with its four row sums in one einsum gives the four einsums' bits, for every R and
    both memory layouts."""
    from kso.decisions.agents.pigeon import binpack_prelude, binpack_values_einsums, binpack_values_from

    order = "F" if fortran else "C"
    util = np.array(np.array(rows)[:, :r], order=order)
    util_new = np.array(np.array(new)[: len(rows), :r], order=order)
    pre = binpack_prelude(util)
    got, want = binpack_values_from(pre, util_new, gamma), binpack_values_einsums(pre, util_new, gamma)
    assert got.tobytes() == want.tobytes()


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 10), min_size=4, max_size=4), min_size=1, max_size=4), st.booleans())
def test_host_score_replies_of_a_remembered_view_equal_orjson(rounds: list[list[int]], churn: bool) -> None:
    """HostScoreReplies with its keys kept for a remembered view's rows (and prioritize's in_range) gives orjson's
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
        view = state.view(names, stable=True)
        expected = orjson.dumps([{"Host": h, "Score": s} for h, s in zip(names, scores, strict=True)])
        arr = np.array(scores, dtype=np.int64)
        assert replies.encode(view, arr, in_range=True) == expected
        assert replies.encode(view, arr) == expected


@SETTINGS
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
