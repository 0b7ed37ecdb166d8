"""benchmarks.latency.inprocess: filter and prioritize timed in-process, with a bind and a deletion between pods."""

from __future__ import annotations

import re

import pytest

from benchmarks.latency import inprocess


def test_inprocess_churn_reports_both_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert inprocess.main(["--nodes", "20", "--bound", "1", "--pods", "5", "--calls", "30", "--reps", "1",
                           "--churn"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^20 nodes, kube-scheduler lists of 20, a bind and a deletion between pods, CPU per call "
                     r"\(median of 1 x 30\): filter \d+\.\d us, prioritize \d+\.\d us$", out, re.M), out


def test_inprocess_sweep_says_so_and_still_reports_both_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert inprocess.main(["--nodes", "20", "--bound", "1", "--pods", "5", "--calls", "30", "--reps", "1",
                           "--churn", "--sweep-mb", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^20 nodes, kube-scheduler lists of 20, a bind and a deletion, 1 MB swept between pods, CPU per call "
                     r"\(median of 1 x 30\): "
                     r"filter \d+\.\d us, prioritize \d+\.\d us$", out, re.M), out
