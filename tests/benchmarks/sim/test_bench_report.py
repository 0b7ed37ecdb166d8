"""The multi-seed report (benchmarks/sim/bench_report.py) on hand-built cells: harm and cost tables with the
direction of each column, n/a for metrics old cells lack, one-seed runs said as such, the Pareto statement,
kso's harm interpolated at each peer's cost, and a frontier figure whose labels never overlap."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from benchmarks.sim.bench_report import (
    COST,
    HARM,
    aims_lines,
    every_axis_lines,
    family,
    frontier_figure,
    frontier_lines,
    interpolation_table,
    knob,
    table,
    write_bench_report,
)
from benchmarks.sim.runner import aggregate

# (policy, provisioned node-h, overloaded node-h, pods OOM-killed), two seeds each: seed 1 = seed 0 + (2, 1, 2)
POINTS = [("default", 160.0, 0.0, 0.0), ("default-most", 104.0, 100.0, 300.0), ("trimaran-tlp:target=40", 134.0, 60.0, 20.0),
          ("trimaran-tlp:target=80", 120.0, 90.0, 50.0), ("koordinator:cpu_threshold=65", 156.0, 10.0, 1.0),
          ("kso-inproc:env=SAFEUTILIZATION=70", 150.0, 4.0, 0.0), ("kso-inproc:env=SAFEUTILIZATION=90", 110.0, 40.0, 8.0),
          ("oracle", 108.0, 2.0, 0.0)]


def rows_for(points: list[tuple[str, float, float, float]] = POINTS, seeds: tuple[int, ...] = (0, 1),
             **extra: float) -> list[dict]:
    rows = []
    for seed in seeds:
        for policy, cost, harm, oom in points:
            rows.append({"scenario": "s", "nodes": 40, "hours": 4.0, "seed": seed, "policy": policy,
                         "provisioned_node_hours": cost + 2 * seed, "overloaded_node_hours": harm + seed,
                         "pods_oom_killed": oom + 2 * seed, "overload_episodes": 3.0, "oom_kills": oom * 2, **extra})
    return rows


def test_knob_points_share_a_curve_and_other_settings_make_their_own() -> None:
    assert family("kso-plan") == family("kso-plan:env=SAFEUTILIZATION=80") == "kso-plan"
    safe = "kso-plan:prior=pooled;stats=trend;env=SAFEUTILIZATION=80&SAFEPERCENTILE=5"
    assert family(safe) == "kso-plan (prior=pooled, stats=trend, SAFEPERCENTILE=5)"
    assert knob(safe) == "SAFEUTILIZATION=80" and knob("trimaran-tlp:target=60") == "target=60"
    assert family("default") == family("default-most") and knob("default-most") == "default-most"
    assert family("oracle:u_star=0.8") == "oracle" and knob("oracle:u_star=0.8") == "u_star=0.8"


def test_harm_and_cost_tables_say_which_way_is_better_and_show_missing_metrics_as_na() -> None:
    agg = aggregate(rows_for())
    harm = table(agg, "s", ["default", "kso-inproc:env=SAFEUTILIZATION=70"], HARM).splitlines()
    assert "overloaded node-h ↓" in harm[0] and "pod-time served % ↑" in harm[0] and "pods OOM-killed ↓" in harm[0]
    # default: overloaded 0 and 1 over the seeds: mean 0.5, half-width t(0.975, 1) x 0.7071 / sqrt(2) = 6.353
    assert harm[2].startswith("| default | 2 | 0.5 ± 6.4 |")
    assert "n/a" in harm[2]  # unmet_cpu_core_hours etc. are not in these cells
    cost = table(agg, "s", ["default"], COST).splitlines()
    assert cost[0].startswith("| policy | seeds | node-h ↓ | core-h ↓ | memory TiB-h ↓")
    assert cost[2] == "| default | 2 | 161.0 ± 12.7 | n/a | n/a |"
    # cells of the old engine (no new key at all) still render
    old = [{"scenario": "s", "seed": 0, "policy": "default", "overload_episodes": 2.0, "provisioned_node_hours": 9.0}]
    assert table(aggregate(old), "s", ["default"], HARM).splitlines()[2].startswith("| default | 1 | n/a |")


def test_pareto_statement_by_hand() -> None:
    agg = aggregate(rows_for(seeds=(0,)))
    lines = frontier_lines(agg, "s", "overloaded_node_hours", "overloaded node-hours")
    # cost/harm: default 160/0, most 104/100, tlp40 134/60, tlp80 120/90, koord 156/10, kso70 150/4, kso90 110/40
    # dominated: tlp40 (by kso90: 110 <= 134, 40 <= 60), tlp80 (by kso90), koord (by kso70: 150/4)
    assert lines[0].endswith(": `default`, `default-most`, `kso-inproc:env=SAFEUTILIZATION=70`, "
                             "`kso-inproc:env=SAFEUTILIZATION=90`")
    assert lines[1] == ("  - dominated: `koordinator:cpu_threshold=65` (by `kso-inproc:env=SAFEUTILIZATION=70`); "
                        "`trimaran-tlp:target=40` (by `kso-inproc:env=SAFEUTILIZATION=90`); "
                        "`trimaran-tlp:target=80` (by `kso-inproc:env=SAFEUTILIZATION=90`)")
    # the oracle (108/2) is no frontier point; it dominates kso70, kso90, tlp40, tlp80, koord, default? (160/0: no)
    assert lines[2].startswith("  - `oracle` (reference, not runnable): 108.0 node-h") and "dominates 5 of the 7" in lines[2]
    assert "oracle" not in lines[0]


def test_kso_harm_interpolated_at_each_peer_cost() -> None:
    agg = aggregate(rows_for(seeds=(0,)))
    lines = interpolation_table(agg, "s", "overloaded_node_hours", "overloaded node-hours")
    rows = {ln.split(" | ")[0][3:-1]: ln for ln in lines if ln.startswith("| `")}
    # the kso curve: (110, 40) - (150, 4). At tlp80's 120 node-h: 40 + (4 - 40) x 10 / 40 = 31.0, 59 below its 90
    assert rows["trimaran-tlp:target=80"].endswith("| 120.0 | 90.0 | 31.0 (-59.0) |")
    assert rows["trimaran-tlp:target=40"].endswith("| 134.0 | 60.0 | 18.4 (-41.6) |")  # 40 - 36 x 24 / 40
    assert rows["default"].endswith("outside kso's range (110.0-150.0 node-h) |")
    assert rows["default-most"].endswith("outside kso's range (110.0-150.0 node-h) |")
    assert "oracle" not in rows
    # a kso configuration of one knob point interpolates nothing: no column of its own
    one = aggregate(rows_for([*POINTS, ("kso-plan", 125.0, 30.0, 5.0)], seeds=(0,)))
    head = interpolation_table(one, "s", "overloaded_node_hours", "overloaded node-hours")[2]
    assert "`kso-inproc` at that node-h" in head and "kso-plan" not in head


def test_aims_paired_by_seed_the_default_configuration_and_the_oracle_by_hand() -> None:
    pts = [*POINTS, ("kso", 104.5, 50.0, 30.0), ("kso:capacity=placeholder", 140.0, 1.0, 0.0)]
    rows = rows_for(pts)
    # seed 1: default-most 106/101/302, kso 106.5/51/32; seed 0: 104/100/300 and 104.5/50/30
    lines = aims_lines(rows, aggregate(rows), "s")
    assert lines[0].startswith("- **At `default-most`'s node-hours** (105.0 ± 2%: 102.9-107.1): `kso`;")
    kso = next(ln for ln in lines if ln.startswith("  - `kso` (in the band)"))
    # overloaded: 50/100 - 1 = -50%, 51/101 - 1 = -49.505%: mean -49.75%, s = 0.495% / sqrt(2) = 0.350%,
    # half t(0.975, 1) x s / sqrt(2) = 12.706 x 0.350% / 1.414 = 3.1%
    assert "overloaded node-h -49.8% ± 3.1%" in kso
    assert "pods OOM-killed -89.7%" in kso  # 30/300 - 1 = -90%, 32/302 - 1 = -89.4%
    # 140/104 - 1 = +34.6%, 142/106 - 1 = +34.0%; outside the band
    assert any(ln.startswith("  - `kso:capacity=placeholder`: node-h +34.3% ± ") for ln in lines)
    # kso (104.5/50/30) has less of everything but pod-time served, which these rows lack (NaN): not dominated
    default = next(ln for ln in lines if ln.startswith("- **`kso`, kso as deploy/ ships it**"))
    assert "not dominated on every axis" in default
    # the oracle (108/2/0 and 110/3/2): kso:capacity=placeholder (140/1/0, 142/2/2) has no more of either harm
    oracle = next(ln for ln in lines if ln.startswith("- **At `oracle`'s harm**"))
    # 140/108 - 1 = 29.63%, 142/110 - 1 = 29.09%: mean 29.4%, half 12.706 x (0.54% / sqrt(2)) / sqrt(2) = 3.4%
    assert oracle.endswith("`kso:capacity=placeholder` +29.4% ± 3.4%")


def test_one_seed_report_says_so_and_the_frontier_leads(tmp_path: Path) -> None:
    path = write_bench_report(rows_for(seeds=(0,)), tmp_path, {"s": ["rule"]}, ["src"], "ca", "kso bench",
                              [p for p, *_ in POINTS], with_plots=False, bounds={"s": [101.8]})
    text = path.read_text()
    assert "one seed: no interval" in text and "mean ± 95%" not in text
    assert text.index("### The frontier") < text.index("### Harm per policy") < text.index("### Cost per policy")
    assert "any policy with no node above U* provisions at least 101.8 node-hours" in text
    assert "not a scheduler anyone could run" in text and "| oracle (reference) | 1 |" in text
    many = write_bench_report(rows_for(), tmp_path, {}, [], "ca", "kso bench", ["default"], with_plots=False).read_text()
    assert "mean ± 95% over 2 seeds (Student t)" in many and "one seed" not in many


def _boxes_overlap(a, b) -> bool:  # strictly: boxes that only touch do not overlap
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_frontier_figure_labels_never_overlap_and_axes_say_lower_is_better() -> None:
    import matplotlib.pyplot as plt
    from matplotlib.text import Annotation

    # a crowded sweep: 4 families x 5 knob points within a few node-hours of each other, plus the oracle
    pts = [(f"trimaran-tlp:target={t}", 120.0 + i * 0.5, 50.0 - i, 3.0) for i, t in enumerate((20, 30, 40, 50, 60))]
    pts += [(f"koordinator:cpu_threshold={t}", 120.2 + i * 0.5, 49.0 - i, 2.0) for i, t in enumerate((45, 55, 65, 75, 85))]
    pts += [(f"kso-inproc:env=SAFEUTILIZATION={u}", 120.4 + i * 0.4, 48.0 - i, 1.0) for i, u in enumerate((60, 70, 80, 90))]
    pts += [("default", 121.0, 47.0, 0.0), ("default-most", 119.0, 51.0, 4.0), ("oracle", 120.1, 49.5, 0.0)]
    agg = aggregate(rows_for(pts, seeds=(0,)))
    fig = frontier_figure(agg, "s", "s: cost against harm, one seed: no interval", bound_node_hours=110.0)
    try:
        renderer = fig.canvas.get_renderer()
        anns = [t for ax in fig.axes for t in ax.texts if isinstance(t, Annotation)]
        assert len(anns) >= 6  # most labels find a place even when crowded
        boxes = [a.get_window_extent(renderer) for a in anns]
        for a, b in itertools.combinations(boxes, 2):
            assert not _boxes_overlap(a, b)
        others = [t.get_window_extent(renderer) for ax in fig.axes
                  for t in [*ax.get_xticklabels(), *ax.get_yticklabels(), ax.xaxis.label, ax.yaxis.label, ax.title]
                  if t.get_text()]
        others += [leg.get_window_extent(renderer) for leg in fig.legends]
        for a, b in itertools.product(boxes, others):
            assert not _boxes_overlap(a, b)
        for ax in fig.axes:
            assert "lower is better" in ax.get_xlabel() and "lower is better" in ax.get_ylabel()
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert any(t.startswith("oracle") and "not a scheduler" in t for t in legend)
        assert any(t.startswith("fluid lower bound") for t in legend)
        assert any(t == "trimaran-tlp (target=20, target=30, target=40, target=50, target=60)" for t in legend)
    finally:
        plt.close(fig)


def test_figure_with_cells_of_the_old_engine_says_na() -> None:
    import matplotlib.pyplot as plt

    old = [{"scenario": "s", "seed": 0, "policy": "default", "provisioned_node_hours": 9.0, "overload_episodes": 1.0}]
    fig = frontier_figure(aggregate(old), "s", "t")
    try:
        assert [t.get_text() for t in fig.axes[0].texts] == ["n/a: the cells have no overloaded_node_hours"]
    finally:
        plt.close(fig)
    assert frontier_lines(aggregate(old), "s", "pods_oom_killed", "pods OOM-killed")[0].startswith("- pods OOM-killed: n/a")
    assert math.isnan(aggregate(old)[("s", "default")]["overload_node_steps"][0])  # a metric no row has: NaN, n = 0


def test_every_axis_statement_counts_the_pods_a_policy_did_not_serve() -> None:
    rows = rows_for(seeds=(0,))
    served = {"default": 100.0, "default-most": 95.0, "trimaran-tlp:target=40": 99.0, "trimaran-tlp:target=80": 98.0,
              "koordinator:cpu_threshold=65": 100.0, "kso-inproc:env=SAFEUTILIZATION=70": 97.0,
              "kso-inproc:env=SAFEUTILIZATION=90": 99.5, "oracle": 90.0}
    for r in rows:
        r["pod_time_served_pct"] = served[r["policy"]]
    lines = every_axis_lines(aggregate(rows), "s")
    by_peer = {ln.split("`")[1]: ln for ln in lines[1:]}
    # koord 156/10/1/100%: kso70 (150/4/0) is cheaper and safer but serves 97%: not at least as good on every axis
    assert by_peer["koordinator:cpu_threshold=65"].endswith("no kso configuration is at least as good on every axis")
    # tlp40 134/60/20/99%: kso90 110/40/8/99.5% beats it on every axis
    assert by_peer["trimaran-tlp:target=40"].endswith("beaten on every axis by `kso-inproc:env=SAFEUTILIZATION=90`")
    assert "koordinator:cpu_threshold=65" in lines[0] and "oracle" not in " ".join(lines)


def test_every_axis_counts_pods_never_served_and_the_p99_start_latency_when_the_cells_have_them() -> None:
    import matplotlib.pyplot as plt

    rows = rows_for(seeds=(0,))
    served = {"trimaran-tlp:target=40": 99.0, "kso-inproc:env=SAFEUTILIZATION=90": 99.5}
    for r in rows:
        r["pod_time_served_pct"] = served.get(r["policy"], 98.0)
    old = every_axis_lines(aggregate(rows), "s")  # cells of the engine before: the axes they have
    assert "pods never served" not in old[0] and "p99 start latency" not in old[0]
    assert any(ln.startswith("  - `trimaran-tlp:target=40`: matched or beaten") for ln in old)
    # tlp40 134/60/20/99%: kso90 110/40/8/99.5% but more pods never served (40 vs 10): no longer beaten
    for r in rows:
        r["pods_never_served"] = 40.0 if r["policy"] == "kso-inproc:env=SAFEUTILIZATION=90" else 10.0
        r["start_latency_p99_s"] = 60.0
    lines = every_axis_lines(aggregate(rows), "s")
    assert "pods never served and p99 start latency" in lines[0]
    by_peer = {ln.split("`")[1]: ln for ln in lines[1:]}
    assert by_peer["trimaran-tlp:target=40"].endswith("no kso configuration is at least as good on every axis")
    # as many never served but a longer p99 start latency: not beaten either; equal on both: beaten again
    for r in rows:
        r["pods_never_served"] = 10.0
        r["start_latency_p99_s"] = 600.0 if r["policy"] == "kso-inproc:env=SAFEUTILIZATION=90" else 60.0
    by_peer = {ln.split("`")[1]: ln for ln in every_axis_lines(aggregate(rows), "s")[1:]}
    assert by_peer["trimaran-tlp:target=40"].endswith("no kso configuration is at least as good on every axis")
    for r in rows:
        r["start_latency_p99_s"] = 60.0
    by_peer = {ln.split("`")[1]: ln for ln in every_axis_lines(aggregate(rows), "s")[1:]}
    assert by_peer["trimaran-tlp:target=40"].endswith("beaten on every axis by `kso-inproc:env=SAFEUTILIZATION=90`")
    # the figure: a panel for each (overloaded node-h, pods OOM-killed, pods never served, p99 start latency)
    fig = frontier_figure(aggregate(rows), "s", "t")
    try:
        titles = [ax.get_title() for ax in fig.axes]
        assert any(t.startswith("pods never served") for t in titles)
        assert any(t.startswith("p99 start latency") for t in titles)
    finally:
        plt.close(fig)


def test_up_to_twenty_curves_get_twenty_colours() -> None:
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    pts = [(f"kso:judge=usage;capacity=placeholder;max_placeholders={i}", 120.0 + i, 50.0 - i, 1.0) for i in range(12)]
    pts += [("default", 140.0, 0.0, 0.0), ("trimaran-lvrb", 138.0, 1.0, 0.0)]
    fig = frontier_figure(aggregate(rows_for(pts, seeds=(0,))), "s", "s")
    try:
        legend = fig.legends[0]
        colours = [to_hex(h.get_color()) for h in legend.legend_handles if hasattr(h, "get_color")]
        assert len(colours) == 14 and len(set(colours)) == 14  # 12 kso curves, the default family, LVRB
    finally:
        plt.close(fig)
