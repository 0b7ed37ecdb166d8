"""The extender's fast paths give exactly what the straightforward computations they replaced gave.

Each fast path is checked against a reference kept here (the code it replaced, verbatim where possible):
the image-size columns of ClusterState (kept up to date as nodes come, change, go and rows are reused)
against a look into every node; the safe agent's failure reasons against per-value f-strings; the
filter's bookkeeping against the per-node dict loop; the name check of NodeNames against the per-item
loop; and the pure-ASGI front of the hot routes against FastAPI's routing of the same handlers.
"""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.app import create_app, outermost_hot_routes
from extender.config import load_config
from extender.protocol import ExtenderArgs, ProtocolError, dumps, parse_extender_args
from extender.replies import HostScoreReplies
from extender.verbs import Extender
from kso.core import cluster as cluster_module
from kso.core.binder import RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from kso.core.safety import beta_cases, safe_overload_risk
from kso.core.views import image_sizes_scan
from kso.decisions.agents.base import Call, PredicateResult
from kso.decisions.agents.image import ImageAgent, ImageParams, image_locality_score
from kso.decisions.agents.safe import RESOURCE_NAMES, RiskMemo, SafeAgent, SafeInputs, SafeParams
from kso.decisions.engine import InputError
from tests.support.fixtures import make_node, make_pod
from tests.support.foo_agent import foo_registered
from tests.support.reference_risk import reference_safe_overload_risk

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- references: the code the fast paths replaced ---------------------------------------------------

def reference_image_locality(call: Call) -> np.ndarray:
    """ImageAgent.image_locality before the image columns: every node's image map, per call."""
    images = list(dict.fromkeys(call.pod.images))
    view = call.view
    sizes = np.array(
        [[0 if node is None else node.images.get(img, 0) for img in images] for node in view.nodes],
        dtype=float,
    ).reshape(len(view), len(images))
    total = max(view.total_nodes, 1)
    spread = np.minimum(np.array([view.image_node_count.get(img, 0) / total for img in images]), 1.0)
    return image_locality_score(sizes, spread, len(call.pod.images))


def reference_filter_overload(agent: SafeAgent, call: Call) -> PredicateResult:
    """SafeAgent.filter_overload before the %-templates: one f-string per value."""
    s = agent.inputs(call)
    failed = s.valid & (s.risk > agent.eps)
    passed = ~failed.any(axis=1)
    reasons: dict[int, str] = {}
    bad = np.flatnonzero(~passed)
    if len(bad):
        risk, mu, sigma, fail = (a[bad].tolist() for a in (s.risk, s.mu, s.sigma, failed))
        head = f"P(util > {agent.u_star:.0%}) ="
        for k, i in enumerate(bad.tolist()):
            parts = [
                f"{RESOURCE_NAMES[r]} {head} {risk[k][r]:.3g} > eps {agent.eps:.2g} "
                f"(forecast util {mu[k][r]:.1%} +- {sigma[k][r]:.1%} with this pod, from {s.source[i]})"
                for r in range(2)
                if fail[k][r]
            ]
            reasons[i] = "safe-overload: " + "; ".join(parts)
    notes = {int(i): "safe-overload: no load statistics for this node; passed unjudged"
             for i in np.flatnonzero(~s.valid.any(axis=1))}
    return PredicateResult(passed, reasons, notes)


def reference_filter(ext: Extender, args: ExtenderArgs, predicates: list[str]) -> dict[str, Any]:
    """Extender.filter before Verdicts (NodeNames mode): dict-of-lists bookkeeping per node. Uses the
    extender's predicates, so it judges exactly as the fast path does."""
    from kso.decisions.engine import run_guarded

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


def reference_names_check(names: Any) -> None:
    for i, n in enumerate(names):
        if not isinstance(n, str) or not n:
            raise ProtocolError(f"NodeNames[{i}] must be a non-empty string", "wrong_type")


# ---- pods --------------------------------------------------------------------------------------------

def test_null_container_is_an_empty_container() -> None:
    # Go decodes null into a zero Container; kso used to crash on it (an internal error, found by the fuzz test).
    pod = make_pod("p", cpu="250m", memory="64Mi")
    pod["spec"]["containers"] = [None, *pod["spec"]["containers"]]
    info = pod_from_k8s(pod)
    assert info.requests["cpu"] == 250.0
    assert info.raw_images == ("docker.io/library/busybox:1.36",)
    pod["spec"]["containers"] = ["nope"]
    with pytest.raises(Exception, match=r"Pod.spec.containers\[0\] must be an object"):
        pod_from_k8s(pod)


# ---- image columns -----------------------------------------------------------------------------------

# A small universe of image references as kubelets report them (tagged, digests, short names) and as
# pods write them, so that raw and normalised names collide the way they do in clusters.
IMAGE_NAMES = [
    ["docker.io/library/nginx:1.27.3", "docker.io/library/nginx@sha256:aa"],
    ["nginx:1.27.3"],
    ["busybox:1.36", "docker.io/library/busybox@sha256:bb"],
    ["registry.k8s.io/pause:3.10"],
    ["quay.io/team/app:v1", "quay.io/team/app@sha256:cc"],
    ["localhost/tool"],
    ["redis"],
]
POD_IMAGES = ["nginx:1.27.3", "docker.io/library/nginx:1.27.3", "busybox:1.36", "registry.k8s.io/pause:3.10",
              "quay.io/team/app:v1", "localhost/tool", "redis", "redis:latest", "absent:1", "nginx"]


def node_with(name: str, images: list[tuple[int, int]], rv: str = "1") -> dict[str, Any]:
    node = make_node(name, cpu="8", memory="16Gi", images=[(IMAGE_NAMES[k], size) for k, size in images])
    node["metadata"]["resourceVersion"] = rv
    return node


def assert_columns_match(state: ClusterState, names: list[str], images: list[str]) -> None:
    view = state.view(names)
    fast = view.image_sizes(images)
    slow = image_sizes_scan(view.nodes, images)
    assert fast.shape == slow.shape == (len(names), len(images))
    assert np.array_equal(fast, slow), (names, images, fast, slow)


def test_image_columns_follow_node_updates_removals_and_row_reuse() -> None:
    state = ClusterState()
    for i in range(5):
        state.upsert_node(node_from_k8s(node_with(f"n{i}", [(0, 100 + i), (2, 50)])))
    names = [f"n{i}" for i in range(5)] + ["unknown"]
    images = ["nginx:1.27.3", "docker.io/library/nginx:1.27.3", "busybox:1.36", "docker.io/library/busybox:1.36"]
    normalised = [pod_from_k8s(make_pod("p", images=images)).images[i] for i in range(4)]
    assert_columns_match(state, names, normalised)  # builds the columns
    state.upsert_node(node_from_k8s(node_with("n1", [(1, 7)], rv="2")))  # n1's images change
    state.remove_node("n2")
    state.upsert_node(node_from_k8s(node_with("n9", [(2, 999)])))  # takes n2's freed row
    assert_columns_match(state, [*names, "n9"], normalised)
    view = state.view(["n1", "n2", "n9"])
    assert view.image_sizes(["docker.io/library/nginx:1.27.3"]).ravel().tolist() == [7.0, 0.0, 0.0]
    assert view.image_sizes(["docker.io/library/busybox:1.36"]).ravel().tolist() == [0.0, 0.0, 999.0]
    state.clear()
    assert state.view(["n1"]).image_sizes(["docker.io/library/nginx:1.27.3"]).tolist() == [[0.0]]


def test_image_columns_survive_growth_and_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "IMAGE_COLUMNS", 3)
    state = ClusterState()
    state.upsert_node(node_from_k8s(node_with("a", [(3, 11)])))
    assert_columns_match(state, ["a"], ["registry.k8s.io/pause:3.10"])
    for i in range(300):  # past the initial 64 rows, several times
        state.upsert_node(node_from_k8s(node_with(f"g{i}", [(3, i + 1), (i % 7, 5)])))
    names = ["a", *(f"g{i}" for i in range(0, 300, 7))]
    assert_columns_match(state, names, ["registry.k8s.io/pause:3.10"])
    for image in POD_IMAGES:  # more images than columns: older ones are dropped and rebuilt
        assert_columns_match(state, names, [image])
    assert len(state._image_columns) == 3
    assert_columns_match(state, names, POD_IMAGES)


def test_view_without_a_state_scans_its_nodes() -> None:
    state = ClusterState()
    state.upsert_node(node_from_k8s(node_with("a", [(0, 10)])))
    view = state.view(["a", "b"])
    assert [n and n.name for n in view.nodes] == ["a", None]  # taken from the store on first use
    view.state = None
    assert view.image_sizes(["docker.io/library/nginx:1.27.3"]).tolist() == [[10.0], [0.0]]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.integers(0, 11),
                  st.lists(st.tuples(st.integers(0, len(IMAGE_NAMES) - 1), st.integers(0, 2_000_000_000)), max_size=5)),
        st.tuples(st.just("remove"), st.integers(0, 11), st.just([])),
        st.tuples(st.just("pod"), st.integers(0, 11), st.just([])),
        st.tuples(st.just("unpod"), st.integers(0, 11), st.just([])),
        st.tuples(st.just("query"), st.integers(0, 11), st.lists(st.sampled_from(POD_IMAGES), min_size=1, max_size=4)),
    ),
    max_size=40,
)


@SETTINGS
@given(ops)
def test_image_columns_equal_a_scan_of_every_node(steps: list[tuple[str, int, list[Any]]]) -> None:
    state = ClusterState()
    rv = 0
    agent = ImageAgent(ImageParams())
    for op, i, arg in steps:
        rv += 1
        name = f"n{i}"
        if op == "upsert":
            state.upsert_node(node_from_k8s(node_with(name, arg, rv=str(rv))))
        elif op == "remove":
            state.remove_node(name)
        elif op == "pod":
            state.upsert_pod(pod_from_k8s(make_pod(f"p{i}", node=name)))
        elif op == "unpod":
            state.remove_pod(f"uid-default-p{i}")
        else:
            names = [f"n{k}" for k in range(12)]
            random.Random(rv).shuffle(names)
            pod = pod_from_k8s(make_pod("q", images=arg))
            assert_columns_match(state, names, list(dict.fromkeys(pod.images)))
            call = Call(pod, state.view(names))
            assert agent.image_locality(call).tolist() == reference_image_locality(call).tolist()


# ---- prioritize replies from ready-made per-node JSON ----------------------------------------------------

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


# ---- the safe agent's reasons ---------------------------------------------------------------------------

# Values that stress the formatting: ties at the last printed digit (0.0005, 0.00125, ...), both zeros,
# the clip limits, tiny risks in scientific notation, and arbitrary doubles.
tricky = st.one_of(
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 0.0005, 0.00125, 0.00135, 0.12345, 0.9995, 0.99949999, 0.35, 0.005,
                     0.015, 0.025, 1e-9, 8.5e-9, 5e-324, 0.1 + 0.2, 2 / 3]),
    st.integers(0, 100_000).map(lambda k: k / 100_000),
    st.integers(0, 2000).map(lambda k: (k + 0.5) / 2000),
    st.integers(0, 1000).map(lambda k: (k + 0.5) / 1000),
    st.integers(0, 1000).map(lambda k: math.nextafter((k + 0.5) / 1000, 2.0)),
)


@SETTINGS
@given(
    n=st.integers(0, 12),
    data=st.data(),
    u_star=st.integers(1, 100),
    eps=st.integers(0, 100),
    given_risk=st.booleans(),
)
def test_safe_filter_equals_the_full_computation(n: int, data: st.DataObject, u_star: int, eps: int,
                                                 given_risk: bool) -> None:
    """The filter's reasons against per-value f-strings, and its Cantelli shortcut against betainc
    everywhere: with the risk given (tricky values for the text) or computed from mu and sigma."""
    agent = SafeAgent(SafeParams(utilization=u_star, percentile=eps))
    pair = st.tuples(tricky, tricky)
    small = st.one_of(tricky, st.sampled_from([1e-12, 1e-9, 1e-6, 1e-4, 0.001, 0.01, 0.02, 0.05]))
    mu = np.array(data.draw(st.lists(pair, min_size=n, max_size=n)), dtype=float).reshape(n, 2)
    sigma = np.array(data.draw(st.lists(st.tuples(small, small), min_size=n, max_size=n)), dtype=float).reshape(n, 2)
    valid = np.array(data.draw(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=n, max_size=n)),
                     dtype=bool).reshape(n, 2)
    mu, sigma = np.where(valid, mu, 0.0), np.where(valid, sigma, 0.0)  # as SafeAgent._inputs leaves them
    risk = None
    if given_risk:
        risk = np.array(data.draw(st.lists(pair, min_size=n, max_size=n)), dtype=float).reshape(n, 2)
        risk = np.where(valid, risk, 0.0)
    source = data.draw(st.lists(st.sampled_from(["annotations", "none", "forecast:holt-winters", "100%"]),
                                min_size=n, max_size=n))
    state = ClusterState()
    pod = pod_from_k8s(make_pod("p"))

    def call() -> Call:
        c = Call(pod, state.view([f"x{i}" for i in range(n)]))
        c.memo[agent.name] = SafeInputs(mu, sigma, valid, np.ones((n, 2)), source, agent.u_star,
                                        None if risk is None else risk.copy())
        return c

    fast, slow = agent.filter_overload(call()), reference_filter_overload(agent, call())
    assert fast.passed.tolist() == slow.passed.tolist()
    assert list(fast.reasons.items()) == list(slow.reasons.items())
    assert list(fast.notes.items()) == list(slow.notes.items())


@SETTINGS
@given(st.lists(st.tuples(st.one_of(tricky, st.just(math.nan)), st.one_of(tricky, st.just(math.nan))), max_size=16),
       st.integers(1, 100))
def test_safe_overload_risk_equals_the_reference(pairs: list[tuple[float, float]], u_star: int) -> None:
    mu = np.array([m for m, _ in pairs], dtype=float)
    sigma = np.array([s for _, s in pairs], dtype=float)
    expected = reference_safe_overload_risk(mu, sigma, u_star / 100)
    got = safe_overload_risk(mu, sigma, u_star / 100)
    assert np.array_equal(got, expected, equal_nan=True), (mu, sigma, got, expected)
    assert [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in expected]


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10), st.booleans(), st.booleans()), max_size=12))
def test_safe_combine_equals_row_reductions(rows: list[tuple[int, int, bool, bool]]) -> None:
    scores = np.array([[a, b] for a, b, _, _ in rows], dtype=np.int64).reshape(len(rows), 2)
    valid = np.array([[c, d] for _, _, c, d in rows], dtype=bool).reshape(len(rows), 2)
    masked = np.where(valid, scores, np.iinfo(np.int64).max)
    expected = np.where(valid.any(axis=1), masked.min(axis=1), 0).astype(int)
    got = SafeAgent._combine(scores, valid)
    assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


def test_safe_reason_text_is_unchanged() -> None:
    # seed-behaviours.md's second vector, through the real agent: the text kube-scheduler shows
    state = ClusterState()
    state.upsert_node(node_from_k8s(make_node("n1", cpu="4000m", annotations={"mean-free-cpu": "600",
                                                                               "std-free-cpu": "300"})))
    agent = SafeAgent(SafeParams())
    res = agent.filter_overload(Call(pod_from_k8s(make_pod("p", cpu="200m", memory=None)), state.view(["n1"])))
    assert res.reasons == {0: "safe-overload: cpu P(util > 90%) = 0.592 > eps 0.3 (forecast util 90.0% +- 7.5% "
                               "with this pod, from annotations)"}


# ---- the filter's bookkeeping ------------------------------------------------------------------------------

def random_cluster(rng: random.Random, n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, pods = [], []
    for i in range(n):
        ann = {}
        if rng.random() < 0.8:
            ann = {"mean-free-cpu": str(rng.randint(0, 8000)), "std-free-cpu": str(rng.randint(0, 2000))}
            if rng.random() < 0.7:
                ann |= {"mean-free-memory": str(rng.randint(0, 16000)), "std-free-memory": str(rng.randint(0, 3000))}
        cpu = "0" if rng.random() < 0.08 else f"{rng.randint(1, 16)}"
        nodes.append(make_node(f"n{i}", cpu=cpu, memory=f"{rng.randint(1, 64)}Gi", annotations=ann,
                               images=[(IMAGE_NAMES[rng.randrange(len(IMAGE_NAMES))], rng.randint(1, 10**9))]))
        for j in range(rng.randint(0, 3)):
            pods.append(make_pod(f"b{i}-{j}", cpu=f"{rng.randint(1, 4000)}m", memory=f"{rng.randint(1, 4096)}Mi",
                                 node=f"n{i}"))
    return nodes, pods


@SETTINGS
@given(seed=st.integers(0, 10**9), n=st.integers(1, 40), two=st.booleans())
def test_filter_equals_the_per_node_bookkeeping(seed: int, n: int, two: bool) -> None:
    rng = random.Random(seed)
    nodes, pods = random_cluster(rng, n)
    state = ClusterState()
    for node in nodes:
        state.upsert_node(node_from_k8s(node))
    for pod in pods:
        state.upsert_pod(pod_from_k8s(pod))
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


# ---- NodeNames check ---------------------------------------------------------------------------------------

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


# ---- the hot routes' pure-ASGI front -------------------------------------------------------------------------

async def asgi(app: Any, path: str, body: bytes | list[bytes], root: str = "", headers: list[tuple[bytes, bytes]] | None = None,
               disconnect: bool = False) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    chunks = [body] if isinstance(body, bytes) else list(body)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": root + path, "raw_path": (root + path).encode(), "query_string": b"", "root_path": root,
             "headers": headers if headers is not None else [(b"content-length", str(sum(map(len, chunks))).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}

    async def receive() -> dict[str, Any]:
        if chunks:
            chunk = chunks.pop(0)
            more = bool(chunks) or disconnect
            return {"type": "http.request", "body": chunk, "more_body": more}
        return {"type": "http.disconnect"}

    out: dict[str, Any] = {"body": b""}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"], out["headers"] = message["status"], list(message["headers"])
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return out["status"], out["headers"], out["body"]


def test_hot_routes_answer_as_the_routed_handlers() -> None:
    rng = random.Random(3)
    nodes, pods = random_cluster(rng, 12)
    state = ClusterState()
    for node in nodes:
        state.upsert_node(node_from_k8s(node))
    for pod in pods:
        state.upsert_pod(pod_from_k8s(pod))
    with foo_registered():
        config = load_config({"KSO_AGENTS": "safe,pigeon,congestion,image,foo", "KSO_PLAN_POLICY": "NONE",
                              "KSO_MAX_BODY_BYTES": "4096"})
    pod = make_pod("p", cpu="700m", memory="1Gi", images=["nginx:1.27.3", "busybox:1.36"])
    names = [f"n{i}" for i in range(12)] + ["ghost"]
    ok = orjson.dumps({"Pod": pod, "NodeNames": names})
    cases: list[tuple[str, Any, dict[str, Any]]] = [
        ("/filter", ok, {}), ("/filter", [ok[:10], ok[10:50], ok[50:]], {}), ("/filter", b"{bad", {}),
        ("/filter", b"", {}), ("/filter", b"x" * 5000, {}), ("/filter", [b"x" * 3000, b"x" * 3000], {"headers": []}),
        ("/filter", ok, {"headers": [(b"content-length", b"nope")]}),
        ("/filter", [ok[:10]], {"disconnect": True}),
        ("/prioritize", ok, {}), ("/prioritize", orjson.dumps({"Pod": pod, "NodeNames": [1]}), {}),
        ("/preempt", orjson.dumps({"Pod": pod, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "u"}]}}}), {}),
        ("/bind", orjson.dumps({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p", "Node": "n1"}), {}),
        ("/scheduler/predicates/safe-overload", ok, {}), ("/scheduler/priorities/image-locality", ok, {}),
        ("/scheduler/priorities/pigeon-holing", ok, {}), ("/my_scheduler_extension/my_new_priorities/image_score", ok, {}),
    ]

    async def run(root: str, outermost: bool = False) -> list[Any]:
        # a fresh extender per run: pigeon's demand statistics and bindings depend on the calls before
        with foo_registered():
            app: Any = create_app(Extender(config, _copy(state), RecordingBinder()))
        if outermost:  # as serve() runs it: the hot routes ahead of FastAPI's middleware stack
            app = outermost_hot_routes(app)
        return [await asgi(app, path, body, root=root, **kw) for path, body, kw in cases]

    hot = asyncio.run(run(""))
    routed = asyncio.run(run("/kso"))  # a root path sends every request through FastAPI's router
    assert hot == routed
    assert asyncio.run(run("", outermost=True)) == hot
    statuses = [status for status, _, _ in hot]
    assert statuses.count(400) >= 5 and statuses.count(200) >= 8
    assert hot[0][1] == [(b"content-length", str(len(hot[0][2])).encode()), (b"content-type", b"application/json")]


def _copy(state: ClusterState) -> ClusterState:
    out = ClusterState()
    for name in state.node_names():
        node = state.node(name)
        assert node is not None
        out.upsert_node(node)
    for pod in state.bound_pods():
        out.upsert_pod(pod)
    return out


def reference_safe_inputs(agent: SafeAgent, call: Call) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mu, sigma, valid as SafeAgent._inputs computed them before it was made faster (np.clip, nan_to_num)."""
    view = call.view
    stats = agent.stats.free_stats(view)
    cap = view.stat_capacity()
    free = np.where(np.isnan(stats.forecast_free), stats.mean_free,
                    (1.0 - agent.w) * stats.mean_free + agent.w * stats.forecast_free)
    demand = np.array([call.pod.requests.get("cpu", 0.0), call.pod.requests.get("memory", 0.0) / 2**20])
    used = np.maximum(cap - free, 0.0) + view.recent
    valid = ~np.isnan(free) & (cap > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.clip((used + demand) / cap, 0.0, 1.0)
        sigma = np.clip(np.nan_to_num(stats.std_free, nan=0.0) / cap, 0.0, 1.0)
    return np.where(valid, mu, 0.0), np.where(valid, sigma, 0.0), valid


annotation = st.one_of(st.none(), st.sampled_from(["0", "-0", "-1", "1e400", "inf", "nan", "x", "0.5", "1e-300"]),
                       st.floats(0, 1e6, allow_nan=False).map(repr))


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["0", "1", "4", "500m", "64"]), st.sampled_from(["0", "1Mi", "8Gi"]),
                          st.lists(annotation, min_size=6, max_size=6)), min_size=1, max_size=10),
       st.sampled_from(["0", "250m", "3"]), st.sampled_from(["0", "100Mi", "9Gi"]), st.integers(0, 100))
def test_safe_inputs_equal_the_reference(nodes: list[tuple[str, str, list[str | None]]], cpu: str, memory: str,
                                         weight: int) -> None:
    """mu, sigma and valid bit for bit as the straightforward formula, with missing, unparsable, zero,
    negative-zero and huge statistics, forecasts on some nodes, and nodes without capacity."""
    keys = ("mean-free-cpu", "mean-free-memory", "std-free-cpu", "std-free-memory", "forcasted-free-cpu",
            "forcasted-free-memory")
    state = ClusterState()
    for i, (c, m, values) in enumerate(nodes):
        ann = {k: v for k, v in zip(keys, values, strict=True) if v is not None}
        state.upsert_node(node_from_k8s(make_node(f"n{i}", cpu=c, memory=m, annotations=ann)))
    agent = SafeAgent(SafeParams(forecast_weight=weight))
    pod = pod_from_k8s(make_pod("p", cpu=cpu, memory=memory))
    view = state.view([f"n{i}" for i in range(len(nodes))] + ["unknown"])
    got = agent._inputs(Call(pod, view))
    for a, b in zip((got.mu, got.sigma, got.valid), reference_safe_inputs(agent, Call(pod, view)), strict=True):
        assert a.tobytes() == b.tobytes()


@SETTINGS
@given(st.lists(st.lists(st.tuples(st.integers(0, 40), tricky, st.one_of(tricky, st.just(0.05))), min_size=1, max_size=12),
                min_size=1, max_size=6), st.integers(1, 100))
def test_risk_memo_answers_as_betainc(calls: list[list[tuple[int, float, float]]], u_star: int) -> None:
    """Call after call (slots reused with the same or other inputs, the memo growing), the memo's risk is
    bit for bit safe_overload_risk's."""
    memo = RiskMemo(u_star / 100)
    for entries in calls:
        slots = np.array([e[0] for e in entries], dtype=np.intp)
        mu = np.array([e[1] for e in entries])
        sigma = np.array([e[2] for e in entries])
        var, spread, fits, _ = beta_cases(mu, sigma)
        got = memo.fitted_risk(slots[fits], mu[fits], sigma[fits], var[fits], spread[fits])
        assert got.tobytes() == reference_safe_overload_risk(mu[fits], sigma[fits], u_star / 100).tobytes()


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 64_000), st.integers(0, 256), st.sampled_from(["", "-0", "nan", "x"])),
                min_size=1, max_size=8),
       st.integers(0, 4000), st.integers(0, 8192))
def test_safe_agent_without_statistics_equals_the_full_computation(nodes: list[tuple[int, int, str]], cpu_m: int,
                                                                   mem_mi: int) -> None:
    """Where no node of a call has load statistics the safe agent skips its maths; its verdicts, notes and scores
    are those of the full computation (which runs when one node of the call has statistics: the safe agent
    judges each node on its own, so the other nodes' results must not change)."""
    state = ClusterState()
    names = []
    for i, (cpu, gib, std) in enumerate(nodes):
        # no mean free at all (std-only or unparseable annotations included): nothing to judge
        ann = {"std-free-cpu": std} if std else {}
        state.upsert_node(node_from_k8s(make_node(f"n{i}", cpu=f"{cpu}m", memory=f"{gib}Gi", annotations=ann)))
        names.append(f"n{i}")
    state.upsert_node(node_from_k8s(make_node("judged", cpu="4000m", memory="16Gi",
                                              annotations={"mean-free-cpu": "600", "std-free-cpu": "300",
                                                           "mean-free-memory": "4000", "std-free-memory": "10"})))
    pod = pod_from_k8s(make_pod("p", cpu=f"{cpu_m}m", memory=f"{mem_mi}Mi"))
    agent = SafeAgent(SafeParams())
    bare, full = Call(pod, state.view(names)), Call(pod, state.view([*names, "judged"]))
    assert not agent.inputs(bare).valid.any() and agent.inputs(full).valid[-1].any()
    fast, slow = agent.filter_overload(bare), agent.filter_overload(full)
    k = len(names)
    assert fast.passed.tolist() == slow.passed[:k].tolist()
    assert fast.reasons == {i: r for i, r in slow.reasons.items() if i < k}
    assert list(fast.notes.items()) == [(i, r) for i, r in slow.notes.items() if i < k]
    for score in (agent.score_overload, agent.score_balance):
        got, expected = score(bare), score(full)[:k]
        assert got.dtype == expected.dtype and got.tolist() == expected.tolist()
    explained, reference = agent.explain(bare), agent.explain(full)
    assert explained.keys() == reference.keys()
    assert all(explained[key] == reference[key][:k] for key in explained)


class RecordingTransport:
    """The calls a transport receives (what HeadWithBodyTransport hands on), nothing else."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def writelines(self, chunks: Any) -> None:
        self.calls.append(("writelines", tuple(chunks)))

    def close(self) -> None:
        self.closing = True
        self.calls.append(("close", None))

    def abort(self) -> None:
        self.calls.append(("abort", None))

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_response_head_leaves_with_its_body_in_one_write() -> None:
    from extender.server import HELD_HEAD_BYTES, HeadWithBodyTransport

    async def scenario() -> list[list[tuple[str, Any]]]:
        loop = asyncio.get_running_loop()
        seen = []
        head, body = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"{}"
        # head then body in one step: one writelines, nothing left for the loop's next iteration
        inner = RecordingTransport()
        t = HeadWithBodyTransport(inner, loop)
        t.write(head)
        assert inner.calls == []
        t.write(body)
        await asyncio.sleep(0)
        seen.append(inner.calls)
        # a head alone (an empty body writes nothing) leaves on the loop's next iteration
        inner = RecordingTransport()
        t = HeadWithBodyTransport(inner, loop)
        t.write(head)
        await asyncio.sleep(0)
        seen.append(inner.calls)
        # close sends a held head first; abort drops it; a big or non-head write is never held
        inner = RecordingTransport()
        t = HeadWithBodyTransport(inner, loop)
        t.write(head)
        t.close()
        t2 = HeadWithBodyTransport(inner, loop)
        t2.write(head)
        t2.abort()
        big = b"x" * (HELD_HEAD_BYTES - 3) + b"\r\n\r\n"
        t2.write(big)
        t2.write(b"partial")
        await asyncio.sleep(0)
        seen.append(inner.calls)
        assert t.get_extra_info("peername") == "info:peername"
        return seen

    one_step, alone, ends = asyncio.run(scenario())
    assert one_step == [("writelines", (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"{}"))]
    assert alone == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")]
    assert ends[:3] == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"), ("close", None), ("abort", None)]
    assert [c[0] for c in ends[3:]] == ["write", "write"] and ends[4] == ("write", b"partial")


@SETTINGS
@given(st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-10**6, 10**6).map(float),
                          st.sampled_from([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e308, 0.5, 99.0, 100.0, 101.0])),
                max_size=20),
       st.integers(1, 10**6))
def test_congestion_score_equals_the_seed_rule(factors: list[float], factor_max: int) -> None:
    """cf = min(v, MAX) if v is a positive integer else 0; score = round-half-away-from-zero(10 (1 - cf / MAX)),
    value by value in Python."""
    from kso.decisions.agents.congestion import congestion_score

    def rule(v: float) -> int:
        cf = min(v, factor_max) if (math.isfinite(v) and v > 0 and v == math.floor(v)) or v == math.inf else 0.0
        x = 10.0 * (1.0 - cf / factor_max)
        return int(math.copysign(math.floor(abs(x) + 0.5), x))

    got = congestion_score(np.array(factors, dtype=float), factor_max)
    assert got.tolist() == [rule(v) for v in factors]


# ---- pigeon, the no-annotation scores, the pod memo --------------------------------------------------------

def reference_pigeon_values(agent: Any, call: Call, stats: Any) -> np.ndarray:
    """PigeonAgent._compute's A_BINPACK values before its fast paths (utilisation() always, demand_gamma per
    call, the known rows gathered even when every node is known), given the demand statistics it saw."""
    from kso.decisions.agents.pigeon import binpack_values, demand_gamma, utilisation

    view = call.view
    values = np.full(len(view), np.nan)
    rows = np.flatnonzero(view.known)
    if rows.size == 0:
        return values
    cols = [view.columns[r] for r in agent.resources]
    cap = view.alloc.take(rows, axis=0)[:, cols]
    gamma_dem = demand_gamma(stats, cap, agent.units)
    d = agent.demand(call)
    usage = call.requested().take(rows, axis=0)[:, cols]
    new_usage = usage + d
    feasible = ~(d > cap - usage).any(axis=1)
    if not feasible.any():
        return values
    util = np.clip(utilisation(usage, cap, (usage > 0).astype(float)), 0.0, 1.0)
    util_new = np.clip(utilisation(new_usage, cap, (new_usage > 0).astype(float)), 0.0, 1.0)
    values[rows] = np.where(feasible, binpack_values(util, util_new, gamma_dem), np.nan)
    return values


@SETTINGS
@given(seed=st.integers(0, 10**9), n=st.integers(1, 40), calls=st.integers(1, 4))
def test_pigeon_values_equal_the_reference_bit_for_bit(seed: int, n: int, calls: int) -> None:
    from kso.decisions.agents.pigeon import PigeonAgent, PigeonParams

    rng = random.Random(seed)
    nodes, pods = random_cluster(rng, n)  # some nodes with 0 cpu: the general utilisation path
    state = ClusterState()
    for node in nodes:
        state.upsert_node(node_from_k8s(node))
    for pod in pods:
        state.upsert_pod(pod_from_k8s(pod))
    agent = PigeonAgent(PigeonParams())
    for _ in range(calls):  # the capacity memo is reused, or not, from call to call
        names = [f"n{i}" for i in range(n) if rng.random() < 0.8] + (["ghost"] if rng.random() < 0.3 else [])
        pod = pod_from_k8s(make_pod("p", cpu=f"{rng.randint(1, 8000)}m", memory=f"{rng.randint(1, 8000)}Mi"))
        call = Call(pod, state.view(names))
        stats = agent._demand.updated(agent.demand(call))
        got = agent._compute(call, commit=True).values
        assert got.tobytes() == reference_pigeon_values(agent, call, stats).tobytes()


def test_congestion_and_image_scores_without_annotations_or_images_equal_the_rule() -> None:
    from kso.decisions.agents.congestion import CongestionAgent, CongestionParams, congestion_score

    state = ClusterState()
    for i in range(5):
        state.upsert_node(node_from_k8s(make_node(f"n{i}")))
    call = Call(pod_from_k8s(make_pod("p", images=["nginx", "redis:7"])), state.view([*(f"n{i}" for i in range(5)), "x"]))
    got = CongestionAgent(CongestionParams()).score(call)
    assert got.dtype == congestion_score(call.view.congestion, 100).dtype
    assert got.tolist() == congestion_score(call.view.congestion, 100).tolist() == [10] * 6
    got = ImageAgent(ImageParams()).image_locality(call)
    assert got.dtype == reference_image_locality(call).dtype
    assert got.tolist() == reference_image_locality(call).tolist() == [0] * 6


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


# ---- full-Nodes bodies: known nodes' objects reused (protocol.KnownNodeItems) ----------------------
def _full_body(pod: dict[str, Any], nodes: list[dict[str, Any]], fields: dict[str, Any] | None = None) -> bytes:
    """A full-Nodes body as kube-scheduler writes it (Go's compact encoding, its key order)."""
    return orjson.dumps({"Pod": pod, "Nodes": {**({"metadata": {}} if fields is None else fields), "items": nodes},
                         "NodeNames": None})


def _go_node(name: str, **kw: Any) -> dict[str, Any]:
    """A Node as kube-scheduler's informer holds it: no kind / apiVersion, metadata first."""
    node = make_node(name, **kw)
    del node["apiVersion"], node["kind"]
    return node


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


def test_known_node_items_give_what_decoding_the_whole_body_gives() -> None:
    from extender.protocol import KnownNodeItems

    rng = random.Random(7)
    known = KnownNodeItems()
    nodes = [_go_node(f"n{i}", cpu=str(2 + i % 3)) for i in range(12)]
    pod = make_pod("p")
    body = _full_body(pod, nodes)
    assert _same_as_decoding_whole(known, body) == "whole"  # first sight: decoded whole, learnt
    for _ in range(5):  # any order, any subset, another pod: assembled from the known nodes
        sub = rng.sample(nodes, rng.randint(0, len(nodes)))
        assert _same_as_decoding_whole(known, _full_body(make_pod(f"p{rng.random()}"), sub)) == "assembled"
    changed = [*nodes[:3], {**nodes[3], "spec": {"unschedulable": True}}, *nodes[4:]]
    assert _same_as_decoding_whole(known, _full_body(pod, changed)) == "whole"  # a changed node: decoded, relearnt
    assert _same_as_decoding_whole(known, _full_body(pod, changed)) == "assembled"
    assert _same_as_decoding_whole(known, _full_body(pod, nodes)) == "whole"  # and back
    # the list's own fields decoded every time, in order
    assert _same_as_decoding_whole(known, _full_body(pod, nodes, {"kind": "NodeList", "metadata": {"x": 1}})) == \
        "assembled"
    assert _same_as_decoding_whole(known, _full_body(pod, nodes, {})) == "assembled"
    # Go's HTML escape: bytes orjson does not write; never kept, always decoded whole
    odd = _go_node("odd")
    odd["metadata"]["annotations"] = {"a": "<b>"}
    escaped = _full_body(pod, [odd, *nodes]).replace(b"<b>", b"\\u003cb\\u003e")
    for _ in range(2):
        assert _same_as_decoding_whole(known, escaped) == "whole"
    assert b"odd" in known.foreign


def test_known_node_items_refuse_what_decoding_refuses() -> None:
    """Bodies that look like kube-scheduler's layout but are not what it looks like are decoded whole: the same
    document or the same 400."""
    from extender.protocol import KnownNodeItems

    known = KnownNodeItems()
    nodes = [_go_node(f"m{i}") for i in range(4)]
    pod = make_pod("p")
    _same_as_decoding_whole(known, _full_body(pod, nodes))
    good = _full_body(pod, nodes)
    cases = [
        good[:-1],  # truncated
        good.replace(b'"NodeNames":null}', b'"NodeNames":null} '),  # trailing byte (layout differs)
        good.replace(b'{"Pod":{', b'{"Pod":{"Nodes":{"items":[', 1),  # a "Nodes" key inside the pod: cut badly
        _full_body({"Nodes": {"metadata": {}, "items": []}}, nodes),  # ... or the pod ends early
        _full_body(pod, nodes, {"metadata": {"items": [1]}}),  # an "items" array inside the list's metadata
        _full_body(pod, nodes, {"items": 5, "metadata": {}}),  # "items" twice
        good.replace(b'},{"metadata"', b'} ,{"metadata"', 1),  # space between items
        good.replace(b'"items":[', b'"items":[5,', 1),  # a non-object item
        _full_body(pod, [*nodes, nodes[0]]),  # the same node twice
        _full_body(5, nodes),  # type: ignore[arg-type]  # a pod that is not an object (refused later, as before)
    ]
    deep: Any = "x"
    for _ in range(120):
        deep = [deep]
    cases.append(_full_body({**pod, "deep": deep}, nodes))  # too deep in the pod
    cases.append(_full_body(pod, nodes).replace(b'"x":1', b'"x":[[[[1]]]]'))
    for body in cases:
        _same_as_decoding_whole(known, body)
    # nodes nested deep enough that only a lower limit refuses them: the limit is checked on assembled bodies too
    deep_node = _go_node("deepnode")
    deep_node["metadata"]["annotations"] = {}
    deep_node["spec"] = {"a": [[[[[[[[{"b": 1}]]]]]]]]}
    body = _full_body(pod, [deep_node])
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

    nodes = [_go_node(f"b{i}") for i in range(10)]
    raw = len(orjson.dumps(nodes[0]))
    for known in (KnownNodeItems(limit=4), KnownNodeItems(max_bytes=3 * raw + 10)):
        for i in range(0, 10, 2):
            body = _full_body(make_pod("p"), nodes[i:i + 2])
            _same_as_decoding_whole(known, body)
            assert _same_as_decoding_whole(known, body) == "assembled"
            # past a bound it is emptied before the next body is learnt: at most one body's nodes beyond it
            assert len(known.items) <= max(known.limit, 3) + 2 and known.size <= known.max_bytes + 2 * raw


def test_learnt_items_bytes_only_when_the_items_are_exactly_them() -> None:
    """learn gives the items' bytes only when the items array is those bytes, comma-joined, up to the tail."""
    from extender.protocol import KnownNodeItems

    nodes = [_go_node(f"r{i}") for i in range(3)]
    pod = make_pod("p")
    good = _full_body(pod, nodes)
    known = KnownNodeItems()
    assert known.learn(good, orjson.loads(good)) == [orjson.dumps(n) for n in nodes]
    assert known.learn(good, orjson.loads(good)) == [orjson.dumps(n) for n in nodes]  # known ones too
    # a first "Nodes" with other items than the one decoding keeps: the walk's bytes are not the decoded items
    twice = good.replace(b',"NodeNames":null}', b',"Nodes":{"items":[' + orjson.dumps(nodes[0]) + b']},"NodeNames":null}')
    assert KnownNodeItems().learn(twice, orjson.loads(twice)) is None
    for cache in (KnownNodeItems(), known):
        _same_as_decoding_whole(cache, twice)


def _json_values() -> st.SearchStrategy[Any]:
    """Any JSON value orjson writes: escapes, unicode, floats (also -0.0 and huge), deep nesting."""
    leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                       st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                       st.sampled_from(['"', "\\", "\n\t\x00\x1f", "\u2028", "<a&b>", "\U0001f600", "é", "/"]))
    return st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                        max_leaves=12)


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
        node = _go_node(f"splice-{i}", annotations={f"x/{k}": v for k, v in notes.items()})
        node["status"]["extra"] = value
        nodes.append(node)
    state = ClusterState()
    for node in nodes[::2]:  # some known to the cache, the others judged from the body
        state.upsert_node(node_from_k8s(node))
    ext = Extender(load_config({"KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder(), cache_bodies=False)
    ext.predicates["some"] = lambda call: PredicateResult(
        np.ones(len(call.view), dtype=bool), {i: f"fails {i}" for i in failing if i < len(call.view)})
    body = _full_body(make_pod("p"), nodes, {"metadata": {"resourceVersion": "7"}})
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


def test_known_items_arrays_are_kept_whole_and_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same items array again (another pod) is taken from the kept run, without walking its items; it gives what
    decoding the whole body gives even after its nodes left the item cache or changed."""
    from extender.protocol import KnownNodeItems

    known = KnownNodeItems()
    nodes = [_go_node(f"w{i}") for i in range(6)]
    assert _same_as_decoding_whole(known, _full_body(make_pod("p0"), nodes)) == "whole"
    assert _same_as_decoding_whole(known, _full_body(make_pod("p1"), nodes)) == "assembled"  # walked, kept
    assert len(known.runs) == 1

    def no_walk(*args: Any) -> None:
        raise AssertionError("walked a kept run")

    with monkeypatch.context() as m:
        m.setattr(known, "_walk", no_walk)
        for i in range(3):
            assert _same_as_decoding_whole(known, _full_body(make_pod(f"q{i}"), nodes, {"kind": "NodeList"})) == \
                "assembled"
        known.items.clear()  # a run is the same bytes, so the same objects, whatever happened to the items since
        assert _same_as_decoding_whole(known, _full_body(make_pod("r"), nodes)) == "assembled"
    # another order is another run; at most RUNS are kept, most recent first
    for k in range(KnownNodeItems.RUNS + 2):
        order = nodes[k % 6:] + nodes[:k % 6]
        _same_as_decoding_whole(known, _full_body(make_pod("s"), order))
        _same_as_decoding_whole(known, _full_body(make_pod("t"), order))
    assert len(known.runs) == KnownNodeItems.RUNS
    # a prefix of a kept run, or a kept run with a byte changed, is not that run
    short = _full_body(make_pod("u"), nodes[:5])
    assert _same_as_decoding_whole(known, short) == "assembled"
    changed = _full_body(make_pod("u"), nodes).replace(b'"w5"', b'"w7"')
    assert _same_as_decoding_whole(known, changed) == "whole"


def test_resolve_of_full_nodes_all_known_equals_the_per_item_path() -> None:
    """API mode (bodies never cached): a call whose nodes are all in the cache takes the names in one pass; any
    other call the per-item path, with its errors and its nodes judged from the body."""
    nodes = [_go_node(f"k{i}", cpu=str(2 + i)) for i in range(5)]
    state = ClusterState()
    for node in nodes:
        state.upsert_node(node_from_k8s(node))
    ext = Extender(load_config({"KSO_PLAN_POLICY": "NONE"}), state, RecordingBinder(), cache_bodies=False)
    order = [nodes[3], nodes[0], nodes[4], nodes[0]]
    view = ext.call_of(parse_extender_args(_full_body(make_pod("p"), order))).view
    ref = state.view([n["metadata"]["name"] for n in order])
    assert view.names == ref.names and view.all_known() and (view.rows == ref.rows).all()
    assert np.array_equal(view.alloc, ref.alloc) and np.array_equal(view.requested, ref.requested)
    # a node the cache does not know: judged from its object, the others from the cache
    stranger = _go_node("stranger", cpu="7")
    view = ext.call_of(parse_extender_args(_full_body(make_pod("p"), [nodes[1], stranger]))).view
    assert view.names == ["k1", "stranger"] and view.all_known()
    assert view.alloc[1, view.columns["cpu"]] == 7000 and view.alloc[0, view.columns["cpu"]] == 3000
    # items without a usable name: the per-item path's error, naming the item
    for bad in ({"metadata": {}}, {"metadata": []}, {"metadata": {"name": ""}}, {"metadata": {"name": 5}},
                {"spec": {}}):
        args = parse_extender_args(orjson.dumps({"Pod": make_pod("p"), "Nodes": {"items": [nodes[0], bad]}}))
        with pytest.raises(InputError, match=r"Nodes.items\[1\] has no metadata.name"):
            ext.call_of(args)
