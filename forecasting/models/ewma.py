"""Exponentially weighted moving average with an exponentially weighted variance."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from forecasting.models._base import Grid, GridForecaster, gaussian
from forecasting.models.last_value import LastValueForecaster
from forecasting.types import UtilisationSeries

# 1 h: on Bitbrains/Alibaba a 1-h level beat 15- and 30-min ones as the centre of the calibrated p95 band
# (burst peaks revert, so chasing the last 5 minutes adds error); see benchmarks/forecast_accuracy.py
HALF_LIFE_BINS = 12.0


def ewma_filter(values: np.ndarray, alpha: float) -> np.ndarray:
    """Level at every column, seeded with the first value: l_t = alpha y_t + (1 - alpha) l_{t-1}.
    lfilter runs the recursion in C along the time axis for all series at once."""
    # scipy.signal is imported at the first forecast, not with the module: every command's configuration check
    # imports the forecast store's settings, and with them the models (kso.cli.check_configuration).
    from scipy.signal import lfilter

    zi = ((1.0 - alpha) * values[:, :1])  # initial state so that l_0 = y_0
    out, _ = lfilter([alpha], [1.0, -(1.0 - alpha)], values, axis=1, zi=zi)
    return out


class EWMAForecaster(GridForecaster):
    name = "ewma"
    min_bins = 1
    fallback = LastValueForecaster

    def __init__(self, half_life_bins: float = HALF_LIFE_BINS) -> None:
        # alpha = 1 - 2^(-1 / half_life): the weight of a sample halves every half_life bins
        self.alpha = 1.0 - math.pow(2.0, -1.0 / half_life_bins)

    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        return ewma_filter(grid.values, self.alpha)

    # mean = l_T;  var = EW mean of (y_t - l_{t-1})^2 with the same alpha;  q_p = mean + z_p sqrt(var)
    def _predict(
        self, grid: Grid, h: int, series: Sequence[UtilisationSeries]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        level = ewma_filter(grid.values, self.alpha)
        err = np.zeros_like(grid.values)
        err[:, 1:] = (grid.values[:, 1:] - level[:, :-1]) ** 2
        var = ewma_filter(err, self.alpha)[:, -1]
        mean = level[:, -1]
        std = np.sqrt(np.clip(var, 0.0, None))
        return mean, std, gaussian(mean, std)
