"""Last-value (persistence) forecaster: the next hour looks like the last 5 minutes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from forecasting.models._base import Grid, GridForecaster, gaussian
from forecasting.types import UtilisationSeries

SPREAD_BINS = 12  # spread from the last hour of 5-min values: recent volatility, not the whole week's


class LastValueForecaster(GridForecaster):
    name = "last-value"
    min_bins = 1
    fallback = None

    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        return grid.values.copy()

    # mean = y_last;  std = std of the last hour's 5-min values;  q_p = mean + z_p * std
    def _predict(
        self, grid: Grid, h: int, series: Sequence[UtilisationSeries]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mean = grid.values[:, -1]
        std = grid.values[:, -SPREAD_BINS:].std(axis=1)
        return mean, std, gaussian(mean, std)
