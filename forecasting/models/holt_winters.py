"""Additive Holt-Winters with a daily season and no trend (ETS(A,N,A)), smoothing parameters chosen per
series from a small grid by how well each would have forecast the target over the last two days.

No trend term: over 30-60 minute horizons a fitted trend mostly extrapolates noise. The grid includes
"no season" settings (a plain EWMA level), so series without a daily pattern (most Bitbrains VMs) are not
forced through a noisy seasonal profile. Everything runs as one pass over time with all series x all
parameter settings as a vector, so 1,000 series x 7 days costs a fraction of a second."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from forecasting.models._base import DAY_BINS, Grid, GridForecaster, gaussian, horizon_mean_of_future
from forecasting.models.ewma import EWMAForecaster
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
    values: np.ndarray,
    start: np.ndarray,
    settings: Sequence[tuple[float, float, bool]],
    keep: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Run ETS(A,N,A) for every series x setting; returns (level after step t, season value of slot t
    after step t) for the last ``keep`` columns, shaped (K, S, keep).

    Initial state from the series' first day: l_0 = mean(day 1), s_i = smoothed(day 1 - l_0)_i. Then for
    t from start + 288:  e_t = y_t - l_{t-1} - s_{t-288};  l_t = l_{t-1} + alpha e_t;
    s_t = s_{t-288} + gamma (1 - alpha) e_t."""
    # imported here, not with the module: see forecasting.models.ewma.ewma_filter
    from scipy.ndimage import uniform_filter1d

    S, n = values.shape
    K = len(settings)
    keep = min(keep, n)
    idx = np.minimum(start[:, None] + np.arange(DAY_BINS)[None, :], n - 1)
    first_day = np.take_along_axis(values, idx, axis=1)  # (S, 288)
    level0 = first_day.mean(axis=1)
    prof = uniform_filter1d(first_day - level0[:, None], SEASON_SMOOTH_BINS, axis=1, mode="wrap")
    # season indexed by slot = column % 288, so day-1 bin (start + i) goes to slot (start + i) % 288
    season_s = np.zeros((DAY_BINS, S))
    season_s[(idx % DAY_BINS).T, np.arange(S)[None, :]] = prof.T
    seasonal = np.array([p[2] for p in settings], dtype=float)
    alpha = np.repeat([p[0] for p in settings], S)
    ga = np.repeat([p[1] * (1.0 - p[0]) for p in settings], S)
    # state is time-major and setting-major: (288, K*S) season, (K*S,) level; every step is contiguous
    season = (season_s[:, None, :] * seasonal[None, :, None]).reshape(DAY_BINS, K * S)
    level = np.tile(level0, K)
    yt = np.ascontiguousarray(values.T)  # (n, S)
    c0 = np.tile(start + DAY_BINS, K)
    lev_out = np.empty((keep, K * S))
    sea_out = np.empty((keep, K * S))
    first_out = n - keep
    for c in range(n):
        slot = c % DAY_BINS
        s = season[slot]
        if c >= c0.min():
            err = np.tile(yt[c], K) - level - s
            err *= c >= c0  # rows still in their season burn-in keep the initial state
            level = level + alpha * err
            s = s + ga * err
            season[slot] = s
        if c >= first_out:
            lev_out[c - first_out] = level
            sea_out[c - first_out] = s
    return lev_out.T.reshape(K, S, keep), sea_out.T.reshape(K, S, keep)


def hw_points(level: np.ndarray, sea: np.ndarray, h: int) -> np.ndarray:
    """Horizon-mean point forecast at every origin t (last axis), NaN where the season record is short:
    point_t = l_t + (1/H) sum_{j=1..H} s_{t+j-288}  (the season of slot t+j as last updated, a day before)."""
    h = min(h, DAY_BINS)
    shp = level.shape
    lv, sv = level.reshape(-1, shp[-1]), sea.reshape(-1, shp[-1])
    out = np.full(lv.shape, np.nan)
    sm = horizon_mean_of_future(sv, h)  # sm[:, k] = mean of cols k+1..k+h
    out[:, DAY_BINS:] = lv[:, DAY_BINS:] + sm[:, :-DAY_BINS]
    return out.reshape(shp)


class HoltWintersForecaster(GridForecaster):
    name = "holt-winters"
    min_bins = 2 * DAY_BINS  # one day to initialise the season, at least one more to choose a setting
    fallback = EWMAForecaster

    def __init__(self, settings: Sequence[tuple[float, float, bool]] = SETTINGS) -> None:
        self.settings = tuple(settings)

    def _fit(self, grid: Grid, h: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Points of the chosen setting at the last ``SELECT_BINS + h`` origins (S, W), the chosen setting
        per series, and the column index of the first returned origin."""
        v = grid.values
        S, n = v.shape
        hh = min(h, DAY_BINS)
        tail = min(SELECT_BINS + h, n - DAY_BINS)  # origins we need points for (selection + calibration)
        level, sea = hw_filter(v, grid.start, self.settings, tail + DAY_BINS)
        pts = hw_points(level, sea, hh)[:, :, DAY_BINS:]  # (K, S, tail): origins n-tail .. n-1
        lo = n - tail
        # selection: MAE of the horizon mean over the origins that have a complete future
        actual = horizon_mean_of_future(v, hh)[:, lo : n - h]
        cols = np.arange(lo, n - h)
        valid = cols[None, :] >= (grid.start + DAY_BINS)[:, None]  # (S, W): after the season burn-in
        err = np.abs(pts[:, :, : tail - h] - actual[None])
        err = np.where(valid[None] & np.isfinite(err), err, 0.0)
        mae = err.sum(axis=2) / np.maximum(valid.sum(axis=1), 1)[None]
        best = np.argmin(mae, axis=0)  # (S,)
        chosen = pts[best, np.arange(S)]
        return np.where(np.isfinite(chosen), chosen, v[:, lo:]), best, lo

    burn_in_bins = DAY_BINS  # origins before start + one day have only the initial season

    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        """Points at the last SELECT_BINS + h origins; older origins are NaN (not computed, to keep memory
        at K settings x S series x 2 days), which the calibration skips."""
        pts, _, lo = self._fit(grid, h)
        out = np.full(grid.values.shape, np.nan)
        out[:, lo:] = pts
        return out

    # mean = point_T;  std = RMS over recent origins t and steps j of (y_{t+j} - point_t);  q = mean + z std
    def _predict(
        self, grid: Grid, h: int, series: Sequence[UtilisationSeries]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pts = self.rolling_points(grid, h)
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
