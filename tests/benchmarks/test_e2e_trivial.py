"""benchmarks.e2e's trivial extender answers both node modes as the protocol requires."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.e2e import TrivialHandler, run_target
from tests.support.fixtures import fixtures_dir  # noqa: F401 - the fixture


@pytest.fixture
def trivial() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TrivialHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def post(port: int, path: str, body: bytes) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        return orjson.loads(resp.read())
    finally:
        conn.close()


def test_trivial_extender_answers_full_nodes_with_the_nodes_it_was_sent(trivial: int, fixtures_dir: Path) -> None:  # noqa: F811
    paths = sorted((fixtures_dir / "full-nodes").glob("*-filter.request.json"))
    assert paths
    for path in paths:
        body = orjson.loads(path.read_bytes())
        reply = post(trivial, "/filter", path.read_bytes())
        assert reply["Nodes"] == body["Nodes"] and reply["NodeNames"] is None and reply["Error"] == ""
        scores = post(trivial, "/prioritize", path.read_bytes())
        assert scores == [{"Host": n["metadata"]["name"], "Score": 0} for n in body["Nodes"]["items"]]
        assert scores
        # another layout (keys in another order): decoded, the same answer
        other = orjson.dumps({"NodeNames": None, "Nodes": body["Nodes"], "Pod": body["Pod"]})
        assert post(trivial, "/filter", other)["Nodes"] == body["Nodes"]
        assert post(trivial, "/prioritize", other) == scores


def test_trivial_extender_does_not_cut_inside_the_pod(trivial: int) -> None:
    node = {"metadata": {"name": "n1"}, "status": {}}
    pod = {"metadata": {"name": "p"}, "x": {"a": 1, "Nodes": {"items": []}}}
    body = orjson.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": [node]}, "NodeNames": None})
    assert body.count(b',"Nodes":{') == 2
    assert post(trivial, "/filter", body)["Nodes"] == {"metadata": {}, "items": [node]}
    assert post(trivial, "/prioritize", body) == [{"Host": "n1", "Score": 0}]


def test_trivial_extender_answers_node_names(trivial: int) -> None:
    body = orjson.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": None, "NodeNames": ["a", "b"]})
    assert post(trivial, "/filter", body) == {"NodeNames": ["a", "b"], "FailedNodes": {}, "Error": ""}
    assert post(trivial, "/prioritize", body) == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]


def test_trivial_full_runs_the_trivial_extender_without_the_node_cache() -> None:
    assert run_target("trivial-full") == ("trivial", False, False)
    assert run_target("trivial") == ("trivial", False, True)
    assert run_target("kso-full") == ("kso", False, False)
    assert run_target("kso-bind[KSO_BENCH_TREE=x;KSO_BENCH_CONFIGS=kso-bind]") == \
        ("kso[KSO_BENCH_TREE=x;KSO_BENCH_CONFIGS=kso-bind]", True, True)
    assert run_target("alone") == (None, False, True)
