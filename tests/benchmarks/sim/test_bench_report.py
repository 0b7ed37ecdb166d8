"""The trade-off plot's curves: a policy's knob points share a curve, any other setting makes its own."""

from __future__ import annotations

from benchmarks.sim.bench_report import family, knob


def test_knob_points_share_a_curve_and_other_settings_make_their_own() -> None:
    assert family("kso-plan") == family("kso-plan:env=SAFEUTILIZATION=80") == "kso-plan"
    safe = "kso-plan:prior=pooled;stats=trend;env=SAFEUTILIZATION=80&SAFEPERCENTILE=5"
    assert family(safe) == "kso-plan (prior=pooled, stats=trend, SAFEPERCENTILE=5)"
    assert knob(safe) == "SAFEUTILIZATION=80" and knob("trimaran-tlp:target=60") == "target=60"
    assert family("default") == family("default-most") and knob("default-most") == "default-most"
