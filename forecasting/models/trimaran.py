"""Trimaran / load-watcher baseline: mean and std of the last 15 minutes, p95 = mean + 1.645 std.

load-watcher serves ``avg_over_time`` / ``stddev_over_time`` over 15 min (falling back to 10, then 5 min
when the longer window has no data); this uses the raw samples in those windows, as PromQL would."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from forecasting.models._base import Y_MAX, Grid, GridForecaster, gaussian, trailing_mean
from forecasting.types import UtilisationSeries

WINDOWS_S = (900.0, 600.0, 300.0)


class TrimaranForecaster(GridForecaster):
    name = "trimaran"
    min_bins = 1
    fallback = None

    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        # 15 min on the 5-minute grid: the mean of the last three bins.
        return trailing_mean(grid.values, 3)

    # mean = avg_over_time(y[15m]);  std = stddev_over_time(y[15m]) (population);  q_p = mean + z_p std
    def _predict(
        self, grid: Grid, h: int, series: Sequence[UtilisationSeries]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mean = grid.values[:, -1].copy()  # no sample in 15 min: the carried-forward last value, std 0
        std = np.zeros(len(mean))
        for i, s in enumerate(series):
            now_i = grid.now[i]
            ok = np.isfinite(s.t) & np.isfinite(s.y) & (s.t <= now_i)
            for w in WINDOWS_S:
                sel = ok & (s.t > now_i - w)
                if sel.any():
                    ys = np.clip(s.y[sel], 0.0, Y_MAX)
                    mean[i] = ys.mean()
                    std[i] = ys.std()
                    break
        return mean, std, gaussian(mean, std)
