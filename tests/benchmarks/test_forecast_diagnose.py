"""benchmarks.forecast_diagnose: per row (task x origin x horizon) pinball and coverage of each model, and the
summary tables by history length and by origin."""

from __future__ import annotations

import numpy as np

from benchmarks.forecast_diagnose import rows_for, summary


def test_rows_score_every_model_on_the_same_rows_and_the_summary_counts_them() -> None:
    models = ["last-value", "ewma+conformal"]
    rows = rows_for("report", 2, models)
    assert len(rows) > 0 and set(rows.resource) == {"cpu", "memory"}
    for m in models:
        assert (rows[f"{m}|pin"] >= 0).all() and (rows[f"{m}|c95"] <= rows.n).all() and (rows[f"{m}|c95"] >= 0).all()
    assert (rows.history_h > 0).all() and np.isfinite(rows.history_h).all()
    lines = summary(rows, models)
    tables = [ln for ln in lines if ln.startswith("| rows by |")]
    assert len(tables) == rows.groupby(["resource", "horizon_min"]).ngroups
    assert any(ln.strip().startswith("last-value: ") and "values above p95" in ln for ln in lines)
