"""Data for benchmarks/forecast_accuracy.py: the three traces as UtilisationSeries, the forecast target,
the rolling origins and the tuning / reporting split.

Data (cite): GWA-T-12 Bitbrains "Rnd", Aug 2013 (A. Shen et al., CCGrid 2015) -- utilisation = usage /
provisioned; Alibaba cluster-trace-v2018 machine_usage, first 100,000 rows (16 machines, 8 days) --
utilisation = *_util_percent / 100; Google cluster-data 2019 cell a (Tirmazi et al., EuroSys 2020), 34
tasks over 31 days -- utilisation = avg usage / the task's limit (cpu) or memory limit.

Split (stated in benchmarks/README.md): origins are drawn stratified over each dataset's evaluable span;
the first ``TUNE_SHARE`` of that span is the tuning part, the rest the reporting part. Bitbrains is also
split by VM: tuning uses VMs 1-250, reporting VMs from 251 on (the rows of the trace file in order).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from forecasting.models._base import DEFAULT_HISTORY_S, STEP_S
from forecasting.traces import DATA_DIR, TRACE_FILES
from forecasting.types import UtilisationSeries

BITBRAINS = DATA_DIR / TRACE_FILES["bitbrains"]
ALIBABA = DATA_DIR / TRACE_FILES["alibaba"]
GOOGLE = DATA_DIR / "google2019-tasks.csv.gz"
HORIZONS_S = (1800.0, 3600.0)
BITBRAINS_ROWS_PER_VM = 8700  # upper bound per VM, to read only the first N VMs
HELD_OUT_FIRST_VM = 250  # VMs 1-250 are the tuning VMs; the report uses the ones after
TUNE_SHARE = 0.35  # origins in the first 35 % of the evaluable span tune; the later 65 % report
MIN_HISTORY_S = 2.5 * 86400.0  # origins start once most series have 2.5 days of history


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


def origin_span(series: list[UtilisationSeries]) -> tuple[float, float]:
    """[first, last] origin time: 2.5 days (up to 7 days on long traces) after the trace start, and the
    longest horizon before its end."""
    t0 = min(float(s.t[0]) for s in series if len(s))
    t1 = max(float(s.t[-1]) for s in series if len(s))
    first = t0 + min(DEFAULT_HISTORY_S, max(MIN_HISTORY_S, (t1 - t0) - 24 * 86400.0))
    return first, t1 - max(HORIZONS_S)


def pick_origins(series: list[UtilisationSeries], n_origins: int, rng: np.random.Generator) -> np.ndarray:
    """Stratified: one origin at a random point of each of K equal slices of the evaluable span, so the
    origins cover times of day and weekdays instead of clustering by chance."""
    first, last = origin_span(series)
    width = (last - first) / n_origins
    return first + width * (np.arange(n_origins) + rng.uniform(0.0, 1.0, n_origins))


def split_origins(series: list[UtilisationSeries], origins: np.ndarray, part: str) -> np.ndarray:
    """The tuning part (origins in the first TUNE_SHARE of the span) or the reporting part (the rest)."""
    first, last = origin_span(series)
    cut = first + TUNE_SHARE * (last - first)
    return origins[origins < cut] if part == "tune" else origins[origins >= cut]


YOUNG_MAX_AGE_S = 60 * 3600.0  # the young-task set: an origin every 30 min from 1 h to 60 h after a start
YOUNG_EVERY_S = 1800.0


def young_origins(series: list[UtilisationSeries]) -> dict[float, set[str]]:
    """The young-task tuning set (Google 2019): origin -> task keys, every YOUNG_EVERY_S from 1 h to
    YOUNG_MAX_AGE_S after each task start (its first sample after the trace's first 12 h, or its first
    sample after a gap of over an hour: a restart, whose history keeps the old run) before the tuning
    part's end; the reporting part's new and restarted tasks are not used."""
    first, last = origin_span(series)
    cut = first + TUNE_SHARE * (last - first)
    t0 = min(float(s.t[0]) for s in series if len(s))
    out: dict[float, set[str]] = {}
    for s in series:
        if not len(s) or s.resource != "memory":
            continue
        starts = np.concatenate([s.t[:1], s.t[1:][np.diff(s.t) > 3600.0]])
        for start in starts[(starts > t0 + 43200.0) & (starts < cut)]:
            for o in start + np.arange(3600.0, YOUNG_MAX_AGE_S + 1.0, YOUNG_EVERY_S):
                if o < min(float(s.t[-1]), cut) - max(HORIZONS_S):
                    out.setdefault(float(o), set()).add(s.key)
    return out


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


def load(dataset: str, part: str, n_vms: int | None) -> list[UtilisationSeries]:
    """A dataset's series for a part: Bitbrains VMs 1-250 for tuning, from 251 on for reporting."""
    if dataset == "bitbrains":
        return load_bitbrains(n_vms, 0 if part == "tune" else HELD_OUT_FIRST_VM)
    return load_alibaba() if dataset == "alibaba2018" else load_google()
