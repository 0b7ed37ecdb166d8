"""Bad input gets a 400 with a specific message, never a 500 or a dropped connection; and a
property-based fuzz test throws generated and mutated bodies at every route."""

from __future__ import annotations

import http.client
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.demo import Client
from tests.support.fixtures import FIXTURES, make_node, make_pod, running_extender

NODES = [make_node("n1", annotations={"mean-free-cpu": "2500", "std-free-cpu": "400"}), make_node("n2")]
ROUTES = ["/filter", "/prioritize", "/bind", "/preempt", "/scheduler/predicates/safe-overload",
          "/scheduler/priorities/safe-balance", "/scheduler/priorities/pigeon-holing", "/scheduler/priorities/congestion",
          "/scheduler/priorities/image_score", "/scheduler/priorities/image-locality", "/scheduler/bind",
          "/my_scheduler_extension/my_new_priorities/image_score", "/debug/explain"]


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with running_extender(NODES, env={"KSO_MAX_BODY_BYTES": "200000"}) as c:
        yield c


def raw_post(port: int, path: str, data: bytes, chunked: bool = False) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    if chunked:
        conn.request("POST", path, iter([data[i:i + 65536] for i in range(0, len(data), 65536)]),
                     {"Content-Type": "application/json"}, encode_chunked=True)
    else:
        conn.request("POST", path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body


def internal_errors(c: Client) -> float:
    _, text = c.get("/metrics")
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith("kso_extender_errors_total{") and 'kind="internal"' in line or 'kind="agent_error"' in line \
                and line.startswith("kso_extender_errors_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


GOOD_POD = make_pod("p", cpu="200m", memory="64Mi")
CASES: list[tuple[str, bytes, str]] = [
    ("/filter", b"{not json", "malformed JSON"),
    ("/filter", b"", "empty request body"),
    ("/filter", b"[1, 2]", "expected a JSON object"),
    ("/filter", orjson.dumps({"NodeNames": ["n1"]}), "missing Pod"),
    ("/filter", orjson.dumps({"Pod": "x", "NodeNames": ["n1"]}), "Pod must be an object"),
    ("/filter", orjson.dumps({"Pod": GOOD_POD}), "neither Nodes nor NodeNames"),
    ("/filter", orjson.dumps({"Pod": GOOD_POD, "NodeNames": "n1"}), "NodeNames must be an array"),
    ("/filter", orjson.dumps({"Pod": GOOD_POD, "NodeNames": [1]}), "NodeNames[0] must be a non-empty string"),
    ("/prioritize", orjson.dumps({"Pod": make_pod("p", cpu="NaN"), "NodeNames": ["n1"]}), "not finite"),
    ("/prioritize", orjson.dumps({"Pod": make_pod("p", cpu="-1"), "NodeNames": ["n1"]}), "negative"),
    ("/prioritize", orjson.dumps({"Pod": make_pod("p", memory="lots"), "NodeNames": ["n1"]}), "not a Kubernetes quantity"),
    ("/filter", orjson.dumps({"Pod": GOOD_POD, "Nodes": {"items": [make_node("z", cpu="NaN")]}}), "Nodes.items[0]"),
    ("/filter", orjson.dumps({"Pod": GOOD_POD, "Nodes": {"items": [make_node("z", memory="-5Gi")]}}), "negative"),
    ("/filter", orjson.dumps({"Pod": GOOD_POD, "Nodes": {"items": [{"metadata": {}}]}}), "no metadata.name"),
    ("/filter", orjson.dumps({"Pod": GOOD_POD, "Nodes": [1]}), "Nodes must be a NodeList object"),
    ("/bind", orjson.dumps({"PodName": "p"}), "missing Node"),
    ("/bind", orjson.dumps({"PodName": 3, "Node": "n1"}), "PodName must be a string"),
    ("/preempt", orjson.dumps({"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{}]}}}), "has no UID"),
    ("/preempt", orjson.dumps({"Pod": GOOD_POD, "NodeNameToVictims": {"n1": {"Pods": "x"}}}), "Pods must be an array"),
    ("/preempt", orjson.dumps({"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n1": {"NumPDBViolations": -1}}}), "non-negative"),
]


@pytest.mark.parametrize("path,data,message", CASES, ids=[c[2] for c in CASES])
def test_bad_input_is_a_specific_400(client: Client, path: str, data: bytes, message: str) -> None:
    status, body = raw_post(client.conn.port, path, data)  # type: ignore[attr-defined]
    assert status == 400, body
    error = orjson.loads(body)["Error"]
    assert message in error, error


@pytest.mark.parametrize("chunked", [False, True])
def test_huge_body_is_refused_without_reading_it_all(client: Client, chunked: bool) -> None:
    data = orjson.dumps({"Pod": GOOD_POD, "NodeNames": ["n1"] * 40_000})
    status, body = raw_post(client.conn.port, "/filter", data, chunked=chunked)  # type: ignore[attr-defined]
    assert status == 400 and b"larger than 200000 bytes" in body


def test_zero_capacity_node_is_rejected_with_a_reason(client: Client) -> None:
    zero = make_node("zero", cpu="0")
    status, reply = client.post("/filter", {"Pod": GOOD_POD, "Nodes": {"items": [zero, NODES[1]]}})
    assert status == 200
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["n2"]
    assert "no allocatable cpu or memory" in reply["FailedAndUnresolvableNodes"]["zero"]
    _, scores = client.post("/prioritize", {"Pod": GOOD_POD, "NodeNames": ["zero", "n2"]})
    assert all(isinstance(s["Score"], int) for s in scores)


def test_lowercase_keys_of_old_schedulers(client: Client) -> None:
    status, reply = client.post("/filter", {"pod": GOOD_POD, "nodenames": ["n1", "n2"]})
    assert status == 200 and reply["NodeNames"] == ["n1", "n2"]
    _, scores = client.post("/prioritize", {"pod": GOOD_POD, "nodes": {"items": NODES}})
    assert [s["Host"] for s in scores] == ["n1", "n2"]
    assert client.post("/bind", {"podName": "p", "podNamespace": "default", "podUID": "u", "node": "n1"})[1] == {"Error": ""}


def test_unknown_node_passes_and_is_counted(client: Client) -> None:
    _, reply = client.post("/filter", {"Pod": GOOD_POD, "NodeNames": ["ghost", "n1"]})
    assert reply["NodeNames"] == ["ghost", "n1"]
    _, text = client.get("/metrics")
    m = re.search(r"^kso_extender_unknown_nodes_total (\S+)$", text.decode(), re.M)
    assert m and float(m.group(1)) >= 1


def test_preempt_empty_victims_and_both_shapes(client: Client) -> None:
    _, r = client.post("/preempt", {"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": 0},
                                                                               "n2": None}})
    assert r == {"NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": 0},
                                           "n2": {"Pods": [], "NumPDBViolations": 0}}}
    victim = make_pod("v", node="n2", uid="v-uid")
    _, r = client.post("/preempt", {"Pod": GOOD_POD, "NodeNameToVictims": {"n2": {"Pods": [victim], "NumPDBViolations": 1}}})
    assert r == {"NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": "v-uid"}], "NumPDBViolations": 1}}}


def test_preempt_drops_candidates_that_stay_unsafe() -> None:
    # n1 is near its bound: only evicting the victim's 1.5 cores makes room for the pod.
    busy = make_node("busy", cpu="4000m", annotations={"mean-free-cpu": "900", "std-free-cpu": "100"})
    victim = make_pod("victim", cpu="1500m", node="busy", uid="victim-uid")
    big = make_pod("big", cpu="800m", memory=None)
    with running_extender([busy], [victim]) as c:
        assert c.post("/filter", {"Pod": big, "NodeNames": ["busy"]})[1]["NodeNames"] == []
        keep = c.post("/preempt", {"Pod": big, "NodeNameToMetaVictims": {"busy": {"Pods": [{"UID": "victim-uid"}]}}})[1]
        assert list(keep["NodeNameToMetaVictims"]) == ["busy"]
        drop = c.post("/preempt", {"Pod": big, "NodeNameToMetaVictims": {"busy": {"Pods": []}}})[1]
        assert drop == {"NodeNameToMetaVictims": {}}


# ---- fuzzing ------------------------------------------------------------------------------------
def _seed_bodies() -> list[Any]:
    bodies: list[Any] = [{"Pod": GOOD_POD, "NodeNames": ["n1", "n2"]}, {"Pod": GOOD_POD, "Nodes": {"items": NODES}},
                         {"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n1"},
                         {"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0}}}]
    folder = Path(FIXTURES)
    if folder.exists():
        for f in sorted(folder.glob("*/00000[1-5]-*.request.json")) + sorted(folder.glob("*/*preempt.request.json"))[:2]:
            bodies.append(json.loads(f.read_text()))
    return bodies


SEEDS = _seed_bodies()
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                      st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
                      st.sampled_from(["NaN", "-1", "1e400", "Infinity", "100m", "1Gi", "", "n1", "0"]))
json_value = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                          max_leaves=12)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:5]):
            out += _paths(v, prefix + (i,))
    return out


def _mutate(doc: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    doc = json.loads(json.dumps(doc))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _nest(draw: st.DrawFn, leaf: bytes) -> bytes:
    """``leaf`` inside 50..1,100 levels of arrays and objects (orjson parses up to 1,024; kso allows 100)."""
    depth = draw(st.integers(50, 1100))
    opener = draw(st.sampled_from([b"[", b'{"k":']))
    closer = b"]" if opener == b"[" else b"}"
    return opener * depth + leaf + closer * depth


@st.composite
def mutated_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["mutate", "mutate", "mutate", "json", "bytes", "truncate", "deep", "huge"]))
    if kind == "json":
        return json.dumps(draw(json_value)).encode()
    if kind == "deep":  # a deep value at the top, in the Pod, or inside a Node that filter would echo
        seed = json.dumps(draw(st.sampled_from(SEEDS))).encode()
        deep = _nest(draw, b"0")
        at = draw(st.sampled_from(["top", "pod", "node", "alone"]))
        if at == "alone":
            return deep
        if at == "node" and b'"items": [{' in seed:
            return seed.replace(b'"items": [{', b'"items": [{"x": ' + deep + b", ", 1)
        if at == "pod" and b'"Pod": {' in seed:
            return seed.replace(b'"Pod": {', b'"Pod": {"x": ' + deep + b", ", 1)
        return b'{"x": ' + deep + b", " + seed[1:]
    if kind == "huge":  # around the test server's 200,000-byte bound: many names, or one long string
        n = draw(st.integers(150_000, 260_000))
        if draw(st.booleans()):
            return orjson.dumps({"Pod": GOOD_POD, "NodeNames": [f"n{i % 3}" for i in range(n // 6)]})
        return orjson.dumps({"Pod": {**GOOD_POD, "x": "y" * n}, "NodeNames": ["n1"]})
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    seed = draw(st.sampled_from(SEEDS))
    if kind == "truncate":
        raw = json.dumps(seed).encode()
        return raw[: draw(st.integers(0, len(raw) - 1))]
    doc = seed
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        doc = _mutate(doc, path, draw(json_value), delete=bool(path) and draw(st.booleans()))
    return json.dumps(doc).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(route=st.sampled_from(ROUTES), data=mutated_bodies())
def test_fuzz_every_route(client: Client, route: str, data: bytes) -> None:
    before = internal_errors(client)
    status, body = raw_post(client.conn.port, route, data)  # type: ignore[attr-defined]
    assert status in (200, 400), (status, body[:300])
    reply = orjson.loads(body)
    if status == 400:
        assert isinstance(reply, dict) and reply["Error"] and reply["Error"] != "Internal Server Error"
    elif route.endswith(("filter", "safe-overload")):
        assert reply["Error"] == "" and ("NodeNames" in reply or "Nodes" in reply)
    elif "priorit" in route or route.endswith("image_score") or route.endswith("image-locality"):
        assert all(type(s["Score"]) is int and not (isinstance(s["Score"], float) and math.isnan(s["Score"]))
                   for s in reply)
        if route == "/prioritize":
            assert all(0 <= s["Score"] <= 10 for s in reply)
    assert internal_errors(client) == before, f"{route} hit an internal error on {data[:300]!r}"


# ---- the admin port's app: /metrics, /healthz, /readyz and nothing else, whatever is sent ---------------
@pytest.fixture(scope="module")
def admin(client: Client) -> Iterator[int]:
    from extender.app import create_admin_app
    from extender.demo import BackgroundServer

    with BackgroundServer(create_admin_app(client.extender)) as srv:  # type: ignore[attr-defined]
        yield srv.port


ADMIN_PATHS = ["/metrics", "/healthz", "/readyz", "/version", "/filter", "/bind", "/debug/explain", "/metrics/",
               "/healthz/../filter", "//metrics", "/%2e%2e/filter"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(path=st.one_of(st.sampled_from(ADMIN_PATHS), st.text(min_size=1, max_size=30).map(lambda t: "/" + t.replace(" ", ""))),
       method=st.sampled_from(["GET", "POST", "PUT", "HEAD", "DELETE"]), data=mutated_bodies())
def test_fuzz_admin_port(admin: int, path: str, method: str, data: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", admin, timeout=10)
    try:
        conn.putrequest(method, path.encode("utf-8", "replace").decode("latin-1"), skip_accept_encoding=True)
    except (http.client.InvalidURL, ValueError, UnicodeError):
        return  # not a request http.client can send
    conn.putheader("Content-Length", str(len(data)))
    conn.endheaders(data)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    assert resp.status < 500, (method, path, resp.status, body[:200])
    if resp.status == 200:
        assert method in ("GET", "HEAD") and path in ("/metrics", "/healthz", "/readyz", "/version"), (method, path)
    assert resp.status not in (301, 302, 307, 308), (method, path)


@pytest.mark.parametrize("command", ["demo", "bench"])
def test_a_missing_bench_extra_is_named_in_one_line(command: str, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import kso.cli

    monkeypatch.setattr(kso.cli, "BENCH_MODULES", ("matplotlib", "kso_no_such_module"))
    assert kso.cli.main([command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"kso {command}: needs kso_no_such_module " in err and "pip install -e '.[bench]'" in err


def test_the_bench_extra_is_installed_where_the_tests_run() -> None:
    # .ci/run installs .[test,bench]; the benchmark tests need it, and kso demo's check must pass here.
    import kso.cli

    assert kso.cli.missing_modules(kso.cli.BENCH_MODULES) == []
