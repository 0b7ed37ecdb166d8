"""benchmarks.solver_clusters: one policy on one generated cluster, solved through optimizer.plan.pipeline and its
plan file checked by the independent checker, against first-fit-decreasing and the LP bound; and the aims."""

from __future__ import annotations

import math

from benchmarks.solver_clusters import COLUMNS, aims, cells, run_cell_policy
from optimizer.plan.compiled import SolverOptions


def test_a_cell_is_checked_independently_and_compared_with_ffd() -> None:
    row = run_cell_policy(SolverOptions(time_limit_s=5, workers=1), 20, 60, 0, "binpack")
    assert row.checker_ok, row.checker
    assert row.policy == "binpack" and row.mode == "full" and row.unplaced <= row.ffd_unplaced
    assert row.nodes_used <= row.ffd_nodes and 0 <= row.max_risk_given <= 0.3 + 1e-9
    assert math.isfinite(row.lp) and 0.0 <= row.gap_lp < 1.0 and row.seconds > 0
    assert len(cells(row)) == len(COLUMNS)
    verdicts = dict((aim, met) for aim, met, _ in aims([row]))
    assert verdicts["unplaced <= FFD's, every policy"] == "met"
    assert verdicts["independent checker: 0 rule, capacity, exactly-once or risk problems"] == "met"
