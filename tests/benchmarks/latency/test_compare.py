"""benchmarks.latency.compare's reply check: the same requests replayed through two kso trees' apps in-process
(benchmarks/latency/replay.py, run by path in each tree) give byte-identical replies; here a tree against itself."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from benchmarks.latency.cluster import OPENB_NODES, OPENB_PODS, REPO, make_cluster, pending_pod, read_csv
from benchmarks.latency.compare import check_replies, reply_check_requests

pytestmark = pytest.mark.skipif(not OPENB_NODES.exists(), reason=f"no openb trace at {OPENB_NODES}")


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
