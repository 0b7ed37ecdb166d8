"""/bind without an API server (snapshot, demo, tests): kso's cache is the only judge of the node, and no watch
will report the pod (extender.verbs.Extender.bind)."""

from __future__ import annotations

import logging

import pytest

from tests.support.fixtures import make_node, make_pod, running_extender

NODES = [make_node("n1"), make_node("n2")]
PENDING = make_pod("web-0", namespace="demo")


def _bind(name: str, uid: str, node: str) -> dict[str, str]:
    return {"PodName": name, "PodNamespace": "demo", "PodUID": uid, "Node": node}


def test_a_bind_to_a_node_kso_does_not_know_is_an_error_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    with running_extender(NODES, [PENDING]) as c, caplog.at_level(logging.INFO, logger="kso"):
        status, reply = c.post("/bind", _bind("web-0", PENDING["metadata"]["uid"], "nowhere"))
        assert status == 200 and "nowhere" in reply["Error"] and "not in kso's cluster" in reply["Error"], reply
        assert not c.extender.binder.bindings  # type: ignore[attr-defined]
        status, reply = c.post("/bind", _bind("web-0", PENDING["metadata"]["uid"], "n1"))
        assert status == 200 and reply == {"Error": ""}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "nowhere" in r.getMessage()]
    assert warned and "web-0" in warned[0], [r.getMessage() for r in caplog.records]


def test_a_bind_of_an_unknown_pod_does_not_promise_a_watch(caplog: pytest.LogCaptureFixture) -> None:
    with running_extender(NODES) as c, caplog.at_level(logging.INFO, logger="kso"):
        status, reply = c.post("/bind", _bind("ghost", "uid-ghost", "n1"))
        assert status == 200 and reply == {"Error": ""}
    said = [r.getMessage() for r in caplog.records if "ghost" in r.getMessage()]
    assert said and not [m for m in said if "watch" in m], said
    assert "not counted" in said[-1], said
