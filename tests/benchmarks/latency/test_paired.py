"""benchmarks.latency.paired: two trees' workers built and asked in turn (here the same tree twice)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.latency import paired

REPO = Path(__file__).resolve().parents[3]


def test_the_same_tree_twice_reports_both_verbs_and_the_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    assert paired.main(["--before", str(REPO), "--after", str(REPO), "--nodes", "20", "--rounds", "2", "--batch", "5",
                        "--churn"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"^20 nodes, churn, 2 x 5 pods per tree, load [\d.]+: filter ([\d.]+) -> ([\d.]+) us \(([\d.]+)x\), "
                  r"prioritize ([\d.]+) -> ([\d.]+) us \(([\d.]+)x\)", out, re.M)
    assert m is not None, out
    assert all(float(v) > 0 for v in m.groups()), out  # each worker answered every batch with its own CPU time


def test_both_trees_are_required() -> None:
    with pytest.raises(SystemExit):
        paired.main(["--nodes", "20"])
