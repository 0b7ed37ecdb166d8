"""Input checks and robust cleaning of utilisation series, with a flag, a note and a counter per decision.

Two places use it: ``check_series`` runs on every series a forecaster is given (timestamps in the wrong
unit, unsorted or duplicated, values out of range: fixed, with a note), and ``despike`` runs on the
5-minute grid (``forecasting.models._base.resample``) so that one corrupt sample neither becomes the
band's floor nor moves the centre. Each decision sets a short machine-readable flag on the forecast
(``NodeForecast.flags``, shown in ``kso forecast --json``), a human note, and counts in
``kso_forecast_input_decisions_total{decision}`` (``REGISTRY``; ``record`` counts a batch of forecasts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Counter

from forecasting.types import NodeForecast, UtilisationSeries

# Flags (NodeForecast.flags / UtilisationSeries.flags): what was detected and what was done about it.
TIMESTAMPS_RESCALED = "timestamps-rescaled"  # ms / us / ns timestamps converted to seconds
TIMESTAMPS_UNSORTED = "timestamps-unsorted"  # sorted
TIMESTAMPS_DUPLICATED = "timestamps-duplicated"  # averaged
VALUES_OUT_OF_RANGE = "values-out-of-range"  # negative or above Y_MAX: clipped; infinite: dropped
SPIKE_REMOVED = "spike-removed"  # an isolated gross outlier inside the window: interpolated over
NEWEST_UNCORROBORATED = "newest-uncorroborated"  # newest value an isolated outlier: not used (yet)
SHORT_HISTORY = "short-history"  # less than a day of history (or less than the model needs)
GAPPY_HISTORY = "gappy-history"  # fewer than half the 5-minute bins observed
LAGGING_SAMPLES = "lagging-samples"  # source: steps after the newest sample dropped (partial windows)
NO_DATA = "no-data"
UNCALIBRATED = "uncalibrated"  # too few residuals for the conformal quantiles

REGISTRY = CollectorRegistry()
DECISIONS = Counter("kso_forecast_input_decisions_total",
                    "Forecasts whose input was fixed or marked, by decision (see forecasting.quality)",
                    ["decision"], registry=REGISTRY)

# A 5-minute grid needs samples at least hourly; monitoring systems sample every 1 s .. 5 min.
MAX_STEP_S = 3600.0
MIN_STEP_S = 0.5
EPOCH_S_MAX = 4.0e9  # unix seconds of 2096: a larger "seconds" timestamp is in another unit
UNIT_SCALES = ((1.0, "s"), (1e3, "ms"), (1e6, "us"), (1e9, "ns"))

# Spikes: a value more than SPIKE_FACTOR x both the week's SPIKE_RANK-th largest value (the history cap of
# forecasting.models.conformal: values seen SPIKE_RANK times are a level, not an accident) and the highest of its
# observed neighbours within SPIKE_REACH bins, and above those neighbours by more than SPIKE_NOISE noise
# scales and SPIKE_MIN_JUMP (1 % of capacity: smaller changes are never worth a note). Why both: on
# Bitbrains VMs one-bin bursts 2-3x their neighbours are common and are load (a third of the forecasts had
# one when only the neighbours counted; 7 % with both); a corrupt sample is far above anything in the week.
# The newest bin has only older neighbours: a level shift needs a second bin to corroborate it.
SPIKE_RANK = 6
SPIKE_FACTOR = 2.0
SPIKE_REACH = 2
SPIKE_NOISE = 8.0
SPIKE_MIN_JUMP = 0.01
SPIKE_MIN_BINS = 12  # an hour of observed bins: with less there is nothing to call a value an outlier against


def record(forecasts: Sequence[NodeForecast]) -> None:
    """Count every flag of a batch of forecasts (one increment per forecast and flag)."""
    for fc in forecasts:
        for flag in fc.flags:
            DECISIONS.labels(flag).inc()


def _time_scale(t: np.ndarray, now: float | None, history_s: float) -> tuple[float, str]:
    """The unit of ``t``: the smallest of s / ms / us / ns that puts the median sampling step between
    MIN_STEP_S and MAX_STEP_S and (with ``now``) the newest sample inside the history window, or (without)
    an absolute time before 2096. Seconds when no unit fits (the gap / staleness notes then say why)."""
    d = np.diff(np.sort(t))
    d = d[d > 0]
    if d.size == 0:
        return 1.0, "s"
    step, newest = float(np.median(d)), float(t.max())
    fits = []
    for scale, unit in UNIT_SCALES:
        at = newest / scale
        where_ok = (now - history_s <= at <= now + 300.0) if now is not None else (at <= EPOCH_S_MAX)
        if where_ok:
            fits.append((scale, unit, MIN_STEP_S <= step / scale <= MAX_STEP_S))
    for scale, unit, step_ok in fits:
        if step_ok:
            return scale, unit
    return (fits[0][0], fits[0][1]) if fits else (1.0, "s")


def _looks_clean(t: np.ndarray, y: np.ndarray, now: float | None, history_s: float, y_max: float) -> bool:
    """The common case, cheaply: strictly increasing finite seconds at a plausible mean step, values in range.
    (Comparisons with NaN are False, so missing values pass and NaN timestamps fail.)"""
    if len(t) < 2 or not bool(np.diff(t).min() > 0):
        return len(t) < 2 and bool(np.isfinite(t).all()) and not bool(np.isinf(y).any() or (y < 0).any())
    step = (t[-1] - t[0]) / (len(t) - 1)
    if not MIN_STEP_S <= step <= MAX_STEP_S:
        return False
    if now is not None and not now - history_s - MAX_STEP_S <= t[-1] <= now + 300.0:
        return False
    if now is None and t[-1] > EPOCH_S_MAX:
        return False
    return not bool(np.isinf(y).any() or (y < 0).any() or (y > y_max).any())


def check_series(s: UtilisationSeries, now: float | None, history_s: float, y_max: float) -> UtilisationSeries:
    """``s`` in seconds, sorted, one value per timestamp (duplicates averaged), values in [0, y_max]
    (infinite ones dropped); the same object when nothing needed fixing, else a copy with notes and flags."""
    t, y = s.t, s.y
    if _looks_clean(t, y, now, history_s, y_max):
        return s
    notes, flags = list(s.notes), list(s.flags)
    fin_t = np.isfinite(t)
    if fin_t.sum() >= 2:
        scale, unit = _time_scale(t[fin_t], now, history_s)
        if scale != 1.0:
            t = t / scale
            notes.append(f"timestamps look like {unit} (median step {np.median(np.diff(np.sort(s.t[fin_t]))):.3g}); "
                         f"divided by {scale:g}")
            flags.append(TIMESTAMPS_RESCALED)
    if np.any(np.diff(t[fin_t]) < 0):
        order = np.argsort(t, kind="stable")
        notes.append(f"{int(np.sum(np.diff(t[fin_t]) < 0))} timestamps out of order; sorted")
        flags.append(TIMESTAMPS_UNSORTED)
        t, y = t[order], y[order]
    fin_t = np.isfinite(t)
    dup = np.concatenate([[False], np.diff(t) == 0]) & fin_t
    if dup.any():
        # mean of the finite values per timestamp (a duplicated timestamp is one sample reported twice)
        uniq, inv = np.unique(t[fin_t], return_inverse=True)
        yy = y[fin_t]
        ok = np.isfinite(yy)
        sums = np.bincount(inv, weights=np.where(ok, yy, 0.0), minlength=len(uniq))
        cnt = np.bincount(inv, weights=ok.astype(float), minlength=len(uniq))
        with np.errstate(invalid="ignore"):
            y = np.where(cnt > 0, sums / np.maximum(cnt, 1), math.nan)
        t = uniq
        notes.append(f"{int(dup.sum())} duplicated timestamps; their values averaged")
        flags.append(TIMESTAMPS_DUPLICATED)
    inf = np.isinf(y)
    if inf.any():
        y = np.where(inf, math.nan, y)
        notes.append(f"{int(inf.sum())} infinite values dropped")
    fin_y = np.isfinite(y)
    low, high = int(np.sum(y[fin_y] < 0.0)), int(np.sum(y[fin_y] > y_max))
    if low or high:
        y = np.where(fin_y, np.clip(y, 0.0, y_max), y)
        notes.append(f"values outside [0, {y_max:g}] clipped ({low} below, {high} above)")
    if inf.any() or low or high:
        flags.append(VALUES_OUT_OF_RANGE)
    if len(flags) == len(s.flags):
        return s
    return UtilisationSeries(s.key, s.resource, t, y, s.capacity, notes=notes, flags=list(dict.fromkeys(flags)))


# spike at column c of row s: v > SPIKE_FACTOR * max(kth_s, nb, 0) (kth_s: the week's SPIKE_RANK-th largest) and
# v - nb > max(SPIKE_NOISE * noise_s, SPIKE_MIN_JUMP), nb = max of the observed values within SPIKE_REACH
# columns (c excluded), noise_s = 1.2533 * mean |y_k - y_{k-1}| over observed neighbours (the sd of Gaussian
# steps; a handful of spikes add little to a mean over ~2,000 steps, and a median costs 10x more)
def spike_mask(values: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """(S, n) bool: isolated gross outliers, as defined above (the formula). The neighbour test runs on the
    whole grid (a few vectorised passes); the week's top values and the noise only for the few rows it
    leaves."""
    S, n = values.shape
    judged = observed.sum(axis=1) >= SPIKE_MIN_BINS
    obs_v = np.where(observed, values, -np.inf)
    nb = np.full((S, n), -np.inf)
    for off in range(1, SPIKE_REACH + 1):
        np.maximum(nb[:, off:], obs_v[:, :-off], out=nb[:, off:])
        np.maximum(nb[:, :-off], obs_v[:, off:], out=nb[:, :-off])
    with np.errstate(invalid="ignore"):
        cand = (obs_v > SPIKE_FACTOR * np.maximum(nb, 0.0)) & (obs_v - nb > SPIKE_MIN_JUMP) & np.isfinite(nb)
    cand &= judged[:, None]
    out = np.zeros((S, n), dtype=bool)
    rs = np.flatnonzero(cand.any(axis=1))
    if rs.size == 0:
        return out
    k = min(SPIKE_RANK, n)
    kth = -np.partition(-obs_v[rs], k - 1, axis=1)[:, k - 1]
    v = values[rs]
    both = observed[rs, 1:] & observed[rs, :-1]
    pairs = both.sum(axis=1)
    noise = 1.2533 * np.where(both, np.abs(np.diff(v, axis=1)), 0.0).sum(axis=1) / np.maximum(pairs, 1)
    with np.errstate(invalid="ignore"):
        out[rs] = cand[rs] & (v > SPIKE_FACTOR * np.maximum(kth, 0.0)[:, None]) & (v - nb[rs] > SPIKE_NOISE * noise[:, None])
    return out


def despike(values: np.ndarray, observed: np.ndarray, notes: list[list[str]], flags: list[list[str]]) -> None:
    """Mark spikes (``spike_mask``) unobserved and re-fill them from their neighbours, in place, with a
    note and a flag per series. The newest bin, if a spike, takes the previous value: the floor of the
    band and the centre then wait for a second sample to confirm a jump."""
    mask = spike_mask(values, observed)
    if not mask.any():
        return
    n = values.shape[1]
    idx = np.arange(n)
    for r in np.flatnonzero(mask.any(axis=1)):
        bad = np.flatnonzero(mask[r])
        raw = values[r, bad].copy()
        observed[r, bad] = False
        obs = observed[r]
        if obs.any():
            values[r, ~obs] = np.interp(idx[~obs], idx[obs], values[r, obs])
        if bad[-1] == n - 1:
            notes[r].append(f"newest 5-min value {raw[-1]:.4g} is an isolated outlier (neighbours <= "
                            f"{values[r, -1]:.4g}); not used until a second sample confirms it")
            flags[r].append(NEWEST_UNCORROBORATED)
            raw, bad = raw[:-1], bad[:-1]
        if bad.size:
            ago = ", ".join(f"{(n - 1 - b) * 5} min ago = {x:.4g}" for b, x in zip(bad, raw, strict=True))
            notes[r].append(f"{bad.size} isolated outlier(s) replaced by their neighbours ({ago})")
            flags[r].append(SPIKE_REMOVED)
