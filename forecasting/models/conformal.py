"""Split-conformal calibration of a forecaster's upper quantiles on each series' own recent residuals.

For every recent origin t (rolling over the last ``window_bins`` 5-minute bins that have a complete
future) the base model's point forecast of the horizon mean, point_t, is compared with each 5-minute value
of the following horizon: scores r_{t,j} = (y_{t+j} - point_t) / sigma_t, j = 1..H. This is exactly the
forecast target (see ``forecasting.models._base``), so if future windows behave like recent ones,
point_T + sigma_T * (empirical q-quantile of the scores) is exceeded by a fraction ~1-q of future
5-minute values. The finite-sample correction takes the ceil((n+1) q)-th smallest of n scores.

sigma_t is the recent 5-minute volatility (locally adaptive / normalised conformal): with it the band is
narrow in calm stretches and wide in bursts, which lowered the p95 pinball loss on Bitbrains by ~5 %
at equal coverage; its memory is chosen per series (1 h, 15 min or 3 h: ALT_HALF_LIVES_BINS, _choose_scale).
``scale_half_life_bins=None`` gives plain residuals (sigma = 1), i.e. point + residual
quantile. Scores within a window are correlated, so the guarantee is approximate; the benchmark
measures the coverage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from forecasting import quality
from forecasting.models._base import (
    DAY_BINS,
    QUANTILES,
    Grid,
    GridForecaster,
    assemble,
    horizon_bins,
    note_fallback,
)
from forecasting.models.ewma import EWMAForecaster, ewma_filter
from forecasting.models.last_value import LastValueForecaster
from forecasting.types import NodeForecast, UtilisationSeries

# four days of origins: several daily cycles; 4 d beat 1 d and 2 d on the benchmark (more, correlated,
# scores make the upper quantiles less noisy) and 6 d did not help further
WINDOW_BINS = 4 * DAY_BINS
SCALE_HALF_LIFE_BINS = 12.0  # local volatility memory: 1 h, the burst time-scale of the Bitbrains VMs
SCALE_FLOOR = 0.1  # sigma floor as a share of the series' median sigma: quiet stretches do not divide by ~0
MIN_SCORES = 30  # fewer residuals than this -> keep the model's own quantiles and say so
# Quantiles are capped at the CAP_RANK-th largest 5-minute value of the history (the week's top half hour)
# or the point forecast if higher. Why: a normalised score from a calm stretch (sigma near its floor) that
# met a jump is huge; times the volatility just after a jump it put p95 at 10x a cpu series that never
# exceeds 1.05 (saturated Bitbrains VMs), and one corrupt sample (memory at 1000x provisioned) blew up
# the band for days. Measured on held-out origins (benchmarks/forecast_accuracy.py): p95 pinball -2 to -12 %
# at unchanged coverage; ranks 3-12 were level, 1 (the plain max) kept the corrupt samples.
CAP_RANK = 6
# p99 is capped at the week's largest value (rank 1), not the 6th: with the 6th, p99 = p95 whenever the cap
# binds, and Google tasks' p99 coverage stayed at their p95's (96-97 %). Corrupt samples no longer reach the
# grid (forecasting.quality.despike). Tuning part: p99 coverage +1.5 to +2.5 points on Google and Alibaba
# memory, p95 pinball unchanged (it does not depend on p99).
P99_CAP_RANK = 1
# The cap is lifted by how much it rose over the last CAP_LIFT_HORIZONS horizons: cap_T + max(0, cap_T -
# cap_{T-L}), L = the horizon in bins. Why: a task's memory climbing after a restart sets a new top value
# every few minutes, so a cap from the past pinned p95 = p99 = the newest value and the whole next hour lay
# above it (Google 2019 p95 coverage 74-77 %). The lift is zero for a series whose top values are old (a
# week of steady load), and equals the recent climb for a ramp or a level shift that the window confirms
# (k values above the old cap). Tuning part (benchmarks/forecast_accuracy.py; HISTORY.md): Google memory p95
# pinball -8 to -12 %, p95 coverage +0.7 to +1.1 points; Google tasks in their first 60 h (every 30 min
# after each start inside the tuning span) coverage +0.5 to +1 point; Bitbrains unchanged, Alibaba and
# Google cpu pinball +0 to +1 %. A lift of two horizons was no better; the cap's rank scaled to short
# histories was worse on Alibaba cpu (+2 %).
CAP_LIFT_HORIZONS = 1.0
# Upper quantiles (q >= FLOOR_FROM_Q) are never below the newest 5-minute value. Why: a series persists,
# so about half of the next values are at or above the current one; a p95 below it claims a >95 % chance
# of a fall. The smoothed point forecast lags a series that has just jumped (Bitbrains VMs switching
# between idle and saturated), and the band around it then missed the whole next hour. Measured on
# held-out origins: p95 pinball -1 to -7 % in every dataset x horizon cell, coverage +0.2 points.
FLOOR_FROM_Q = 0.9
# The lift is at least CAP_TREND x the cap's average climb per horizon over the series' history: (k-th largest
# value of the whole history - k-th largest of its older half) / half its length x h. Why: a young or
# restarted task's memory climbs in steps (Google 2019: +0.02 to +0.05 within an hour, a few hours apart), so
# between steps the last horizon's lift is 0 and the cap pinned p95 just above the newest value: the capped
# rows of climbing tasks in their first 16 h covered 79-86 % (young-task tuning set, the cap bound in two
# thirds of them). A series without a climb has the same top values in both halves, and over a week any climb
# is spread over ~1,000 bins: the term is near 0. The factor was chosen on the tuning part and the young-task
# set (benchmarks/forecast_accuracy.py --part tune / young; the runs: HISTORY.md).
CAP_TREND = 2.0
# The local scale's memory is chosen per series: SCALE_HALF_LIFE_BINS, or one of ALT_HALF_LIVES_BINS (15 min, 3 h)
# if its calibrated p95 had a pinball loss over the window's origins lower by more than ALT_MARGIN (window_pinball,
# every SCALE_CHOICE_STRIDE-th origin: neighbouring origins share most of their future values, and the full
# criterion made the 1,000-node call 4x slower). Why: one memory does not fit every series; a series with short
# bursts every few hours or a calm one that steps are served by another than 1 h. Tuning part
# (benchmarks/forecast_accuracy.py --part tune): Bitbrains pin95 -1.2 to -6.6 %, Alibaba -1.2 to +0.3 %, Google -0.1
# to -1.7 % (within the bootstrap noise), coverage within 0.1 point; with a 5 % margin Bitbrains gained more
# (-2.8 to -11.4 %) but Alibaba memory lost 1 % beyond the noise; a single global 15-min memory cost Bitbrains
# +9 to +18 %.
ALT_HALF_LIVES_BINS = (3.0, 36.0)
ALT_MARGIN = 0.1
SCALE_CHOICE_STRIDE = 4


# rank k = ceil((n + 1) q) (1-based) of n sorted scores, capped at n: the split-conformal quantile
def conformal_rank(n: np.ndarray, q: float) -> np.ndarray:
    k = np.ceil((n + 1) * q - 1e-12).astype(np.int64)
    return np.clip(k, 1, np.maximum(n, 1))


# sigma_t = sqrt(EWMA_t of (y_k - y_{k-1})^2) + floor: the recent 5-minute volatility at origin t
def local_scale(values: np.ndarray, half_life_bins: float) -> np.ndarray:
    """Normalising scale for locally adaptive conformal scores: bursty series (Bitbrains) have calm
    and volatile stretches, and a band sized by the whole window is too wide in one, too narrow in the
    other. The floor keeps constant stretches from dividing by zero."""
    alpha = 1.0 - 2.0 ** (-1.0 / half_life_bins)
    d2 = np.zeros_like(values)
    d2[:, 1:] = np.diff(values, axis=1) ** 2
    sig = np.sqrt(np.clip(ewma_filter(d2, alpha), 0.0, None))
    floor = SCALE_FLOOR * np.median(sig, axis=1, keepdims=True) + 1e-6
    return sig + floor


def score_window(n: int, h: int, window_bins: int) -> tuple[int, int]:
    """Origins [lo, hi) that are scored: t < hi = n - h have all of t+1..t+h inside the history."""
    hi = n - h
    return max(hi - window_bins, 0), hi


def residual_scores(
    grid: Grid, points: np.ndarray, h: int, window_bins: int, burn_in: int, sigma: np.ndarray | None = None,
    stride: int = 1,
) -> np.ndarray:
    """Scores r_{t,j} = (y_{t+j} - point_t) / sigma_t over the last ``window_bins`` origins with a complete future
    (every ``stride``-th of them, the newest included), shape (S, W * h); NaN where the origin is in the model's
    burn-in or y_{t+j} was not observed."""
    v = grid.values
    S, n = v.shape
    lo, hi = score_window(n, h, window_bins)
    if hi <= lo:
        return np.full((S, 0), np.nan)
    lo += (hi - 1 - lo) % stride
    cols = np.arange(lo, hi, stride)
    ok_origin = (cols[None, :] >= (grid.start + burn_in)[:, None]) & np.isfinite(points[:, lo:hi:stride])
    # (S, h, W) so every write below is contiguous; the pooled order of scores does not matter
    out = np.empty((S, h, len(cols)))
    scale = np.ones((S, len(cols))) if sigma is None else sigma[:, lo:hi:stride]
    for j in range(1, h + 1):
        r = (v[:, lo + j : hi + j : stride] - points[:, lo:hi:stride]) / scale
        out[:, j - 1, :] = np.where(ok_origin & grid.observed[:, lo + j : hi + j : stride], r, np.nan)
    return out.reshape(S, -1)


def conformal_quantiles(scores: np.ndarray, qs: Sequence[float] = QUANTILES) -> tuple[np.ndarray, np.ndarray]:
    """Per-row conformal score quantiles (S, len(qs)) and the number of finite scores per row.

    Uses np.partition (linear time) per group of rows with the same score count, instead of a full
    sort: it is the dominant cost of calibrating 1,000 series."""
    S, m = scores.shape
    fin = np.isfinite(scores)
    n = fin.sum(axis=1)
    out = np.zeros((S, len(qs)))
    if m == 0:
        return out, n
    filled = np.where(fin, scores, np.inf)  # missing scores rank last
    groups = np.unique(n)
    for n_val in groups:
        if n_val == 0:
            continue
        ks = [int(conformal_rank(np.array([n_val]), q)[0]) - 1 for q in qs]
        if len(groups) == 1:  # the usual case: partition in place, no row gather
            filled.partition(sorted(set(ks)), axis=1)
            out[:] = filled[:, ks]
            break
        rows = np.flatnonzero(n == n_val)
        part = filled[rows]
        part.partition(sorted(set(ks)), axis=1)
        out[rows] = part[:, ks]
    return out, n


# kth(v, k) = the k-th largest observed 5-minute value;  lift_s = max(0, kth(v_s, k) - kth(v_s[: n - L], k),
# trend x L x (kth(v_s, k) - kth(v_s[: m_s], k)) / (n - m_s)) with m_s the middle of the series' observed history:
# the climb of the cap over the last L bins, or its average climb over the history;
# cap_s = max(point_s, kth(v_s, k)) if lift_s = 0, else max(point_s, max(kth(v_s, k), y_T) + lift_s)
def history_cap(grid: Grid, point: np.ndarray, rank: int, lift_bins: int = 0, trend: float = 0.0) -> np.ndarray:
    """Upper limit for a series' quantiles: nothing in the week went above it more than ``rank - 1``
    times, so a band above it is the calibration's artefact, not the data's -- unless the series is
    climbing: then the cap rises by as much as it rose over the last ``lift_bins`` (CAP_LIFT_HORIZONS), or
    by ``trend`` x its average climb per ``lift_bins`` over the history (CAP_TREND), whichever is larger."""
    v = np.where(grid.observed, grid.values, -np.inf)
    n = v.shape[1]
    k = min(max(rank, 1), n)
    kth = -np.partition(-v, k - 1, axis=1)[:, k - 1]
    cap = np.where(np.isfinite(kth), kth, point)
    lift = np.zeros(len(cap))
    if lift_bins > 0 and n - lift_bins >= k:
        old = -np.partition(-v[:, : n - lift_bins], k - 1, axis=1)[:, k - 1]
        ok = np.isfinite(old) & np.isfinite(kth)
        lift = np.clip(np.where(ok, kth, 0.0) - np.where(ok, old, 0.0), 0.0, None)
    if lift_bins > 0 and trend > 0 and n >= 2 * k:
        mid = (grid.start + n) // 2
        older = np.where(np.arange(n)[None, :] < mid[:, None], v, -np.inf)
        kth_old = -np.partition(-older, k - 1, axis=1)[:, k - 1]
        ok = np.isfinite(kth_old) & np.isfinite(kth)
        climb = np.clip(np.where(ok, kth, 0.0) - np.where(ok, kth_old, 0.0), 0.0, None)
        lift = np.maximum(lift, trend * lift_bins * climb / np.maximum(n - mid, 1))
    # a climbing series is at its top now, and the k-th largest value lags it by about k bins: the climb
    # is extrapolated from the newest value (young-task tuning set: p95 coverage of climbing memory in
    # its first 4 h 64 -> 73 %, pinball -1 to -21 %; the other tuning cells within 0.2 %)
    cap = np.where(lift > 0, np.maximum(cap, grid.values[:, -1]) + lift, cap)
    return np.maximum(cap, point)


def score_std(scores: np.ndarray) -> np.ndarray:
    """Standard deviation of each row's finite scores, 0 with fewer than two."""
    fin = np.isfinite(scores)
    n = fin.sum(axis=1)
    x = np.where(fin, scores, 0.0)
    mean = x.sum(axis=1) / np.maximum(n, 1)
    var = (x * x).sum(axis=1) / np.maximum(n, 1) - mean * mean
    return np.where(n > 1, np.sqrt(np.clip(var, 0.0, None)), 0.0)


class ConformalForecaster(GridForecaster):
    """Wraps a grid model: same point forecast (mean), quantiles = point + conformal residual quantile."""

    def __init__(
        self,
        base: GridForecaster,
        window_bins: int = WINDOW_BINS,
        scale_half_life_bins: float | None = SCALE_HALF_LIFE_BINS,
        cap_rank: int | None = CAP_RANK,
        floor_last: bool = True,
        cap_lift_horizons: float = CAP_LIFT_HORIZONS,
        p99_cap_rank: int | None = P99_CAP_RANK,
        cap_trend: float = CAP_TREND,
        alt_half_life_bins: float = ALT_HALF_LIVES_BINS[0],
        alt_margin: float = ALT_MARGIN,
        alt2_half_life_bins: float = ALT_HALF_LIVES_BINS[1],
        fallback_half_life: float | None = None,
        fallback_cpu_half_life: float | None = None,
    ) -> None:
        self.fallback_half_life = fallback_half_life
        self.fallback_cpu_half_life = fallback_cpu_half_life
        self.base = base
        self.alt_half_life_bins = alt_half_life_bins
        self.alt_margin = alt_margin
        self.alt2_half_life_bins = alt2_half_life_bins
        self.window_bins = int(window_bins)
        self.scale_half_life_bins = scale_half_life_bins
        self.cap_rank = cap_rank
        self.floor_last = floor_last
        self.cap_lift_horizons = cap_lift_horizons
        self.p99_cap_rank = p99_cap_rank
        self.cap_trend = cap_trend
        self.name = f"{base.name}+conformal"
        self.min_bins = base.min_bins
        self.fallback = base.fallback
        self.history_s = base.history_s

    def forecast_grid(self, grid: Grid, series: Sequence[UtilisationSeries], horizon_s: float) -> list[NodeForecast]:
        h = horizon_bins(horizon_s)
        enough = grid.history_bins >= self.min_bins
        result: list[NodeForecast | None] = [None] * len(series)
        rows = np.flatnonzero(enough)
        if rows.size:
            sub = grid.subset(rows)
            sub_series = [series[i] for i in rows]
            for r, fc in zip(rows, self._calibrate(sub, sub_series, h, horizon_s), strict=True):
                result[r] = fc
        short = np.flatnonzero(~enough)
        if short.size:
            sub = grid.subset(short)
            sub_series = [series[i] for i in short]
            if self.fallback is not None and sub.n_obs.max(initial=0) > 0:
                # cpu rows may take their own fallback centre (fallback_cpu_half_life; a candidate, off by default)
                cpu = np.array([s.resource == "cpu" for s in sub_series]) & (self.fallback_cpu_half_life is not None)
                fcs_by: list[NodeForecast | None] = [None] * len(sub_series)
                for part, hl in ((~cpu, self.fallback_half_life), (cpu, self.fallback_cpu_half_life)):
                    idx = np.flatnonzero(part)
                    if idx.size:
                        part_fcs = self._short_calibrator(hl).forecast_grid(
                            sub.subset(idx), [sub_series[i] for i in idx], horizon_s)
                        for i, fc in zip(idx, part_fcs, strict=True):
                            fcs_by[i] = fc
                fcs = [fc for fc in fcs_by if fc is not None]
                note_fallback(fcs, sub.history_bins, self.name.removesuffix("+conformal"), self.min_bins)
            else:
                fcs = self.base.forecast_grid(sub, sub_series, horizon_s)
            for r, fc in zip(short, fcs, strict=True):
                result[r] = fc
        return [fc for fc in result if fc is not None]

    def _short_calibrator(self, half_life: float | None) -> ConformalForecaster:
        """The same calibration (every setting of this one) around the fallback model, for short histories;
        ``half_life``: None = the base model's fallback, 0 = the last value, else an EWMA with that half-life."""
        assert self.fallback is not None
        fb: GridForecaster
        if half_life is None:
            fb = self.fallback()
        elif half_life > 0:
            fb = EWMAForecaster(half_life_bins=half_life)
        else:
            fb = LastValueForecaster()
        cal = ConformalForecaster.__new__(ConformalForecaster)  # a plain calibration, also under a subclass
        cal.__dict__.update(self.__dict__)
        cal.base, cal.name, cal.min_bins, cal.fallback = fb, f"{fb.name}+conformal", fb.min_bins, fb.fallback
        return cal

    # mean = point_T;  q_p = min(cap, point_T + sigma_T r_(ceil((n+1) p))) with r = (y_{t+j} - point_t) / sigma_t
    # and cap = history_cap, then q_p = max(q_p, y_T) for p >= FLOOR_FROM_Q (see bound_quantiles);
    # std = (p95 - mean) / 1.645 (models._base.band_std): the spread of the calibrated band, not of the scores
    def _calibrate(
        self, grid: Grid, series: Sequence[UtilisationSeries], h: int, horizon_s: float
    ) -> list[NodeForecast]:
        points = self.base.rolling_points(grid, h)
        point = points[:, -1]
        burn_in = getattr(self.base, "burn_in_bins", self.base.min_bins)
        sigma = (
            local_scale(grid.values, self.scale_half_life_bins)
            if self.scale_half_life_bins is not None
            else np.ones_like(grid.values)
        )
        scores = residual_scores(grid, points, h, self.window_bins, burn_in, sigma)
        qscore, n = conformal_quantiles(scores)
        alts = [a for a in (self.alt_half_life_bins, self.alt2_half_life_bins) if a > 0]
        if alts and self.scale_half_life_bins is not None and scores.shape[1]:
            sigma, qscore = self._choose_scale(grid, points, h, burn_in, sigma, scores, qscore, alts)
        q = point[:, None] + sigma[:, -1:] * qscore
        std = np.zeros(len(point))  # replaced by the band's spread in assemble
        notes: list[list[str]] = [[] for _ in series]
        few = n < MIN_SCORES
        models = [self.name] * len(series)
        if few.any():
            # Too few residuals to trust an empirical 99th percentile: keep the model's own spread.
            rows = np.flatnonzero(few)
            raw = self.base.forecast_grid(grid.subset(rows), [series[i] for i in rows], horizon_s)
            for r, fc in zip(rows, raw, strict=True):
                q[r] = [fc.p50, fc.p90, fc.p95, fc.p99]
                std[r] = fc.std
                point[r] = fc.mean
                models[r] = fc.model
                notes[r].append(f"{self.name}: only {int(n[r])} residuals (< {MIN_SCORES}); uncalibrated quantiles")
                notes[r].extend(x for x in fc.notes if x not in grid.notes[r])
        # the cap and floor for the uncalibrated rows too: a smoothed centre that lags a ramp (a task's memory
        # just after it restarts) put the model's own p95 below the newest value on Google 2019 tasks
        q = self.bound_quantiles(grid, point, q, h)
        fcs = assemble(grid, series, point, std, q, horizon_s, models, notes)
        for r in np.flatnonzero(few):
            fcs[r].flags.append(quality.UNCALIBRATED)
        return fcs

    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        return self.base.rolling_points(grid, h)

    # per series: the half-life whose calibrated p95 had the lowest pinball over the window's origins (every
    # SCALE_CHOICE_STRIDE-th), an alternative only if lower by more than alt_margin; chosen rows recalibrated
    def _choose_scale(self, grid: Grid, points: np.ndarray, h: int, burn_in: int, sigma: np.ndarray,
                      scores: np.ndarray, qscore: np.ndarray, alts: list[float]) -> tuple[np.ndarray, np.ndarray]:
        S, n = grid.values.shape
        k = SCALE_CHOICE_STRIDE
        lo, hi = score_window(n, h, self.window_bins)
        off = (hi - 1 - lo) % k
        W = hi - lo
        sub = scores.reshape(S, h, W)[:, :, off::k].reshape(S, -1)
        best = window_pinball(sub, qscore[:, 2], sigma[:, lo + off : hi : k], h)
        choice = np.zeros(S, dtype=np.int64)
        for i, a in enumerate(alts, start=1):
            sig2 = local_scale(grid.values, a)
            sc2 = residual_scores(grid, points, h, self.window_bins, burn_in, sig2, stride=k)
            q2, n2 = conformal_quantiles(sc2, (0.95,))
            loss2 = window_pinball(sc2, q2[:, 0], sig2[:, lo + off : hi : k], h)
            better = (loss2 < (1.0 - self.alt_margin) * best) & (n2 * k >= MIN_SCORES)
            best = np.where(better, loss2, best)
            choice = np.where(better, i, choice)
        sigma, qscore = sigma.copy(), qscore.copy()
        for i, a in enumerate(alts, start=1):
            rows = np.flatnonzero(choice == i)
            if rows.size:
                g = grid.subset(rows)
                sig2 = local_scale(g.values, a)
                q2, _ = conformal_quantiles(residual_scores(g, points[rows], h, self.window_bins, burn_in, sig2))
                sigma[rows], qscore[rows] = sig2, q2
        return sigma, qscore

    # q_p = min(q_p, cap) (cap = history_cap: rank CAP_RANK for p50-p95, P99_CAP_RANK for p99; both lifted by
    # the climb over the last CAP_LIFT_HORIZONS x h bins or CAP_TREND x the average climb), then
    # q_p = max(q_p, y_T) for p >= FLOOR_FROM_Q
    def bound_quantiles(self, grid: Grid, point: np.ndarray, q: np.ndarray, h: int) -> np.ndarray:
        """The history cap and the newest-value floor (module constants say why); the floor wins."""
        if self.cap_rank is not None:
            lift = round(self.cap_lift_horizons * h)
            cap = history_cap(grid, point, self.cap_rank, lift, self.cap_trend)
            cap99 = cap if self.p99_cap_rank is None else history_cap(grid, point, self.p99_cap_rank, lift,
                                                                      self.cap_trend)
            q = np.minimum(q, np.stack([cap, cap, cap, cap99], axis=1))
        if self.floor_last:
            upper = np.array(QUANTILES) >= FLOOR_FROM_Q
            q = np.where(upper[None, :], np.maximum(q, grid.values[:, -1:]), q)
        return q


# loss_s = mean over scores of sigma_t * rho_0.95(r_{t,j} - Q_0.95), rho_q(d) = max(q d, (q - 1) d):
# the pinball loss, in utilisation units, the calibrated p95 of a candidate would have had on the window
def window_pinball(scores: np.ndarray, q95: np.ndarray, sig_win: np.ndarray, h: int) -> np.ndarray:
    d = scores - q95[:, None]
    rho = np.maximum(0.95 * d, -0.05 * d) * np.tile(sig_win, (1, h))  # scores are (S, h * W), j-major
    fin = np.isfinite(rho)
    n = fin.sum(axis=1)
    return np.where(n > 0, np.where(fin, rho, 0.0).sum(axis=1) / np.maximum(n, 1), np.inf)


class SelectingConformalForecaster(ConformalForecaster):
    """Per series, the point model whose calibrated p95 had the lowest pinball loss in a rolling backtest
    on the series' own history, then calibrated as in ConformalForecaster on the whole window.

    Why: the traces mix series whose best centre differs -- bursty Bitbrains VMs are best served by the
    last value, smooth daily Alibaba machines by Holt-Winters, repeating daily jobs by yesterday's values.
    The backtest is out of sample: each candidate is calibrated on the window's older origins and scored
    on its newest ``holdout_bins`` origins (choosing on the calibration scores themselves favours the
    candidate whose band happened to fit them)."""

    def __init__(
        self,
        candidates: Sequence[GridForecaster],
        window_bins: int = WINDOW_BINS,
        scale_half_life_bins: float | None = SCALE_HALF_LIFE_BINS,
        fallback: type[GridForecaster] = LastValueForecaster,
        holdout_bins: int = DAY_BINS,
        name: str = "auto+conformal",
    ) -> None:
        super().__init__(candidates[0], window_bins, scale_half_life_bins)
        self.candidates = list(candidates)
        self.holdout_bins = holdout_bins
        self.name = name
        self.min_bins = max(c.min_bins for c in self.candidates)
        self.fallback = fallback  # short histories: the calibrated fallback (a single model)

    def _calibrate(
        self, grid: Grid, series: Sequence[UtilisationSeries], h: int, horizon_s: float
    ) -> list[NodeForecast]:
        S, n_cols = grid.values.shape
        sigma = (
            local_scale(grid.values, self.scale_half_life_bins)
            if self.scale_half_life_bins is not None
            else np.ones_like(grid.values)
        )
        lo, hi = score_window(n_cols, h, self.window_bins)
        best_loss = np.full(S, np.inf)
        point = grid.values[:, -1].copy()
        q = np.repeat(point[:, None], len(QUANTILES), axis=1)
        std = np.zeros(S)
        n_best = np.zeros(S, dtype=np.int64)
        chosen = np.zeros(S, dtype=np.int64)
        for ci, cand in enumerate(self.candidates):
            points = cand.rolling_points(grid, h)
            burn_in = getattr(cand, "burn_in_bins", cand.min_bins)
            scores = residual_scores(grid, points, h, self.window_bins, burn_in, sigma)
            qscore, n = conformal_quantiles(scores)
            loss = self._backtest(scores, sigma[:, lo:hi], h) if self.holdout_bins else window_pinball(
                scores, qscore[:, 2], sigma[:, lo:hi], h)
            better = (loss < best_loss) & (n >= MIN_SCORES)
            best_loss = np.where(better, loss, best_loss)
            point = np.where(better, points[:, -1], point)
            q = np.where(better[:, None], points[:, -1:] + sigma[:, -1:] * qscore, q)
            std = np.where(better, score_std(scores) * sigma[:, -1], std)
            n_best = np.where(better, n, n_best)
            chosen = np.where(better, ci, chosen)
        notes = [[f"{self.name}: point model {self.candidates[c].name}"] for c in chosen]
        few = ~np.isfinite(best_loss)
        models = [self.name] * S
        if few.any():
            # No candidate had enough residuals: the first candidate's own quantiles, flagged.
            rows = np.flatnonzero(few)
            raw = self.candidates[0].forecast_grid(grid.subset(rows), [series[i] for i in rows], horizon_s)
            for r, fc in zip(rows, raw, strict=True):
                q[r] = [fc.p50, fc.p90, fc.p95, fc.p99]
                std[r], point[r], models[r] = fc.std, fc.mean, fc.model
                notes[r] = [f"{self.name}: fewer than {MIN_SCORES} residuals; uncalibrated quantiles"]
        q = self.bound_quantiles(grid, point, q, h)
        return assemble(grid, series, point, std, q, horizon_s, models, notes)

    def _backtest(self, scores: np.ndarray, sig_win: np.ndarray, h: int) -> np.ndarray:
        """p95 pinball loss on the newest holdout_bins origins of a band calibrated on the older ones
        (inf where either part has fewer than MIN_SCORES scores)."""
        S, W = sig_win.shape
        by_origin = scores.reshape(S, h, W)
        cut = max(W - self.holdout_bins, 0)
        q_old, n_old = conformal_quantiles(by_origin[:, :, :cut].reshape(S, -1), (0.95,))
        new = by_origin[:, :, cut:].reshape(S, -1)
        loss = window_pinball(new, q_old[:, 0], sig_win[:, cut:], h)
        return np.where((n_old >= MIN_SCORES) & (np.isfinite(new).sum(axis=1) >= MIN_SCORES), loss, np.inf)
