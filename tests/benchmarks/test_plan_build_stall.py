"""benchmarks/plan_build_stall.py runs (a tiny cluster, one tree, the extender's whole plan cycle) and reports what
its figures need: the cycles, the plan thread's CPU, and where the stalled calls' time went."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_plan_build_stall_measures_plan_cycles(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.plan_build_stall import main

    assert main(["--before", str(REPO), "--after", str(REPO), "--trees", "after", "--rounds", "1", "--nodes", "30",
                 "--pods-per-node", "2", "--seconds", "2", "--gap-s", "0.1", "--cycle", "solve"]) == 0
    out = capsys.readouterr().out
    cycles = re.search(r"(\d+) filter calls, (\d+) during (\d+) solve cycles", out)
    assert cycles is not None, out
    calls, during, n_cycles = map(int, cycles.groups())
    assert calls > 0 and n_cycles >= 1 and 0 < during <= calls, out
    assert "the plan thread's CPU" in out and "lock held" in out and "stalls:" in out
    row = next(line for line in out.splitlines() if line.startswith("| after |"))
    assert "nan" not in row.split("|")[3], row  # the plan thread's CPU per cycle was measured
