"""The report's verdict (benchmarks/sim/verdict.py) on hand-built cells: kso's headline configurations against
LeastAllocated and MostAllocated with every harm, the U* sweep said monotone or explained, the plain sentence when
the policies do not differ, and every policy name defined."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.sim.bench_report import write_bench_report
from benchmarks.sim.runner import aggregate
from benchmarks.sim.verdict import glossary_lines, no_difference, sweep_lines, verdict_lines

# policy -> (node-h, overloaded node-h, pods OOM-killed, pods never served, p99 start latency s)
CELLS = {"default": (120.0, 0.0, 0.0, 0.0, 0.0), "default-most": (80.0, 70.0, 200.0, 100.0, 300.0),
         "kso-plan": (108.0, 12.5, 1.0, 3.0, 60.0),
         "kso-inproc:env=SAFEUTILIZATION=60": (118.0, 20.0, 30.0, 300.0, 300.0),
         "kso-inproc:env=SAFEUTILIZATION=80": (112.0, 0.0, 0.0, 100.0, 0.0),
         "kso-inproc:env=SAFEUTILIZATION=90": (110.0, 15.0, 2.0, 0.0, 0.0)}
KEYS = ("provisioned_node_hours", "overloaded_node_hours", "pods_oom_killed", "pods_never_served", "start_latency_p99_s")


def rows_for(cells: dict[str, tuple[float, ...]]) -> list[dict]:
    return [{"scenario": "s", "nodes": 40, "hours": 4.0, "seed": 0, "policy": p, **dict(zip(KEYS, v, strict=True))}
            for p, v in cells.items()]


def test_the_verdict_quotes_each_headline_kso_configuration_against_both_defaults() -> None:
    lines = verdict_lines(aggregate(rows_for(CELLS)), "s")
    assert [ln.split("`")[1] for ln in lines] == ["kso-inproc:env=SAFEUTILIZATION=90", "kso-plan"]
    plan = lines[1]
    assert "10.0% fewer node-hours than LeastAllocated (`default`) (108.0 vs 120.0)" in plan
    assert "35.0% more node-hours than MostAllocated (`default-most`) (108.0 vs 80.0)" in plan
    for pair in ("overloaded node-hours 12.5 vs 0.0", "pods OOM-killed 1 vs 200", "pods never served 3 vs 100",
                 "p99 start latency (s) 60 vs 300"):
        assert pair in plan


def test_a_non_monotone_sweep_is_said_and_explained_by_the_pool_when_the_bound_shows_it() -> None:
    agg = aggregate(rows_for(CELLS))
    asked: list[float] = []

    def pool_short(u: float) -> tuple[int, int, str]:
        asked.append(u)
        return (36, 36, "memory") if u < 0.7 else (0, 36, "memory")

    lines = sweep_lines(agg, "s", pool_short)
    assert "not monotone" in lines[0] and "overloaded node-hours 20.0 at U* 60% > 0.0 at 80%" in lines[0]
    assert asked == [0.6]  # only the U* that did worse than a higher one
    assert "U* 60% the whole pool cannot keep memory demand under U* in 36 of 36 scored steps" in lines[1]
    assert "300 at 60%" in lines[1]  # its pods never served, from the cell
    unexplained = sweep_lines(agg, "s", lambda u: (0, 36, "memory"))
    assert "not explained by the pool's size" in unexplained[1]


def test_a_monotone_sweep_is_said_so() -> None:
    cells = {**CELLS, "kso-inproc:env=SAFEUTILIZATION=60": (118.0, 0.0, 0.0, 300.0, 300.0)}
    assert sweep_lines(aggregate(rows_for(cells)), "s") == [
        "- kso's U* sweep (60%, 80%, 90%) is monotone: a lower U* never gave more overloaded node-hours or pods "
        "OOM-killed"]


def test_policies_that_tie_get_one_plain_sentence_instead_of_the_pareto_prose(tmp_path: Path) -> None:
    same = dict.fromkeys(("default", "default-most", "kso-plan", "oracle"), (29.2, 0.0, 0.0, 0.0, 0.0))
    agg = aggregate(rows_for(same))
    sentence = no_difference(agg, "s")
    assert sentence is not None and "all 3 policies give 29.2 node-hours, 0.0 overloaded node-hours" in sentence
    assert verdict_lines(agg, "s") == [f"- {sentence}"]
    report = write_bench_report(rows_for(same), tmp_path, {}, (), "none", "kso bench", list(same), False).read_text()
    assert "No difference on this history" in report and "**Pareto frontier" not in report
    assert no_difference(aggregate(rows_for(CELLS)), "s") is None


def test_every_policy_name_is_defined() -> None:
    lines = glossary_lines(list(CELLS) + ["oracle", "koordinator:cpu_threshold=65", "trimaran-tlp:target=40"])
    names = [ln.split("`")[1] for ln in lines]
    assert names == ["default", "default-most", "kso-plan", "kso-inproc", "oracle", "koordinator", "trimaran-tlp"]
    assert all("see benchmarks/sim/policies/" not in ln for ln in lines)


def test_the_figure_marks_what_the_cluster_ran_where_its_history_measures_the_harm() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from benchmarks.sim.bench_report import frontier_figure

    actual = {"provisioned_node_hours": (125.0, math.nan, 1), "overloaded_node_hours": (7.5, math.nan, 1),
              "pods_oom_killed": (4.0, math.nan, 1), "pods_never_served": (math.nan, math.nan, 0)}
    fig = frontier_figure(aggregate(rows_for(CELLS)), "s", "t", actual=actual)
    crosses = [[tuple(line.get_xydata()[0]) for line in ax.get_lines() if line.get_marker() == "X"] for ax in fig.axes]
    assert crosses == [[(125.0, 7.5)], [(125.0, 4.0)], [], []]  # overload, OOM kills; never served, latency: n/a
    assert "what the cluster ran (its history)" in [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)
