"""benchmarks/latency/replay.py (run by path in each tree compared): extender requests replayed through one tree's
ASGI app in-process, the replies written in order."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks.latency import replay


def test_requests_are_answered_in_order_by_the_trees_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"KSO_CLUSTER_SOURCE": "DEMO", "KSO_PLAN_POLICY": "NONE", "KSO_FORECAST_SOURCE": "NONE",
                       "LOG_LEVEL": "WARNING"}.items():
        monkeypatch.setenv(key, value)
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
    good = orjson.dumps({"Pod": pod, "NodeNames": ["demo-00", "demo-01"], "Nodes": None}).decode()
    requests = tmp_path / "requests.json"
    requests.write_bytes(orjson.dumps([["/filter", good], ["/prioritize", good], ["/filter", "{not json"]]))
    replies = tmp_path / "replies.json"
    assert replay.main([str(requests), str(replies)]) == 0
    (s1, _, filtered), (s2, _, scores), (s3, _, _) = orjson.loads(replies.read_bytes())
    assert (s1, s2, s3) == (200, 200, 400)
    assert orjson.loads(filtered)["Error"] == "" and {s["Host"] for s in orjson.loads(scores)} == {"demo-00", "demo-01"}
