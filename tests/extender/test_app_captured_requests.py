"""Replay every captured kube-scheduler 1.36 request (both nodeCacheCapable modes) through a real
extender, in order, and check each answer is one kube-scheduler accepts and that kso's decisions
follow from the cluster (the fixture nodes carry no load statistics, so nothing may be rejected)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from tests.support.fixtures import make_state, running_extender


def _requests(folder: Path) -> list[tuple[str, str, dict]]:
    out = []
    for f in sorted(folder.glob("*.request.json")):
        verb = f.name.split("-", 1)[1].split(".")[0]
        out.append((f.name, verb, orjson.loads(f.read_bytes())))
    return out


@pytest.mark.parametrize("mode", ["node-cache", "full-nodes"])
def test_replay_captured_requests(fixtures_dir: Path, mode: str) -> None:
    nodes = json.loads((fixtures_dir / "nodes.json").read_text())["items"]
    # node-cache mode: kso's cache knows the nodes (as the watch would); full-nodes: the calls carry them.
    state = make_state(nodes) if mode == "node-cache" else make_state([])
    seen = {"filter": 0, "prioritize": 0, "bind": 0, "preempt": 0}
    with running_extender(nodes, state=state) as c:
        for name, verb, body in _requests(fixtures_dir / mode):
            accepted = orjson.loads((fixtures_dir / mode / name.replace("request", "accepted-reply")).read_bytes())
            status, reply = c.post(f"/{verb}", body)
            assert status == 200, (name, reply)
            seen[verb] += 1
            if verb == "filter":
                assert reply["Error"] == "" and reply["FailedNodes"] == {} and reply["FailedAndUnresolvableNodes"] == {}
                if mode == "node-cache":
                    assert "NodeNames" in reply and reply["NodeNames"] == body["NodeNames"], name
                else:
                    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == \
                        [n["metadata"]["name"] for n in body["Nodes"]["items"]], name
                    assert reply["Nodes"]["items"] == body["Nodes"]["items"]  # echoed untouched
                assert set(accepted) <= set(reply) | {"NodeNames", "Nodes"}
            elif verb == "prioritize":
                hosts = body["NodeNames"] if mode == "node-cache" else [n["metadata"]["name"] for n in body["Nodes"]["items"]]
                assert [r["Host"] for r in reply] == hosts
                assert all(type(r["Score"]) is int and 0 <= r["Score"] <= 10 for r in reply), reply
            elif verb == "bind":
                assert reply == {"Error": ""}
                pod = c.extender.state.pods.get(body["PodUID"])  # type: ignore[attr-defined]
                assert pod is not None and pod.node_name == body["Node"], "bind must count the pod at once"
            else:
                victims = body.get("NodeNameToMetaVictims") or body.get("NodeNameToVictims")
                assert set(reply["NodeNameToMetaVictims"]) == set(victims), name
                for node, v in reply["NodeNameToMetaVictims"].items():
                    assert [p["UID"] for p in v["Pods"]] == [p["UID"] for p in accepted["NodeNameToMetaVictims"][node]["Pods"]]
    assert all(seen.values()), seen


def test_bound_pods_change_later_scores(fixtures_dir: Path) -> None:
    """After kso binds pods, its pigeon agent sees them (requests counted at once)."""
    nodes = json.loads((fixtures_dir / "nodes.json").read_text())["items"]
    with running_extender(nodes, state=make_state(nodes), env={"POLICY_OBJECTIVE": "LOAD_BALANCE"}) as c:
        body = {"Pod": _requests(fixtures_dir / "node-cache")[0][2]["Pod"], "NodeNames": ["node-1", "node-2"]}
        before = c.post("/scheduler/priorities/pigeon-holing", body)[1]
        assert before[0]["Score"] == before[1]["Score"]  # identical empty nodes
        c.post("/bind", {"PodName": "x", "PodNamespace": "lab", "PodUID": "u-x", "Node": "node-1"})  # unknown pod
        pod = {**body["Pod"], "metadata": {**body["Pod"]["metadata"], "uid": "u-y", "name": "y"}}
        c.post("/filter", {"Pod": pod, "NodeNames": ["node-1"]})  # kso learns the pod's requests
        assert c.post("/bind", {"PodName": "y", "PodNamespace": "lab", "PodUID": "u-y", "Node": "node-1"})[1] == {"Error": ""}
        after = {r["Host"]: r["Score"] for r in c.post("/scheduler/priorities/pigeon-holing", body)[1]}
        assert after["node-2"] > after["node-1"], after  # load-balance now prefers the emptier node
