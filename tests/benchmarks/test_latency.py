"""Smoke test of the latency benchmark (benchmarks/latency/): a tiny matrix against the real extender
process, and the --compare-tree reply replay of this tree against itself."""

from __future__ import annotations

import random
import re
from pathlib import Path

import orjson
import pytest

from benchmarks.latency import cli
from benchmarks.latency.client import make_body
from benchmarks.latency.cluster import OPENB_NODES, OPENB_PODS, REPO, UID_PLACEHOLDER, make_cluster, pending_pod, read_csv
from benchmarks.latency.compare import check_replies, reply_check_requests

pytestmark = pytest.mark.skipif(not OPENB_NODES.exists(), reason=f"no openb trace at {OPENB_NODES}")


def test_matrix_runs_every_cell_without_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--nodes", "30", "--modes", "names,full", "--node-sets", "all", "--requests", "20",
                     "--warmup", "3", "--variants", "2", "--max-cell-seconds", "2"]) == 0
    out = capsys.readouterr().out
    table = out[out.rindex("nodes mode"):].splitlines()[1:]
    rows = [line.split() for line in table if line.startswith("   30 ") and "RSS" not in line]
    assert {(r[1], r[2]) for r in rows} == {(m, v) for m in ("names", "full") for v in ("filter", "prioritize")}
    for r in rows:
        assert r[4] == "30" and int(r[7]) >= 20, r  # every node sent, every call made
        assert float(r[8]) > 0 and float(r[12]) > 0, r  # client p50 and the server's own mean
        assert 0 < float(r[13]) <= 5000, r  # the server's p99, from its histogram's buckets
        assert r[14] == "0" and r[15] == "0", r  # no calls over kube-scheduler's timeout, no errors


def test_body_sends_a_fresh_uid_in_place_of_the_placeholder() -> None:
    body = make_body("/filter", {"Pod": {"metadata": {"uid": UID_PLACEHOLDER}}, "NodeNames": ["a"]}, 1)
    raw = body.head + b"0000-1" + body.tail
    assert orjson.loads(raw)["Pod"]["metadata"]["uid"] == "0000-1"
    with pytest.raises(AssertionError):
        make_body("/filter", {"a": UID_PLACEHOLDER, "b": UID_PLACEHOLDER}, 1)


def test_reply_replay_of_a_tree_against_itself_is_identical(tmp_path: Path) -> None:
    assert (REPO / "kso" / "cli.py").exists() and (REPO / "extender").is_dir()  # the tree the servers run from
    cluster = make_cluster(12, seed=3)
    snap = tmp_path / "cluster.json"
    snap.write_bytes(cluster.snapshot())
    pods = [pending_pod(random.Random(1), cluster.catalog, k, read_csv(OPENB_PODS)) for k in range(1)]
    requests = reply_check_requests(cluster, pods, ["names", "full"])
    verdict = check_replies([REPO, REPO], snap, requests, tmp_path, None)
    assert verdict.startswith(f"{len(requests)} of {len(requests)} replies identical"), verdict
    assert "200" in verdict and "400" in verdict  # good calls answered, malformed ones refused


def test_inprocess_churn_reports_both_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.latency import inprocess

    assert inprocess.main(["--nodes", "20", "--bound", "1", "--pods", "5", "--calls", "30", "--reps", "1",
                           "--churn"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^20 nodes, a bind and a deletion between pods, CPU per call \(least of 1 x 30\): "
                     r"filter \d+\.\d us, prioritize \d+\.\d us$", out, re.M), out
