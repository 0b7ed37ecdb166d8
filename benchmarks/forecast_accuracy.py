"""Rolling-origin accuracy of the utilisation forecasters on real traces, with statsforecast as a peer.

    python -m benchmarks.forecast_accuracy [--vms N] [--origins K] [--quick] [--no-library]

Target (same as the models, see ``forecasting.models._base``): the 5-minute bin means of a series in
the ``horizon`` after each origin. Metrics per dataset x resource x horizon cell, pooled over series x
origins x future bins:
  MAE      |forecast mean - mean of the horizon's 5-min values|, per series x origin
  pin95    pinball loss at q = 0.95: mean of max(q (y - p95), (q - 1) (y - p95)) over future 5-min values
  cov95/99 share of future 5-min values <= p95 / p99
  s/1k     wall time per 1,000 series (resample + model; library models: fit + forecast), from the run
The gain interval resamples whole series (all their origins) with replacement: 5-95 % of 1,000 draws.

Peers from an established library (``pip install -e '.[bench-forecast]'``): statsforecast's AutoETS
(non-seasonal: its ETS does not take a 288-bin season), AutoARIMA (non-seasonal: a seasonal ARIMA with
m = 288 does not fit in time) and MSTL (daily season, AutoETS trend), each with its own (model) intervals
and as ``+conformal`` with statsforecast's ConformalIntervals (split conformal of the same point forecasts
over ``LIB_CONFORMAL_WINDOWS`` refitted windows). Their forecasts are per step, so their p95 / p99 are per
future bin (an advantage over kso's one band per horizon). They fit on the last ``LIB_HISTORY_BINS`` of
the raw 5-minute grid (AutoARIMA over 7 days costs ~0.8 s per series here); results are cached under
``--cache`` so a rerun of kso's models does not refit them.

Data (cite): GWA-T-12 Bitbrains "Rnd", Aug 2013 (A. Shen et al., CCGrid 2015) -- utilisation = usage /
provisioned; Alibaba cluster-trace-v2018 machine_usage, first 100,000 rows (16 machines) --
utilisation = *_util_percent / 100; Google cluster-data 2019 cell a (Tirmazi et al., EuroSys 2020), 34
tasks -- utilisation = avg usage / the task's limit (cpu) or memory limit.

Tuning / reporting split: kso's constants were tuned on Bitbrains VMs 1-250 with origins drawn by seed 0;
the report uses Bitbrains VMs from 251 on (``--vms`` of them), all Alibaba machines and all Google tasks,
origins drawn by seed 1. Nothing was tuned on Alibaba or Google in the session that added them.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.machine import machine_line
from forecasting.models import DEFAULT_FORECASTER, get_forecaster
from forecasting.models._base import DEFAULT_HISTORY_S, STEP_S, Grid, GridForecaster, resample
from forecasting.traces import DATA_DIR, TRACE_FILES
from forecasting.types import RESOURCES, UtilisationSeries

BITBRAINS = DATA_DIR / TRACE_FILES["bitbrains"]
ALIBABA = DATA_DIR / TRACE_FILES["alibaba"]
GOOGLE = DATA_DIR / "google2019-tasks.csv.gz"
HORIZONS_S = (1800.0, 3600.0)
Q = 0.95
BITBRAINS_ROWS_PER_VM = 8700  # upper bound per VM, to read only the first N VMs
HELD_OUT_FIRST_VM = 250  # VMs 1-250 were used for tuning; the report uses the ones after

# The baselines of the aim (hand-written peers and the library models' own intervals are added below).
BASELINES = ("last-value", "ewma", "seasonal-naive", "trimaran", "ibm")
KSO_MODELS = (
    "last-value", "ewma", "seasonal-naive", "trimaran", "ibm", "holt-winters",
    "last-value+conformal", "ewma+conformal", "holt-winters+plain-conformal", "holt-winters+conformal",
    "blend+conformal",
)
LIB_BASE = ("sf-autoets", "sf-autoarima", "sf-mstl")
LIB_MODELS = LIB_BASE + tuple(f"{m}+conformal" for m in LIB_BASE)
LIB_HISTORY_BINS = {"sf-autoets": 576, "sf-autoarima": 576, "sf-mstl": 864}  # 2, 2 and 3 days
LIB_CONFORMAL_WINDOWS = 3


def _factory(name: str) -> Callable[[], GridForecaster]:
    """kso models by name; ``+plain-conformal`` = split conformal of the same points without kso's local
    scale, history cap and newest-value floor (a plain residual quantile)."""
    if name.endswith("+plain-conformal"):
        base = name.removesuffix("+plain-conformal") + "+conformal"
        return lambda: get_forecaster(base, scale_half_life_bins=None, cap_rank=None, floor_last=False)  # type: ignore[return-value]
    return lambda: get_forecaster(name)  # type: ignore[return-value]


def _split(df: pd.DataFrame, key: str, tcol: str, cols: dict[str, str], prefix: str) -> list[UtilisationSeries]:
    """One UtilisationSeries per (key, resource) from a long frame, without a Python groupby per row."""
    df = df.sort_values([key, tcol], kind="stable")
    keys = df[key].to_numpy()
    t = df[tcol].to_numpy(dtype=float)
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    bounds = np.concatenate([[0], cuts, [len(df)]])
    out: list[UtilisationSeries] = []
    arrays = {res: df[c].to_numpy(dtype=float) for res, c in cols.items()}
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        tt = t[a:b]
        keep = np.concatenate([[True], np.diff(tt) > 0])  # the traces repeat a few timestamps: keep the first
        for res, arr in arrays.items():
            out.append(UtilisationSeries(f"{prefix}{keys[a]}", res, tt[keep], arr[a:b][keep]))
    return out


def load_bitbrains(n_vms: int | None, first_vm: int = HELD_OUT_FIRST_VM) -> list[UtilisationSeries]:
    """VMs first_vm+1 .. first_vm+n_vms of the trace (in file order)."""
    last = None if n_vms is None else first_vm + n_vms
    df = pd.read_csv(
        BITBRAINS,
        usecols=["vm", "timestamp", "cpu_capacity_mhz", "cpu_usage_mhz", "mem_capacity_kb", "mem_usage_kb"],
        dtype={"vm": "str", "timestamp": "int64", "cpu_capacity_mhz": "float64", "cpu_usage_mhz": "float64",
               "mem_capacity_kb": "float64", "mem_usage_kb": "float64"},
        nrows=None if last is None else last * BITBRAINS_ROWS_PER_VM,
    )
    vms = df["vm"].drop_duplicates().iloc[first_vm:last]
    df = df[df["vm"].isin(vms)].copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        df["cpu"] = df["cpu_usage_mhz"] / df["cpu_capacity_mhz"].where(df["cpu_capacity_mhz"] > 0)
        df["memory"] = df["mem_usage_kb"] / df["mem_capacity_kb"].where(df["mem_capacity_kb"] > 0)
    return _split(df, "vm", "timestamp", {"cpu": "cpu", "memory": "memory"}, "bitbrains/")


def load_alibaba() -> list[UtilisationSeries]:
    df = pd.read_csv(ALIBABA, usecols=["machine_id", "time_stamp", "cpu_util_percent", "mem_util_percent"])
    df["cpu"] = df["cpu_util_percent"] / 100.0
    df["memory"] = df["mem_util_percent"] / 100.0
    return _split(df, "machine_id", "time_stamp", {"cpu": "cpu", "memory": "memory"}, "alibaba/")


def load_google() -> list[UtilisationSeries]:
    """Per task: avg cpu usage / cpu_limit and avg memory usage / memory_limit (the task's own request),
    time in seconds (the file has microseconds since the trace start)."""
    df = pd.read_csv(GOOGLE, usecols=["time", "collection_id", "instance_index", "cpu_limit", "memory_limit",
                                      "avg_cpu_usage", "avg_memory_usage"])
    df["t"] = df["time"] / 1e6
    df["task"] = df["collection_id"].astype(str) + "/" + df["instance_index"].astype(str)
    with np.errstate(divide="ignore", invalid="ignore"):
        df["cpu"] = df["avg_cpu_usage"] / df["cpu_limit"].where(df["cpu_limit"] > 0)
        df["memory"] = df["avg_memory_usage"] / df["memory_limit"].where(df["memory_limit"] > 0)
    return _split(df, "task", "t", {"cpu": "cpu", "memory": "memory"}, "google/")


def future_bins(s: UtilisationSeries, origin: float, h: int) -> np.ndarray:
    """The target: means of the finite samples in (origin + (j-1)*300, origin + j*300], j = 1..h."""
    lo, hi = np.searchsorted(s.t, [origin, origin + h * STEP_S], side="right")
    t, y = s.t[lo:hi], s.y[lo:hi]
    ok = np.isfinite(y)
    j = np.ceil((t[ok] - origin) / STEP_S).astype(np.int64) - 1
    sums = np.bincount(j, weights=y[ok], minlength=h)[:h]
    cnt = np.bincount(j, minlength=h)[:h]
    with np.errstate(invalid="ignore"):
        return np.where(cnt > 0, sums / np.maximum(cnt, 1), np.nan)


@dataclass
class Acc:
    """One cell (horizon, resource, model): pooled sums plus per-row (series x origin) pinball sums."""

    abs_err: list[float] = field(default_factory=list)
    pin: float = 0.0
    c95: int = 0
    c99: int = 0
    n: int = 0
    seconds: float = 0.0
    series_forecast: int = 0
    row_key: list[str] = field(default_factory=list)
    row_pin: list[float] = field(default_factory=list)

    def add(self, keys: list[str], mean: np.ndarray, p95: np.ndarray, p99: np.ndarray, actual: np.ndarray) -> None:
        """p95 / p99 are (S, 1) for one band per horizon or (S, H) per future bin."""
        fin = np.isfinite(actual)
        self.abs_err.extend(np.abs(mean - np.nanmean(actual, axis=1)).tolist())
        d = actual - p95
        rho = np.where(fin, np.maximum(Q * d, (Q - 1.0) * d), 0.0)
        self.pin += float(rho.sum())
        self.row_key.extend(keys)
        self.row_pin.extend(rho.sum(axis=1).tolist())
        self.c95 += int(np.sum((actual <= p95) & fin))
        self.c99 += int(np.sum((actual <= p99) & fin))
        self.n += int(fin.sum())

    def row(self) -> tuple[float, float, float, float, float]:
        return (float(np.mean(self.abs_err)), self.pin / max(self.n, 1), self.c95 / max(self.n, 1),
                self.c99 / max(self.n, 1), 1000.0 * self.seconds / max(self.series_forecast, 1))


Cell = dict[tuple[float, str, str], Acc]  # (horizon_s, resource, model) -> Acc


def pick_origins(series: list[UtilisationSeries], n_origins: int, rng: np.random.Generator) -> np.ndarray:
    """Stratified: one origin at a random point of each of K equal slices of the evaluation span, so the
    origins cover times of day and weekdays instead of clustering by chance."""
    t0 = min(float(s.t[0]) for s in series if len(s))
    t1 = max(float(s.t[-1]) for s in series if len(s))
    first = t0 + min(DEFAULT_HISTORY_S, max(2.5 * 86400.0, (t1 - t0) - 1.5 * 86400.0))
    last = t1 - max(HORIZONS_S)
    width = (last - first) / n_origins
    return first + width * (np.arange(n_origins) + rng.uniform(0.0, 1.0, n_origins))


def live_at(series: list[UtilisationSeries], origin: float) -> tuple[list[UtilisationSeries], dict[float, np.ndarray]]:
    """Series with a sample in the last 15 min, finite history and some finite future, cut to 7 days."""
    hist: list[UtilisationSeries] = []
    futures: dict[float, list[np.ndarray]] = {hs: [] for hs in HORIZONS_S}
    for s in series:
        lo, hi = np.searchsorted(s.t, [origin - DEFAULT_HISTORY_S, origin], side="right")
        if hi - lo == 0 or origin - s.t[hi - 1] > 900 or not np.isfinite(s.y[lo:hi]).any():
            continue
        fut = {hs: future_bins(s, origin, round(hs / STEP_S)) for hs in HORIZONS_S}
        if not all(np.isfinite(f).any() for f in fut.values()):
            continue
        hist.append(UtilisationSeries(s.key, s.resource, s.t[lo:hi], s.y[lo:hi]))
        for hs in HORIZONS_S:
            futures[hs].append(fut[hs])
    return hist, {hs: np.stack(f) if f else np.zeros((0, round(hs / STEP_S))) for hs, f in futures.items()}


# ---- statsforecast peers ------------------------------------------------------------------------------
def _lib_model(name: str, h: int) -> object:
    from statsforecast.models import MSTL, AutoARIMA, AutoETS
    from statsforecast.utils import ConformalIntervals

    base = name.removesuffix("+conformal")
    pi = ConformalIntervals(h=h, n_windows=LIB_CONFORMAL_WINDOWS) if name.endswith("+conformal") else None
    if base == "sf-autoets":
        return AutoETS(season_length=1, alias=name, prediction_intervals=pi)
    if base == "sf-autoarima":
        return AutoARIMA(season_length=1, alias=name, prediction_intervals=pi)
    return MSTL(season_length=288, trend_forecaster=AutoETS(model="ZNN"), alias=name, prediction_intervals=pi)


def library_forecasts(grid: Grid, keys: list[str], h: int, name: str, cache: Path | None,
                      tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean over the horizon, p95 per step, p99 per step, seconds) of one statsforecast model for every row
    of ``grid`` (the raw 5-minute grid), fitted on the last LIB_HISTORY_BINS[base] observed-or-filled bins."""
    digest = hashlib.sha1(("|".join(keys) + tag + name).encode()).hexdigest()[:16]
    path = None if cache is None else cache / f"{tag}-{name}-{digest}.npz"
    if path is not None and path.exists():
        z = np.load(path)
        return z["mean"], z["p95"], z["p99"], float(z["seconds"])
    from statsforecast import StatsForecast
    from statsforecast.models import Naive

    nb = LIB_HISTORY_BINS[name.removesuffix("+conformal")]
    S, n = grid.values.shape
    frames = []
    for i in range(S):
        lo = max(int(grid.start[i]), n - nb)
        y = grid.values[i, lo:]
        frames.append(pd.DataFrame({"unique_id": i, "ds": np.arange(len(y)), "y": y}))
    df = pd.concat(frames, ignore_index=True)
    ts = time.perf_counter()
    # Naive for the rare series a model cannot fit (too short for MSTL's two seasons, constant, ...)
    sf = StatsForecast(models=[_lib_model(name, h)], freq=1, n_jobs=1, fallback_model=Naive())
    out = sf.forecast(df=df, h=h, level=[90, 98]).sort_values(["unique_id", "ds"])
    seconds = time.perf_counter() - ts
    col = name
    mean_steps = out[col].to_numpy().reshape(S, h)
    p95 = out[f"{col}-hi-90"].to_numpy().reshape(S, h)
    p99 = out[f"{col}-hi-98"].to_numpy().reshape(S, h)
    res = (mean_steps, np.maximum(p95, mean_steps), np.maximum(p99, p95), seconds)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, mean=res[0], p95=res[1], p99=res[2], seconds=seconds)
    return res


def evaluate(name: str, series: list[UtilisationSeries], origins: np.ndarray, models: tuple[str, ...],
             lib_models: tuple[str, ...], cache: Path | None) -> Cell:
    acc: Cell = {}
    forecasters = {m: _factory(m)() for m in models}
    h_max = round(max(HORIZONS_S) / STEP_S)
    for origin in origins:
        hist, futures = live_at(series, origin)
        if not hist:
            continue
        keys = [f"{s.key}/{s.resource}" for s in hist]
        res = np.array([s.resource for s in hist])
        ts = time.perf_counter()
        grid_raw = resample(hist, origin, robust=False)
        t_raw = time.perf_counter() - ts
        ts = time.perf_counter()
        grid_robust = resample(hist, origin)
        t_robust = time.perf_counter() - ts
        preds: dict[tuple[float, str], tuple[np.ndarray, np.ndarray, np.ndarray, float]] = {}
        for hs in HORIZONS_S:
            for m, f in forecasters.items():
                grid, t_res = (grid_robust, t_robust) if f.robust_input else (grid_raw, t_raw)
                ts = time.perf_counter()
                fcs = f.forecast_grid(grid, hist, hs)
                sec = time.perf_counter() - ts + t_res
                preds[(hs, m)] = (np.array([fc.mean for fc in fcs]), np.array([fc.p95 for fc in fcs])[:, None],
                                  np.array([fc.p99 for fc in fcs])[:, None], sec)
        for m in lib_models:
            mean_steps, p95, p99, sec = library_forecasts(grid_raw, keys, h_max, m, cache, f"{name}-{origin:.0f}")
            for hs in HORIZONS_S:
                h = round(hs / STEP_S)
                preds[(hs, m)] = (mean_steps[:, :h].mean(axis=1), p95[:, :h], p99[:, :h],
                                  sec if hs == max(HORIZONS_S) else 0.0)  # one fit serves both horizons
        for (hs, m), (mean, p95, p99, sec) in preds.items():
            for r in RESOURCES:
                sel = res == r
                if not sel.any():
                    continue
                a = acc.setdefault((hs, r, m), Acc())
                a.add([k for k, s_ in zip(keys, sel, strict=True) if s_], mean[sel], p95[sel], p99[sel],
                      futures[hs][sel])
                a.seconds += sec * sel.mean()
                a.series_forecast += int(sel.sum()) if (sec > 0 or m not in lib_models) else 0
        print(f"  {name}: origin {origin:.0f} done ({len(hist)} live series)", file=sys.stderr, flush=True)
    return acc


# gain = 1 - L_model / min_b L_b with L the pooled pinball loss (per cell); the interval resamples whole
# series with replacement (all origins of a series together: a series' rows are correlated)
def gain_interval(acc: Cell, hs: float, r: str, model: str, baselines: tuple[str, ...], draws: int = 1000,
                  seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    ref = acc[(hs, r, model)]
    uniq, inv = np.unique(np.array(ref.row_key), return_inverse=True)
    k = len(uniq)
    if k == 0:
        return math.nan, math.nan
    per_series = {}
    for m in (model, *baselines):
        a = acc[(hs, r, m)]
        assert a.row_key == ref.row_key, "every model is scored on the same rows"
        per_series[m] = np.bincount(inv, weights=np.array(a.row_pin), minlength=k)
    idx = rng.integers(0, k, size=(draws, k))
    counts = np.stack([np.bincount(row, minlength=k) for row in idx])  # (draws, k)
    best = np.min([counts @ per_series[b] for b in baselines], axis=0)
    gains = 1.0 - (counts @ per_series[model]) / np.maximum(best, 1e-300)
    lo, hi = np.percentile(100.0 * gains, [5.0, 95.0])
    return float(lo), float(hi)


def speed_check(series: list[UtilisationSeries], model: str, nodes: int = 1000) -> tuple[int, float]:
    """Wall time of forecast_many for ``nodes`` nodes x (cpu, memory) = 2 x nodes series of 7 days, resampling
    and input checks included; real Bitbrains series reused (with new keys) to reach 2,000."""
    picked = [s for s in series if len(s) >= 1000]
    batch = []
    for i in range(2 * nodes):
        s = picked[i % len(picked)]
        lo = np.searchsorted(s.t, s.t[-1] - DEFAULT_HISTORY_S, side="right")
        batch.append(UtilisationSeries(f"{s.key}#{i}", s.resource, s.t[lo:], s.y[lo:]))
    f = get_forecaster(model)
    ts = time.perf_counter()
    f.forecast_many(batch, 3600.0)
    return len(batch), time.perf_counter() - ts


def report_cell(acc: Cell, hs: float, r: str, models: tuple[str, ...], lib_models: tuple[str, ...]) -> list[str]:
    lines = ["| model | MAE mean | pin95 | cov95 | cov99 | s/1k series |", "|---|---:|---:|---:|---:|---:|"]
    for m in models + lib_models:
        if (hs, r, m) not in acc:
            continue
        mae, pin, c95, c99, s1k = acc[(hs, r, m)].row()
        mark = " **(default)**" if m == DEFAULT_FORECASTER else ""
        lines.append(f"| {m}{mark} | {mae:.4f} | {pin:.5f} | {c95:.3f} | {c99:.3f} | {s1k:.1f} |")
    if (hs, r, DEFAULT_FORECASTER) not in acc:
        return lines
    bases = tuple(b for b in BASELINES + tuple(m for m in lib_models if not m.endswith("+conformal")) if (hs, r, b) in acc)
    best = min(bases, key=lambda b: acc[(hs, r, b)].row()[1])
    _, dp, c95, c99, _ = acc[(hs, r, DEFAULT_FORECASTER)].row()
    gain = 100.0 * (1.0 - dp / acc[(hs, r, best)].row()[1])
    lo, hi = gain_interval(acc, hs, r, DEFAULT_FORECASTER, bases)
    met = [f"gain {gain:+.1f}% vs best baseline {best} (5-95%: {lo:+.1f}% to {hi:+.1f}%) "
           f"{'MET' if gain >= 15 else 'NOT MET'} (aim >= 15%)"]
    conf = tuple(m for m in lib_models if m.endswith("+conformal") and (hs, r, m) in acc)
    if conf:
        bc = min(conf, key=lambda b: acc[(hs, r, b)].row()[1])
        g2 = 100.0 * (1.0 - dp / acc[(hs, r, bc)].row()[1])
        lo2, hi2 = gain_interval(acc, hs, r, DEFAULT_FORECASTER, (bc,))
        met.append(f"vs best conformal library model {bc}: {g2:+.1f}% ({lo2:+.1f}% to {hi2:+.1f}%) "
                   f"{'MET' if g2 >= 0 else 'NOT MET'}")
    met.append(f"cov95 {c95:.3f} {'MET' if 0.93 <= c95 <= 0.97 else 'NOT MET'} (93-97%), "
               f"cov99 {c99:.3f} {'MET' if 0.975 <= c99 <= 0.995 else 'NOT MET'} (97.5-99.5%)")
    return [*lines, "", *(f"- {x}" for x in met)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vms", type=int, default=40, help="held-out Bitbrains VMs (from VM 251 on), each cpu + memory")
    ap.add_argument("--origins", default="3,4,6", help="origins for bitbrains,alibaba,google")
    ap.add_argument("--quick", action="store_true", help="5 VMs, 1 origin each, no library: a smoke run")
    ap.add_argument("--no-library", action="store_true", help="skip the statsforecast peers")
    ap.add_argument("--library-only", action="store_true", help="only fit the library peers into the cache")
    ap.add_argument("--cache", default=os.environ.get("KSO_BENCH_CACHE", str(Path.home() / ".cache/kso-forecast-bench")))
    # seed 0 drew the origins the smoothing/window settings were tuned on; the reported run uses seed 1
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--datasets", default="bitbrains,alibaba2018,google2019")
    ap.add_argument("--use-origins", default=None,
                    help="evaluate only the first k of each dataset's origins (k per dataset, comma-separated): the "
                         "origins stay those of --origins, so cached library forecasts are reused")
    ap.add_argument("--first-vm", type=int, default=HELD_OUT_FIRST_VM, help="0 = the tuning VMs")
    ap.add_argument("--models", default=",".join(KSO_MODELS), help="kso models (registry names, +plain-conformal)")
    args = ap.parse_args(argv)
    n_origins = [int(x) for x in args.origins.split(",")]
    if args.quick:
        args.vms, n_origins, args.no_library = 5, [1, 1, 1], True
    models: tuple[str, ...] = () if args.library_only else tuple(args.models.split(","))
    lib_models: tuple[str, ...] = () if args.no_library else LIB_MODELS
    cache = Path(args.cache)
    rng = np.random.default_rng(args.seed)
    t_start = time.perf_counter()
    loaders = {"bitbrains": lambda: load_bitbrains(args.vms, args.first_vm), "alibaba2018": load_alibaba,
               "google2019": load_google}
    wanted = args.datasets.split(",")
    datasets = {k: loaders[k]() for k in loaders if k in wanted}
    counts = dict(zip(loaders, n_origins, strict=True))
    origins = {k: pick_origins(ss, counts[k], rng) for k, ss in datasets.items()}
    if args.use_origins:
        use = dict(zip(loaders, (int(x) for x in args.use_origins.split(",")), strict=True))
        origins = {k: o[: use[k]] for k, o in origins.items()}
    results = {k: evaluate(k, ss, origins[k], models, lib_models, cache) for k, ss in datasets.items()}
    if args.library_only:
        print(f"library forecasts cached in {cache} ({time.perf_counter() - t_start:.0f} s)")
        return 0
    speed = speed_check(load_bitbrains(500, 0) if not args.quick else datasets["bitbrains"], DEFAULT_FORECASTER)
    cmd = "python -m benchmarks.forecast_accuracy " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"# forecast accuracy  (`{cmd.strip()}`)\n")
    print(f"machine: {machine_line()}, numpy {np.__version__} (shared machine: other work ran concurrently)")
    for k, ss in datasets.items():
        days = ", ".join(f"{(o - min(s.t[0] for s in ss if len(s))) / 86400:.1f}" for o in origins[k])
        print(f"- {k}: {len(ss)} series; {len(origins[k])} of {counts[k]} stratified origins (seed {args.seed}), "
              f"at day {days} of the trace")
    for k, acc in results.items():
        for hs in HORIZONS_S:
            for r in RESOURCES:
                key = next((a for a in acc if a[0] == hs and a[1] == r), None)
                if key is None:
                    continue
                print(f"\n### {k}, {r}, horizon {hs / 60:.0f} min  (n future 5-min values = {acc[key].n})\n")
                print("\n".join(report_cell(acc, hs, r, models, lib_models)))
    print(f"\nspeed: {DEFAULT_FORECASTER}.forecast_many on {speed[0] // 2} nodes x (cpu, memory) = {speed[0]} real "
          f"series x 7 days: {speed[1]:.2f} s ({os.cpu_count()} CPUs, shared)")
    print(f"total run time {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
