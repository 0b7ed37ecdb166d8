"""benchmarks.forecast_accuracy: model@param=value builds the candidate the benchmark scores."""

from __future__ import annotations

import pytest

from benchmarks.forecast_accuracy import model_factory


def test_model_param_suffix_builds_the_candidate() -> None:
    f = model_factory("holt-winters+conformal@cap_trend=0")()
    assert f.name == "holt-winters+conformal" and f.cap_trend == 0.0  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="does not take"):
        model_factory("holt-winters@cap_trend=1")()
    two = model_factory("holt-winters+conformal@cap_trend=0@window_bins=288")()
    assert two.cap_trend == 0.0 and two.window_bins == 288  # type: ignore[attr-defined]
