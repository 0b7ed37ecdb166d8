"""The solver benchmark's main function on a tiny openb instance: every column printed, zero violations."""

from __future__ import annotations

import io

import pytest

from benchmarks import solver
from optimizer.plan.model import POLICIES
from optimizer.plan.openb import SOURCES, USAGE_LABEL

pytestmark = pytest.mark.usefixtures("openb_trace")  # fails naming KSO_TRACE_DIR when the trace is missing


def _table(text: str, first_column: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the markdown table whose first column is ``first_column``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return header, rows


def test_tiny_benchmark_prints_every_column_and_no_violations() -> None:
    out = io.StringIO()
    # 3 s per policy solve, not 1: at load 7-10 a 1 s CP-SAT solve of 20x100 ended UNKNOWN (no solution yet).
    rc = solver.main(["--cells", "20x100", "--policy-cell", "20x100", "--time-limit", "3", "--policy-time-limit", "3"], out)
    text = out.getvalue()
    assert rc == 0
    assert USAGE_LABEL in text and SOURCES in text
    for what in ("timestamp:", "machine:", "load average", "(before)", "(after)", "seed: 0"):
        assert what in text

    header, rows = _table(text, "nodes")
    assert header == list(solver.BINPACK_COLUMNS)
    assert len(rows) == 1
    row = dict(zip(header, rows[0], strict=True))
    assert (row["nodes"], row["pods"]) == ("20", "100")
    assert row["violations"] == "0"
    assert row["violations FFD/BFD"].count("/") == 1
    assert all(row[c] not in ("", "-") for c in ("nodes plan", "nodes FFD", "nodes BFD", "LP bound", "gap vs LP", "wall s"))
    assert int(row["nodes plan"]) <= int(row["nodes FFD"])
    assert int(row["unplaced plan"]) == 0

    header, rows = _table(text, "policy")
    assert header == list(solver.POLICY_COLUMNS)
    assert [r[0] for r in rows] == list(POLICIES)
    for r in rows:
        p = dict(zip(header, r, strict=True))
        assert p["violations"] == "0", p
        assert float(p["max risk"]) <= 0.3
        assert p["status"] in ("OPTIMAL", "FEASIBLE")

    header, rows = _table(text, "sigma")
    assert header == ["sigma", "normal max mean", "Beta max mean", "Beta - normal"] and len(rows) == 6
    assert text.count("| sigma |") == 2  # eps 0.3 and 0.05

    assert "## Aims" in text
    assert "zero nodes above their exact safe bound in every plan: **MET**" in text


def _abort(options: object) -> int:
    import faulthandler
    import os

    faulthandler.disable()  # pytest's traceback dump would only add noise
    os.abort()  # what an OR-Tools C++ abort does to the process
    return 0


def _fail(options: object) -> int:
    raise ValueError("bad input")


def _power(options: object, base: int, exp: int) -> int:
    return int(base**exp)


def test_a_crashing_solve_is_reported_not_fatal() -> None:
    from optimizer.plan.compiled import SolverOptions

    opts = SolverOptions(time_limit_s=5)
    result, notes = solver.with_retries(_abort, opts)
    assert result is None and len(notes) == solver.CRASH_RETRIES + 1
    assert "killed by SIGABRT" in notes[0] and "given up" in notes[-1]
    assert solver.with_retries(_power, opts, 2, 10) == (1024, [])
    with pytest.raises(ValueError, match="bad input"):
        solver.with_retries(_fail, opts)
