"""benchmarks.trivial_extender (the e2e benchmark's trivial extender, in its own process) answers both node
modes as the protocol requires."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.e2e import trivial_process
from benchmarks.trivial_extender import TrivialHandler
from extender.client import ExtenderClient
from tests.support.fixtures import fixtures_dir  # noqa: F401 - the fixture


@pytest.fixture(scope="module")
def trivial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """``python -m benchmarks.trivial_extender PORT`` as the e2e benchmark starts it."""
    with trivial_process(tmp_path_factory.mktemp("trivial") / "trivial.log") as ext:
        yield ext.port


def post(port: int, path: str, body: bytes) -> Any:
    with ExtenderClient(port) as client:
        status, reply = client.post(path, body)
    assert status == 200
    return reply


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


def test_captured_full_nodes_requests_are_in_the_layout_answered_without_decoding(fixtures_dir: Path) -> None:  # noqa: F811
    """kube-scheduler's own full-Nodes bodies take the trivial extender's byte path (the protocol's least cost)."""
    paths = [p for verb in ("filter", "prioritize") for p in sorted((fixtures_dir / "full-nodes").glob(f"*-{verb}.request.json"))]
    assert paths
    for path in paths:
        data = path.read_bytes().strip()
        assert data.startswith(TrivialHandler.FULL_HEAD) and data.endswith(TrivialHandler.FULL_TAIL), path.name
        assert TrivialHandler.FULL_NODES in data
