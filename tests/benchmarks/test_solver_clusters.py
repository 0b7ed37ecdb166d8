"""benchmarks.solver_clusters: one policy on one generated cluster, solved through optimizer.plan.pipeline and its
plan file checked by the independent checker, against first-fit-decreasing and the LP bound; and the aims."""

from __future__ import annotations

import math

import pytest

from benchmarks.solver_clusters import (
    COLUMNS,
    ClusterCell,
    aims,
    cells,
    over_seeds,
    parse_cluster_cell,
    run_cell_policy,
)
from optimizer.plan.compiled import SolverOptions


def test_a_cell_is_checked_independently_and_compared_with_ffd() -> None:
    row = run_cell_policy(SolverOptions(time_limit_s=5, workers=1), ClusterCell(20, 60), 0, "binpack")
    assert row.checker_ok, row.checker
    assert row.policy == "binpack" and row.mode == "full" and row.unplaced <= row.ffd_unplaced
    assert row.nodes_used <= row.ffd_nodes and 0 <= row.max_risk_given <= 0.3 + 1e-9
    assert math.isfinite(row.lp) and 0.0 <= row.gap_lp < 1.0 and row.seconds > 0 and row.peak_gib > 0
    assert row.vs_start in ("better", "same")
    assert len(cells(row)) == len(COLUMNS)
    verdicts = dict((aim, met) for aim, met, _ in aims([row]))
    assert verdicts["unplaced <= FFD's, every policy"] == "met"
    assert verdicts["independent checker: 0 rule, capacity, exactly-once or risk problems"] == "met"


def test_pending_and_replan_cells_plan_what_they_say() -> None:
    busy = run_cell_policy(SolverOptions(time_limit_s=5, workers=1), parse_cluster_cell("40x900/30"), 0, "binpack")
    assert busy.checker_ok, busy.checker
    assert busy.mode == "no search" and busy.unplaced <= busy.ffd_unplaced
    replan = run_cell_policy(SolverOptions(time_limit_s=5, workers=1), parse_cluster_cell("40x900/30:replan"), 0,
                             "binpack")
    assert replan.checker_ok, replan.checker
    assert replan.nodes_used < busy.nodes_used  # every pod movable: fewer nodes than the busy cluster uses


@pytest.mark.parametrize(("text", "cell"), [
    ("300x2000", ClusterCell(300, 2000)),
    ("5000x150000/1000", ClusterCell(5000, 150000, 1000)),
    ("5000x150000/1000:replan", ClusterCell(5000, 150000, 1000, True)),
    ("300x2000:varied", ClusterCell(300, 2000, kind="varied")),
])
def test_cells_parse_and_name_themselves(text: str, cell: ClusterCell) -> None:
    assert parse_cluster_cell(text) == cell and cell.name == text


@pytest.mark.parametrize("text", ["300", "300x", "5000x150000/x", "300x2000:fast"])
def test_a_bad_cell_says_what_it_wants(text: str) -> None:
    with pytest.raises(ValueError, match="NODESxPODS"):
        parse_cluster_cell(text)


def test_a_public_cell_is_planned_and_checked() -> None:
    """The tuning set (benchmarks.public_clusters, trace shapes) goes through the same plan and checker."""
    cell = parse_cluster_cell("30x120:public")
    assert cell == ClusterCell(30, 120, public=True) and cell.name == "30x120:public"
    row = run_cell_policy(SolverOptions(time_limit_s=5, workers=1), cell, 1, "binpack")
    assert row.checker_ok, row.checker
    assert row.unplaced <= row.ffd_unplaced and row.nodes_used <= row.ffd_nodes
    assert math.isfinite(row.lp) and 0.0 <= row.gap_lp < 1.0


@pytest.mark.parametrize("text", ["300x2000/10:public", "300x2000:replan:public", "300x2000:varied:public"])
def test_a_public_cell_takes_sizes_only(text: str) -> None:
    with pytest.raises(ValueError, match="public"):
        parse_cluster_cell(text)


def test_over_seeds_gives_the_spread() -> None:
    rows = [run_cell_policy(SolverOptions(time_limit_s=3, workers=1), ClusterCell(20, 60), seed, "binpack")
            for seed in (0, 1)]
    (line,) = over_seeds(rows)
    assert line[:3] == ["20x60", "binpack", "0,1"] and line[-1] == "0" and "[" in line[3]
