"""The trade-off plot's curves: a policy's knob points share a curve, any other setting makes its own."""

from __future__ import annotations

from benchmarks.sim.bench_report import aims, family, knob, table
from benchmarks.sim.runner import aggregate


def test_knob_points_share_a_curve_and_other_settings_make_their_own() -> None:
    assert family("kso-plan") == family("kso-plan:env=SAFEUTILIZATION=80") == "kso-plan"
    safe = "kso-plan:prior=pooled;stats=trend;env=SAFEUTILIZATION=80&SAFEPERCENTILE=5"
    assert family(safe) == "kso-plan (prior=pooled, stats=trend, SAFEPERCENTILE=5)"
    assert knob(safe) == "SAFEUTILIZATION=80" and knob("trimaran-tlp:target=60") == "target=60"
    assert family("default") == family("default-most") and knob("default-most") == "default-most"


def test_pods_that_never_ran_are_shown_beside_the_aims() -> None:
    """A policy can meet the aims' numbers by not running pods: the table and each aim line say how many were
    deleted while pending (the row's ``failed``), by hand: kso 30 and 10 (mean 20), LeastAllocated 0."""
    base = {"scenario": "s", "overload_episodes": 1.0, "overload_node_steps": 1.0, "unmet_cpu_core_min": 0.0,
            "oom_kills": 0.0, "provisioned_node_hours": 10.0, "pending_mean": 0.0, "pending_p95_min": 0.0,
            "pods_moved": 0.0, "ca_evictions": 0.0, "scheduled": 70.0, "pods_total": 100.0, "pending_end": 0.0,
            "scale_ups": 0.0, "scale_downs": 0.0, "mean_util_cpu": 0.5, "wall_s": 1.0}
    rows = [{**base, "policy": "kso-plan", "seed": 0, "failed": 30.0}, {**base, "policy": "kso-plan", "seed": 1, "failed": 10.0},
            {**base, "policy": "default", "seed": 0, "failed": 0.0, "provisioned_node_hours": 20.0}]
    agg = aggregate(rows)
    text = table(agg, "s", ["default", "kso-plan"])
    assert "pods deleted while pending" in text.splitlines()[0]
    assert "| kso-plan | 2 |" in text and "| 20 ± " in text
    (line,) = aims(agg, "s", ["default", "kso-plan"])
    assert "aim 2" in line and "**met**" in line and line.endswith("pods deleted while pending 20 vs 0")
