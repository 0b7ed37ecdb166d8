"""Additive Holt-Winters with a daily season and no trend (ETS(A,N,A)), smoothing parameters chosen per
series from a small grid by how well each would have forecast the target over the last two days.

No trend term: over 30-60 minute horizons a fitted trend mostly extrapolates noise. The grid includes
"no season" settings (a plain EWMA level), so series without a daily pattern (most Bitbrains VMs) are not
forced through a noisy seasonal profile. Everything runs as one pass over time with all series x all
parameter settings as a vector, so 1,000 series x 7 days costs a fraction of a second."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.ndimage import uniform_filter1d

from forecasting.models._base import DAY_BINS, Grid, GridForecaster, gaussian, horizon_mean_of_future
from forecasting.types import UtilisationSeries

# (alpha, gamma, seasonal) settings searched per series; alpha = level smoothing, gamma = season smoothing.
SETTINGS: tuple[tuple[float, float, bool], ...] = (
    (0.1, 0.1, True), (0.3, 0.1, True), (0.6, 0.1, True),
    (0.1, 0.3, True), (0.3, 0.3, True), (0.6, 0.3, True),
    (0.1, 0.0, False), (0.3, 0.0, False), (0.6, 0.0, False),
)
SELECT_BINS = 2 * DAY_BINS  # origins used to pick the setting (and to measure the raw spread)
SEASON_SMOOTH_BINS = 7  # 35-min circular moving average of the initial profile: one day is noisy


def hw_filter(
    values: np.ndarray, start: np.ndarray, alpha: np.ndarray, gamma: np.ndarray, seasonal: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Run ETS(A,N,A) over each row; returns (level[t], season value of slot t after step t), both (R, n).

    Initial state from the row's first day: l_0 = mean(day 1), s_i = smoothed(day 1 - l_0)_i. Then for
    t from start + 288:  e_t = y_t - l_{t-1} - s_{t-288};  l_t = l_{t-1} + alpha e_t;
    s_t = s_{t-288} + gamma (1 - alpha) e_t."""
    R, n = values.shape
    first_day = np.stack([values[r, s : s + DAY_BINS] for r, s in enumerate(start)])  # (R, 288)
    level0 = first_day.mean(axis=1)
    prof = uniform_filter1d(first_day - level0[:, None], SEASON_SMOOTH_BINS, axis=1, mode="wrap")
    prof *= seasonal[:, None]
    # season indexed by slot = column % 288, so place day-1 bin (start + i) at slot (start + i) % 288
    season = np.zeros((DAY_BINS, R))  # time-major: each step touches one contiguous row
    slots = (start[:, None] + np.arange(DAY_BINS)[None, :]) % DAY_BINS
    season[slots.T, np.arange(R)[None, :]] = prof.T
    yt = np.ascontiguousarray(values.T)  # (n, R)
    lev_out = np.empty((n, R))
    sea_out = np.empty((n, R))
    c0 = start + DAY_BINS
    level = level0.copy()
    first = int(c0.min()) if R else n
    for c in range(min(first, n)):
        lev_out[c] = level
        sea_out[c] = season[c % DAY_BINS]
    ga = gamma * (1.0 - alpha)
    for c in range(first, n):
        slot = c % DAY_BINS
        s = season[slot]
        act = (c >= c0).astype(float)
        err = (yt[c] - level - s) * act
        level = level + alpha * err
        season[slot] = s + ga * err
        lev_out[c] = level
        sea_out[c] = season[slot]
    return lev_out.T, sea_out.T


def hw_points(level: np.ndarray, sea: np.ndarray, h: int) -> np.ndarray:
    """Horizon-mean point forecast at every origin t:
    point_t = l_t + (1/H) sum_{j=1..H} s_{t+j-288}  (the season of slot t+j as last updated, a day before)."""
    h = min(h, DAY_BINS)
    out = level.copy()
    sm = horizon_mean_of_future(sea, h)  # sm[:, k] = mean of cols k+1..k+h
    out[:, DAY_BINS:] += sm[:, :-DAY_BINS]
    return out


class HoltWintersForecaster(GridForecaster):
    name = "holt-winters"
    min_bins = 2 * DAY_BINS  # one day to initialise the season, at least one more to choose a setting
    fallback = "ewma"

    def __init__(self, settings: Sequence[tuple[float, float, bool]] = SETTINGS) -> None:
        self.settings = tuple(settings)

    def _fit(self, grid: Grid, h: int) -> tuple[np.ndarray, np.ndarray]:
        """Points of the chosen setting at every origin (S, n), and the chosen setting index per series."""
        v = grid.values
        S, n = v.shape
        K = len(self.settings)
        a = np.repeat([p[0] for p in self.settings], S)
        g = np.repeat([p[1] for p in self.settings], S)
        seas = np.repeat([float(p[2]) for p in self.settings], S)
        level, sea = hw_filter(np.tile(v, (K, 1)), np.tile(grid.start, K), a, g, seas)
        pts = hw_points(level, sea, h).reshape(K, S, n)
        # selection: MAE of the horizon mean over the last SELECT_BINS origins with a complete future
        actual = horizon_mean_of_future(v, h)
        lo = max(n - h - SELECT_BINS, 0)
        cols = np.arange(lo, n - h)
        valid = cols[None, :] >= (grid.start + DAY_BINS)[:, None]  # (S, W): after the season burn-in
        err = np.abs(pts[:, :, lo : n - h] - actual[None, :, lo : n - h])
        mae = np.where(valid[None], err, 0.0).sum(axis=2) / np.maximum(valid.sum(axis=1), 1)[None]
        best = np.argmin(mae, axis=0)  # (S,)
        return pts[best, np.arange(S)], best

    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        return self._fit(grid, h)[0]

    # mean = point_T;  std = RMS over recent origins t and steps j of (y_{t+j} - point_t);  q = mean + z std
    def _predict(
        self, grid: Grid, h: int, series: Sequence[UtilisationSeries]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pts, _ = self._fit(grid, h)
        v = grid.values
        n = v.shape[1]
        lo = max(n - h - SELECT_BINS, 0)
        valid = np.arange(lo, n - h)[None, :] >= (grid.start + DAY_BINS)[:, None]
        sq = np.zeros(valid.shape)
        for j in range(1, h + 1):
            sq += (v[:, lo + j : n - h + j] - pts[:, lo : n - h]) ** 2
        var = np.where(valid, sq, 0.0).sum(axis=1) / np.maximum(valid.sum(axis=1) * h, 1)
        mean = pts[:, -1]
        std = np.sqrt(var)
        return mean, std, gaussian(mean, std)
