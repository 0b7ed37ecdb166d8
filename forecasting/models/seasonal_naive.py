"""Seasonal-naive forecaster: the next horizon looks like the same clock time yesterday."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from forecasting.models._base import DAY_BINS, Grid, GridForecaster, horizon_mean_of_future
from forecasting.models.last_value import LastValueForecaster
from forecasting.types import UtilisationSeries


class SeasonalNaiveForecaster(GridForecaster):
    name = "seasonal-naive"
    min_bins = DAY_BINS
    fallback = LastValueForecaster

    # point_t = (1/H) sum_{j=1..H} y_{t+j-288}: yesterday's values over the same clock window
    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        h = min(h, DAY_BINS)  # beyond a day the lagged window would reach into the future
        past = horizon_mean_of_future(grid.values, h)  # past[:, t] = mean of cols t+1..t+h
        out = grid.values.copy()  # before a full day exists: last value (only used as masked burn-in)
        out[:, DAY_BINS:] = past[:, :-DAY_BINS]
        return out

    # mean = mean of yesterday's H values; std, quantiles = their empirical std and quantiles
    def _predict(
        self, grid: Grid, h: int, series: Sequence[UtilisationSeries]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h = min(h, DAY_BINS)
        n = grid.values.shape[1]
        window = grid.values[:, n - DAY_BINS : n - DAY_BINS + h]
        q = np.quantile(window, [0.5, 0.9, 0.95, 0.99], axis=1).T
        return window.mean(axis=1), window.std(axis=1), q
