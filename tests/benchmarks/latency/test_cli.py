"""``python -m benchmarks.latency`` (benchmarks.latency.cli): a tiny matrix (benchmarks.latency.matrix) and a short
soak (benchmarks.latency.soak) against the real extender process."""

from __future__ import annotations

import re

import pytest

from benchmarks.latency import cli
from benchmarks.latency.cluster import OPENB_NODES
from benchmarks.latency.matrix import run_matrix
from benchmarks.latency.soak import run_soak

pytestmark = pytest.mark.skipif(not OPENB_NODES.exists(), reason=f"no openb trace at {OPENB_NODES}")


def test_matrix_runs_every_cell_without_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--nodes", "30", "--modes", "names,full", "--node-sets", "all", "--requests", "20",
                     "--warmup", "3", "--variants", "2", "--max-cell-seconds", "10"]) == 0
    out = capsys.readouterr().out
    table = out[out.rindex("nodes mode"):].splitlines()[1:]
    rows = [line.split() for line in table if line.startswith("   30 ") and "RSS" not in line]
    assert {(r[1], r[2]) for r in rows} == {(m, v) for m in ("names", "full") for v in ("filter", "prioritize")}
    for r in rows:
        assert r[4] == "30" and int(r[7]) >= 20, r  # every node sent, every call made
        assert float(r[8]) > 0 and float(r[12]) > 0, r  # client p50 and the server's own mean
        assert 0 < float(r[13]) <= 5000, r  # the server's p99, from its histogram's buckets
        assert r[14] == "0" and r[15] == "0", r  # no calls over kube-scheduler's timeout, no errors


def test_a_short_soak_reports_both_verbs_without_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run_soak is run_soak and cli.run_matrix is run_matrix  # the modes the command runs
    assert cli.main(["--duration", "4", "--rate", "40", "--soak-nodes", "20", "--soak-clients", "1", "--soak-bucket", "2",
                     "--variants", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^soak: 20 nodes, NodeNames mode", out, re.M), out
    assert "errors: 0; server error counters +0" in out, out
    for verb in ("filter", "prioritize"):
        m = re.search(rf"^  {verb} +p50 ([\d.]+) ms .*server mean ([\d.]+) ms\)$", out, re.M)
        assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, out  # the server's own mean, from /metrics
