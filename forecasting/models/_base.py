"""Shared machinery for the forecasters: the 5-minute grid, the forecast target and NodeForecast assembly.

Forecast target (used identically by every model, the calibration and the benchmark): the distribution
of the 5-minute utilisation values of one series over the next ``horizon_s`` seconds after ``now``.
Concretely the future bins are ``(now + (j-1)*300, now + j*300]`` for ``j = 1..H`` with
``H = ceil(horizon_s / 300)``; a bin's value is the mean of the finite samples falling in it. ``mean``
estimates the mean of those H values; ``pXX`` is the value that a randomly chosen one of the H bins
stays at or below with probability XX % (so p95 is exceeded by ~5 % of the 5-minute values in the
window; it is not the quantile of the window's peak).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from forecasting import quality
from forecasting.types import NodeForecast, UtilisationSeries

STEP_S = 300.0  # the grid every model works on: 5 minutes, the Bitbrains sampling period
DAY_BINS = 288  # 24 h / 5 min: the daily season length on the grid
DEFAULT_HISTORY_S = 7 * 86400.0  # history kept per series (the benchmark's "up to 7 days")
STALE_AFTER_S = 900.0  # newest sample older than three grid steps -> flagged stale
GAPPY_SHARE = 0.5  # fewer observed 5-minute bins than this share of the history -> flagged gappy-history
Y_MAX = 1000.0  # utilisation ratios beyond this are data errors; clipping keeps sums finite

QUANTILES = (0.5, 0.9, 0.95, 0.99)
# Standard-normal quantiles z_q = Phi^-1(q) for the models whose raw spread is Gaussian.
Z = np.array([0.0, 1.2815515655446004, 1.6448536269514722, 2.3263478740408408])


def horizon_bins(horizon_s: float) -> int:
    """Number of 5-minute bins the target covers: H = max(1, ceil(horizon_s / 300))."""
    if not math.isfinite(horizon_s) or horizon_s <= 0:
        raise ValueError(f"horizon_s must be a positive finite number of seconds, got {horizon_s!r}")
    return max(1, math.ceil(horizon_s / STEP_S - 1e-9))


@dataclass(slots=True)
class Grid:
    """A batch of series resampled onto a common-length 5-minute grid ending at each series' ``now``.

    Column ``n-1`` is the bin ``(now-300, now]``; columns before a series' first observed bin hold its
    first value (so vectorised filters need no NaN handling) and are excluded through ``start``."""

    values: np.ndarray  # (S, n) gap-filled values
    observed: np.ndarray  # (S, n) bool: bin held at least one finite sample (not interpolated)
    start: np.ndarray  # (S,) index of the first observed bin (n when the series has none)
    now: np.ndarray  # (S,) forecast origin per series
    last_t: np.ndarray  # (S,) time of the newest finite sample at or before now (NaN if none)
    notes: list[list[str]] = field(default_factory=list)  # per-series data-quality notes
    flags: list[list[str]] = field(default_factory=list)  # per-series forecasting.quality flags

    @property
    def n_obs(self) -> np.ndarray:
        return self.observed.sum(axis=1)

    @property
    def history_bins(self) -> np.ndarray:
        return self.values.shape[1] - self.start

    def subset(self, rows: np.ndarray) -> Grid:
        return Grid(
            self.values[rows], self.observed[rows], self.start[rows], self.now[rows], self.last_t[rows],
            [self.notes[i] for i in rows], [self.flags[i] for i in rows],
        )


def check_many(series: Sequence[UtilisationSeries], now: float | None, history_s: float) -> list[UtilisationSeries]:
    """forecasting.quality.check_series on each series: units, order, duplicates and range fixed, with notes."""
    return [quality.check_series(s, now, history_s, Y_MAX) for s in series]


def resample(
    series: Sequence[UtilisationSeries], now: float | None = None, history_s: float = DEFAULT_HISTORY_S,
    robust: bool = True,
) -> Grid:
    """Average each series' finite samples into 5-minute bins ending at ``now`` (per series: its newest
    sample time, NaN value or not, when ``now`` is None), interpolate internal gaps linearly and carry the newest value
    forward over a trailing gap, so that irregular sampling (Alibaba: 10-300 s), jitter (Bitbrains) and
    NaN never reach a model. ``robust``: isolated gross outliers are replaced by their neighbours
    (forecasting.quality.despike), so one corrupt sample neither moves the centre nor sets the band;
    the baselines that stand for other systems take the data as it is (robust=False).
    Series are expected in seconds and sorted (``check_many``); values are clipped to [0, Y_MAX] here too."""
    n = max(1, round(history_s / STEP_S))
    S = len(series)
    values = np.zeros((S, n))
    observed = np.zeros((S, n), dtype=bool)
    start = np.full(S, n, dtype=np.int64)
    nows = np.zeros(S)
    last_t = np.full(S, np.nan)
    notes: list[list[str]] = []
    flags: list[list[str]] = []
    idx_all = np.arange(n)
    for i, s in enumerate(series):
        t, y = s.t, s.y
        note: list[str] = list(s.notes)
        flag: list[str] = list(s.flags)
        flags.append(flag)
        ok = np.isfinite(t) & np.isfinite(y)
        if now is None:
            # the newest sample time, even if its value is NaN: trailing NaNs then show up as sample age
            now_i = float(np.nanmax(t)) if np.isfinite(t).any() else 0.0
        else:
            now_i = float(now)
        nows[i] = now_i
        ok &= t <= now_i
        tf, yf = t[ok], y[ok]
        if len(yf) and (yf.min() < 0.0 or yf.max() > Y_MAX):
            note.append(f"values outside [0, {Y_MAX:g}] clipped")
            flag.append(quality.VALUES_OUT_OF_RANGE)
            yf = np.clip(yf, 0.0, Y_MAX)
        if len(tf):
            last_t[i] = tf.max()
        # bin k back from now: (now-(k+1)*300, now-k*300]; column = n-1-k
        k = np.floor((now_i - tf) / STEP_S).astype(np.int64)
        keep = k < n
        col = (n - 1) - k[keep]
        if col.size == 0:
            note.append("no finite samples in the history window")
            flag.append(quality.NO_DATA)
            notes.append(note)
            continue
        sums = np.bincount(col, weights=yf[keep], minlength=n)
        cnts = np.bincount(col, minlength=n)
        obs = cnts > 0
        first = int(np.argmax(obs))
        vals = np.empty(n)
        vals[obs] = sums[obs] / cnts[obs]
        # np.interp holds the end values constant: that is the leading fill and the trailing carry-forward.
        oi = idx_all[obs]
        vals[~obs] = np.interp(idx_all[~obs], oi, vals[obs])
        values[i] = vals
        observed[i] = obs
        start[i] = first
        gaps = (n - first) - int(obs.sum())
        if gaps > 0:
            note.append(f"{gaps} empty 5-min bins of {n - first} filled by interpolation")
        if obs.sum() < GAPPY_SHARE * (n - first):
            flag.append(quality.GAPPY_HISTORY)
        if n - first < min(DAY_BINS, n):
            note.append(f"only {(n - first) * STEP_S / 3600:.1f} h of history (a day or more is expected)")
            flag.append(quality.SHORT_HISTORY)
        notes.append(note)
    if robust:
        quality.despike(values, observed, notes, flags)
    return Grid(values, observed, start, nows, last_t, notes, flags)


def monotone(q: np.ndarray) -> np.ndarray:
    """Force p50 <= p90 <= p95 <= p99 along the last axis (running maximum) and replace any
    non-finite value, so nothing downstream ever sees NaN or crossing quantiles."""
    q = np.where(np.isfinite(q), q, 0.0)
    return np.maximum.accumulate(q, axis=-1)


def assemble(
    grid: Grid,
    series: Sequence[UtilisationSeries],
    mean: np.ndarray,
    std: np.ndarray,
    quantiles: np.ndarray,
    horizon_s: float,
    model: str | Sequence[str],
    extra_notes: Sequence[list[str]] | None = None,
) -> list[NodeForecast]:
    """Turn per-series arrays into NodeForecasts, guaranteeing finite, non-negative, monotone output.

    ``std`` is replaced by the spread the band implies (formula above ``band_std``): a model's own spread
    (a residual std, say) can disagree with its calibrated, capped quantiles by orders of magnitude, and
    the safe agent and the std-free annotations read std as the band's width. The argument is kept so
    models say what they computed; it is not returned."""
    del std
    mean = np.clip(np.where(np.isfinite(mean), mean, 0.0), 0.0, None)
    q = monotone(np.clip(quantiles, 0.0, None))
    std = band_std(mean, q)
    out: list[NodeForecast] = []
    for i, s in enumerate(series):
        lt = grid.last_t[i]
        age = float(grid.now[i] - lt) if math.isfinite(lt) else math.inf
        notes = list(grid.notes[i])
        if extra_notes is not None:
            notes.extend(extra_notes[i])
        flags = list(grid.flags[i]) if grid.flags else []
        out.append(
            NodeForecast(
                node=s.key,
                resource=s.resource,
                mean=float(mean[i]),
                std=float(std[i]),
                p50=float(q[i, 0]),
                p90=float(q[i, 1]),
                p95=float(q[i, 2]),
                p99=float(q[i, 3]),
                horizon_s=float(horizon_s),
                model=model if isinstance(model, str) else model[i],
                computed_at=float(grid.now[i]),
                newest_sample_age_s=age,
                stale=age > STALE_AFTER_S,
                notes=notes,
                flags=flags,
            )
        )
    return out


# std = max(p95 - mean, 0) / z_0.95: the sd of the Gaussian with this mean and this p95. It is never above
# what the band allows (p95 is capped by the week's top values in the calibrated models) and equals the
# model's sd for the Gaussian baselines, whose p95 is mean + z_0.95 sd.
def band_std(mean: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.maximum(q[:, 2] - mean, 0.0) / Z[2]


def gaussian(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Quantiles of N(mean, std^2): q_p = mean + z_p * std, shape (S, 4)."""
    return mean[:, None] + std[:, None] * Z[None, :]


def horizon_mean_of_future(values: np.ndarray, h: int) -> np.ndarray:
    """For every origin column t, the mean of columns t+1..t+h (NaN where that runs off the end):
    m_t = (C[t+h] - C[t]) / h with C the cumulative sum, so it is O(n)."""
    S, n = values.shape
    c = np.concatenate([np.zeros((S, 1)), np.cumsum(values, axis=1)], axis=1)  # c[:, k] = sum of cols < k
    out = np.full((S, n), np.nan)
    if n - h > 0:
        out[:, : n - h] = (c[:, h + 1 : n + 1] - c[:, 1 : n - h + 1]) / h
    return out


def trailing_mean(values: np.ndarray, w: int) -> np.ndarray:
    """Mean of the last w columns up to and including t (fewer at the start): a rolling window mean."""
    S, n = values.shape
    c = np.concatenate([np.zeros((S, 1)), np.cumsum(values, axis=1)], axis=1)
    idx = np.arange(n)
    lo = np.maximum(idx + 1 - w, 0)
    return (c[:, idx + 1] - c[:, lo]) / (idx + 1 - lo)


class GridForecaster:
    """Base of every model: resample, route too-short series to a simpler fallback, assemble.

    Subclasses implement ``_predict(grid, h, series)`` returning (mean, std, quantiles[S, 4]) for series that
    have at least ``min_bins`` bins of history, and ``rolling_points(grid, h)`` -- the point forecast
    (horizon mean) the model would have made at every past origin, NaN where it did not compute one --
    which split-conformal calibration needs. ``fallback`` is the model class used when the history is
    shorter than ``min_bins`` (a class, not a registry name: the registry sits above the models)."""

    name: str = "base"
    min_bins: int = 1
    fallback: type[GridForecaster] | None = None
    history_s: float = DEFAULT_HISTORY_S
    robust_input: bool = True  # False for the baselines that stand for other systems (see resample)

    def _predict(
        self, grid: Grid, h: int, series: Sequence[UtilisationSeries]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        raise NotImplementedError

    def forecast(self, series: UtilisationSeries, horizon_s: float, now: float | None = None) -> NodeForecast:
        return self.forecast_many([series], horizon_s, now)[0]

    def forecast_many(
        self, series: Sequence[UtilisationSeries], horizon_s: float, now: float | None = None
    ) -> list[NodeForecast]:
        if not series:
            return []
        series = check_many(series, now, self.history_s)
        fcs = self.forecast_grid(resample(series, now, self.history_s, self.robust_input), series, horizon_s)
        quality.record(fcs)
        return fcs

    def forecast_grid(
        self, grid: Grid, series: Sequence[UtilisationSeries], horizon_s: float
    ) -> list[NodeForecast]:
        """Forecast an already-resampled batch (lets wrappers and the benchmark share one resample)."""
        h = horizon_bins(horizon_s)
        hist = grid.history_bins
        enough = hist >= self.min_bins
        result: list[NodeForecast | None] = [None] * len(series)
        if enough.any():
            rows = np.flatnonzero(enough)
            sub = grid.subset(rows)
            sub_series = [series[i] for i in rows]
            mean, std, q = self._predict(sub, h, sub_series)
            fcs = assemble(sub, sub_series, mean, std, q, horizon_s, self.name)
            for r, fc in zip(rows, fcs, strict=True):
                result[r] = fc
        short = np.flatnonzero(~enough)
        if short.size:
            result_short = self._fallback_forecasts(grid, series, short, horizon_s)
            for r, fc in zip(short, result_short, strict=True):
                result[r] = fc
        return [fc for fc in result if fc is not None]

    def _fallback_forecasts(
        self, grid: Grid, series: Sequence[UtilisationSeries], rows: np.ndarray, horizon_s: float
    ) -> list[NodeForecast]:
        sub = grid.subset(rows)
        sub_series = [series[i] for i in rows]
        if sub.n_obs.max(initial=0) == 0 or self.fallback is None:
            # Nothing observed at all: an all-zero, stale forecast is the only NaN-free honest answer.
            z = np.zeros(len(rows))
            fcs = assemble(sub, sub_series, z, z, np.zeros((len(rows), 4)), horizon_s, self.name)
            for fc in fcs:
                fc.stale = True
                fc.notes.append(f"{self.name}: no usable history; zero forecast")
                if quality.NO_DATA not in fc.flags:
                    fc.flags.append(quality.NO_DATA)
            return fcs
        fcs = self.fallback().forecast_grid(sub, sub_series, horizon_s)
        note_fallback(fcs, sub.history_bins, self.name, self.min_bins)
        return fcs


def note_fallback(fcs: Sequence[NodeForecast], history_bins: np.ndarray, model: str, min_bins: int) -> None:
    """Say on each forecast that ``model`` had too little history and which fallback answered, and flag it."""
    for fc, hb in zip(fcs, history_bins, strict=True):
        fc.notes.append(
            f"{model}: only {hb * STEP_S / 3600:.1f} h of history (< {min_bins * STEP_S / 3600:.1f} h"
            f" needed); fell back to {fc.model}"
        )
        if quality.SHORT_HISTORY not in fc.flags:
            fc.flags.append(quality.SHORT_HISTORY)
