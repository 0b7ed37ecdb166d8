"""Rolling-origin accuracy of the utilisation forecasters on real traces, with statsforecast as a peer.

    python -m benchmarks.forecast_accuracy [--part report|tune|young] [--vms N] [--origins K] [--quick]

Target (same as the models, see ``forecasting.models._base``): the 5-minute bin means of a series in
the ``horizon`` after each origin. Metrics per dataset x resource x horizon cell, pooled over series x
origins x future bins:
  MAE      |forecast mean - mean of the horizon's 5-min values|, per series x origin
  pin95    pinball loss at q = 0.95: mean of max(q (y - p95), (q - 1) (y - p95)) over future 5-min values
  cov95/99 share of future 5-min values <= p95 / p99
The gain interval resamples whole series (all their origins) with replacement: 5-95 % of 1,000 draws.

Two comparisons: every kso model and hand-written baseline on all series x origins of the part; and,
on the random node x origin subset the statsforecast peers were fitted for (benchmarks/forecast_library.py,
run first; origins not fitted in time are left out and counted), the same plus the library models.
The data, origins and the tuning / reporting split are in benchmarks/forecast_data.py. ``@no-despike`` after
a model name runs it on the raw grid (no spike removal): the with / without comparison on the same rows.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.forecast_data import (
    HORIZONS_S,
    live_at,
    load,
    load_bitbrains,
    pick_origins,
    split_origins,
    young_origins,
)
from benchmarks.forecast_library import DEFAULT_CACHE, LIB_MODELS, library_subset, load_cached
from benchmarks.machine import machine_line
from forecasting.models import DEFAULT_FORECASTER, get_forecaster
from forecasting.models._base import DEFAULT_HISTORY_S, STEP_S, GridForecaster, resample
from forecasting.types import UtilisationSeries

Q = 0.95
# The baselines of the aim (the library models' own intervals are added on the library subset).
BASELINES = ("last-value", "ewma", "seasonal-naive", "trimaran", "ibm")
KSO_MODELS = (
    "last-value", "ewma", "seasonal-naive", "trimaran", "ibm", "holt-winters",
    "last-value+conformal", "ewma+conformal", "seasonal-naive+conformal", "holt-winters+conformal",
    f"{DEFAULT_FORECASTER}@no-despike",
)


def model_factory(name: str) -> Callable[[], GridForecaster]:
    """kso models by name; ``+plain-conformal`` = split conformal of the same points without kso's local
    scale, history cap and newest-value floor; ``@no-despike`` = the model on the raw grid; ``@no-floor`` =
    without the newest-value floor; ``@param=value`` (repeatable: ``@a=1@b=2``) = the registry model built with
    those (float) keywords, e.g. ``holt-winters+conformal@trend_floor=1`` (a candidate on the tuning part)."""
    base = name.removesuffix("@no-despike")
    if "@" in base and "=" in base.rsplit("@", 1)[1]:
        reg, *kws = base.split("@")
        params = {k: float(v) for k, v in (kw.split("=", 1) for kw in kws)}
        return lambda: get_forecaster(reg, **params)  # type: ignore[return-value]
    if base.endswith("@no-floor"):
        reg = base.removesuffix("@no-floor")
        return lambda: get_forecaster(reg, floor_last=False)  # type: ignore[return-value]
    if base.endswith("+plain-conformal"):
        reg = base.removesuffix("+plain-conformal") + "+conformal"
        return lambda: get_forecaster(reg, scale_half_life_bins=None, cap_rank=None, floor_last=False)  # type: ignore[return-value]
    return lambda: get_forecaster(base)  # type: ignore[return-value]


def _score(mean: np.ndarray, p95: np.ndarray, p99: np.ndarray, actual: np.ndarray) -> dict[str, np.ndarray]:
    """Per row (series x origin): |mean - horizon mean|, pinball sum, finite count, p95 / p99 hits.
    p95 / p99 are (S, 1) for one band per horizon or (S, H) per future bin."""
    fin = np.isfinite(actual)
    d = actual - p95
    rho = np.where(fin, np.maximum(Q * d, (Q - 1.0) * d), 0.0)
    return {"abs_err": np.abs(mean - np.nanmean(actual, axis=1)), "pin": rho.sum(axis=1), "n": fin.sum(axis=1),
            "c95": ((actual <= p95) & fin).sum(axis=1), "c99": ((actual <= p99) & fin).sum(axis=1)}


def evaluate(dataset: str, series: list[UtilisationSeries], origins: np.ndarray, models: tuple[str, ...],
             subset: dict[float, set[str]], cache: Path, only_subset: bool = False) -> tuple[pd.DataFrame, int]:
    """Rows (origin, key, resource, horizon, model, scores, lib, seconds) for every model at every origin;
    the library models only at the subset's origins whose fits are cached (``seconds``: the model's time
    at that origin over its rows: resample + forecast; library: fit + forecast, counted under the longest
    horizon, one fit serving both). Returns (rows, number of library origins used)."""
    forecasters = {m: model_factory(m)() for m in models}
    frames: list[pd.DataFrame] = []
    lib_used = 0
    for origin in origins:
        hist, futures = live_at(series, float(origin))
        if only_subset:  # the models forecast each series on its own: the other series change nothing
            keep = np.array([s.key in subset.get(float(origin), ()) for s in hist], bool)
            hist = [s for s, k in zip(hist, keep, strict=True) if k]
            futures = {hs: f[keep] for hs, f in futures.items()}
        if not hist:
            continue
        keys = np.array([f"{s.key}/{s.resource}" for s in hist])
        res = np.array([s.resource for s in hist])
        ts = time.perf_counter()
        grids = {False: resample(hist, float(origin), robust=False)}
        t_grid = {False: time.perf_counter() - ts}
        ts = time.perf_counter()
        grids[True] = resample(hist, float(origin))
        t_grid[True] = time.perf_counter() - ts
        in_lib = np.array([s.key in subset.get(float(origin), ()) for s in hist])
        preds: dict[tuple[float, str], tuple[np.ndarray, ...]] = {}
        for hs in HORIZONS_S:
            for m, f in forecasters.items():
                robust = f.robust_input and not m.endswith("@no-despike")
                ts = time.perf_counter()
                fcs = f.forecast_grid(grids[robust], hist, hs)
                sec = (time.perf_counter() - ts + t_grid[robust]) / len(hist)
                preds[(hs, m)] = (np.array([fc.mean for fc in fcs]), np.array([fc.p95 for fc in fcs])[:, None],
                                  np.array([fc.p99 for fc in fcs])[:, None], np.ones(len(hist), bool), np.full(len(hist), sec))
        fits = {m: load_cached(cache, dataset, float(origin), m) for m in LIB_MODELS} if in_lib.any() else {}
        if fits and all(v is not None for v in fits.values()):
            lib_used += 1
            pos = {k: i for i, k in enumerate(keys)}
            for m, z in fits.items():
                assert z is not None
                rows = np.array([pos[k] for k in z["keys"]])
                for hs in HORIZONS_S:
                    h = round(hs / STEP_S)
                    mean, p95, p99 = (np.zeros(len(hist)), np.zeros((len(hist), h)), np.zeros((len(hist), h)))
                    mean[rows], p95[rows], p99[rows] = z["mean_steps"][:, :h].mean(axis=1), z["p95"][:, :h], z["p99"][:, :h]
                    have = np.zeros(len(hist), bool)
                    have[rows] = True
                    sec = float(z["seconds"]) / len(rows) if hs == max(HORIZONS_S) else 0.0
                    preds[(hs, m)] = (mean, p95, p99, have, np.full(len(hist), sec))
        else:
            in_lib[:] = False
        for (hs, m), (mean, p95, p99, have, sec) in preds.items():
            sc = _score(mean, p95, p99, futures[hs])
            frames.append(pd.DataFrame({"origin": float(origin), "key": keys, "resource": res, "horizon": hs,
                                        "model": m, "lib": in_lib, **sc, "seconds": sec})[have])
        print(f"  {dataset}: origin {origin:.0f} done ({len(hist)} live series)", file=sys.stderr, flush=True)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), lib_used


def cell_stats(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model: MAE, pin95, cov95, cov99 pooled over the rows (pin and coverage per future 5-min value)."""
    g = rows.groupby("model")
    s = g[["pin", "n", "c95", "c99"]].sum()
    out = pd.DataFrame({"mae": g["abs_err"].mean(), "pin95": s["pin"] / s["n"], "cov95": s["c95"] / s["n"],
                        "cov99": s["c99"] / s["n"], "n": s["n"]})
    return out


# gain = 1 - L_model / min_b L_b with L the pooled pinball loss (per cell); the interval resamples whole
# series with replacement (all origins of a series together: a series' rows are correlated)
def gain_interval(rows: pd.DataFrame, model: str, baselines: tuple[str, ...], draws: int = 1000,
                  seed: int = 0) -> tuple[float, float]:
    piv_pin = rows.pivot_table(index="key", columns="model", values="pin", aggfunc="sum")
    piv_n = rows.pivot_table(index="key", columns="model", values="n", aggfunc="sum")
    k = len(piv_pin)
    if k == 0:
        return np.nan, np.nan
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, k, k), minlength=k) for _ in range(draws)])  # (draws, k)

    def loss(m: str) -> np.ndarray:
        return (counts @ piv_pin[m].fillna(0).to_numpy()) / np.maximum(counts @ piv_n[m].fillna(0).to_numpy(), 1)

    best = np.min([loss(b) for b in baselines], axis=0)
    lo, hi = np.percentile(100.0 * (1.0 - loss(model) / np.maximum(best, 1e-300)), [5.0, 95.0])
    return float(lo), float(hi)


def compare(rows: pd.DataFrame, model: str, baselines: tuple[str, ...]) -> tuple[str, float, float, float, float]:
    """(best baseline, its pin95, gain %, 5 %, 95 %) of ``model`` against the best of ``baselines`` in a cell."""
    st = cell_stats(rows)
    bases = tuple(b for b in baselines if b in st.index)
    best = min(bases, key=lambda b: st.loc[b, "pin95"])
    gain = 100.0 * (1.0 - st.loc[model, "pin95"] / st.loc[best, "pin95"])
    lo, hi = gain_interval(rows, model, bases)
    return best, float(st.loc[best, "pin95"]), float(gain), lo, hi


def model_table(rows: pd.DataFrame) -> list[str]:
    """s/1k: seconds per 1,000 series x origins, summed over both horizons (library: one fit for both)."""
    st = cell_stats(rows)
    per_origin = rows.groupby("model")["seconds"].sum() / rows[rows.horizon == HORIZONS_S[0]].groupby("model").size()
    lines = ["| model | MAE mean | pin95 | cov95 | cov99 | s/1k series |", "|---|---:|---:|---:|---:|---:|"]
    for m in st.index:
        mark = " **(default)**" if m == DEFAULT_FORECASTER else ""
        s1k = 1000.0 * per_origin[m]
        r = st.loc[m]
        lines.append(f"| {m}{mark} | {r.mae:.4f} | {r.pin95:.5f} | {r.cov95:.3f} | {r.cov99:.3f} | {s1k:.1f} |")
    return lines


def summary_line(dataset: str, r: str, hs: float, rows: pd.DataFrame, lib: bool) -> str:
    """One row of the headline table: default vs best baseline, vs best conformal peer, coverage."""
    d = DEFAULT_FORECASTER
    present = set(rows.model.unique())
    bases = tuple(b for b in BASELINES + (tuple(m for m in LIB_MODELS if not m.endswith("+conformal")) if lib else ())
                  if b in present)
    peers = tuple(m for m in (tuple(m for m in LIB_MODELS if m.endswith("+conformal")) if lib
                              else ("last-value+conformal", "ewma+conformal")) if m in present)
    st = cell_stats(rows).loc[d]
    cols = [dataset, r, f"{hs / 60:.0f} min", f"{st.pin95:.5f}"]
    for group in (bases, peers):
        if not group:
            cols += ["-", "-"]
            continue
        best, bpin, gain, lo, hi = compare(rows, d, group)
        cols += [f"{best} ({bpin:.5f})", f"**{gain:+.1f}%** ({lo:+.1f} to {hi:+.1f})"]
    cols += [f"{100 * st.cov95:.1f}%", f"{100 * st.cov99:.1f}%"]
    return "| " + " | ".join(cols) + " |"


def speed_check(model: str, nodes: int = 1000, runs: int = 5) -> list[float]:
    """Wall times of forecast_many for ``nodes`` nodes x (cpu, memory) = 2 x nodes series of 7 days, input
    checks and resampling included; real Bitbrains tuning-VM series reused (with new keys) to reach 2,000."""
    picked = [s for s in load_bitbrains(500, 0) if len(s) >= 1000]
    batch = []
    for i in range(2 * nodes):
        s = picked[i % len(picked)]
        lo = np.searchsorted(s.t, s.t[-1] - DEFAULT_HISTORY_S, side="right")
        batch.append(UtilisationSeries(f"{s.key}#{i}", s.resource, s.t[lo:], s.y[lo:]))
    out = []
    for _ in range(runs):
        f = get_forecaster(model)
        ts = time.perf_counter()
        f.forecast_many(batch, 3600.0)
        out.append(time.perf_counter() - ts)
    return out


def open_cache(path: str) -> Path:
    """The library fits' directory: ``path`` itself, or a temporary directory with the files of the .tar.gz
    archive at ``path`` (benchmarks/figures/forecast-library-fits-*.tar.gz: fits need not be redone)."""
    cache = Path(path)
    if not cache.is_file():
        return cache
    tmp = Path(tempfile.mkdtemp(prefix="kso-forecast-fits-"))
    with tarfile.open(cache) as tar:
        tar.extractall(tmp, filter="data")
    return tmp


HEAD = ("| dataset | resource | horizon | default pin95 | best baseline (pin95) | gain (5-95%) | best conformal peer "
        "(pin95) | vs it (5-95%) | cov95 | cov99 |\n|---|---|---:|---:|---|---|---|---|---:|---:|")


def report(rows: pd.DataFrame) -> list[str]:
    """The two summary tables (all rows; library subset) and the per-cell model tables."""
    full_lines, lib_lines, detail = [], [], []
    for (ds, hs, r), both in rows.groupby(["dataset", "horizon", "resource"], sort=False):
        cell, lcell = both[both.run == "full"], both[both.lib]
        if len(cell):  # a --library-pass run alone has only the library rows
            full_lines.append(summary_line(ds, r, hs, cell, lib=False))
            n_all = cell[cell.model == DEFAULT_FORECASTER].n.sum()
            detail += [f"\n#### {ds}, {r}, {hs / 60:.0f} min, all series x origins (n = {n_all} future values)\n",
                       *model_table(cell)]
        if lcell.model.isin(LIB_MODELS).any():
            lib_lines.append(summary_line(ds, r, hs, lcell, lib=True))
            n_lib = lcell[lcell.model == DEFAULT_FORECASTER].n.sum()
            detail += [f"\n#### {ds}, {r}, {hs / 60:.0f} min, library subset (n = {n_lib} future values)\n",
                       *model_table(lcell)]
    out = [f"\n### All series x origins (kso models and hand-written baselines)\n\n{HEAD}", *full_lines] if full_lines else []
    if lib_lines:
        out += [f"\n### Library subset (random nodes x origins; statsforecast peers)\n\n{HEAD}", *lib_lines]
    return out + detail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["report", "tune", "young"], default="report",
                    help="young: the Google 2019 young-task tuning set (benchmarks.forecast_data.young_origins)")
    ap.add_argument("--vms", type=int, default=100, help="Bitbrains VMs of the part, each cpu + memory")
    ap.add_argument("--origins", type=int, default=60, help="stratified origins per dataset over tune + report")
    ap.add_argument("--lib-origins", type=int, default=12)
    ap.add_argument("--lib-nodes", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="10 VMs, 6 origins: a smoke run")
    ap.add_argument("--cache", default=DEFAULT_CACHE,
                    help="the library fits: forecast_library's cache directory, or a .tar.gz of its files")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--datasets", default="bitbrains,alibaba2018,google2019")
    ap.add_argument("--models", default=",".join(KSO_MODELS), help="kso models (registry names, +plain-conformal, @no-despike)")
    ap.add_argument("--rows", default=None, help="write the per-row scores here (csv.gz) for later analysis")
    ap.add_argument("--from-rows", default=None, help="report from these saved rows files (comma-separated) only")
    ap.add_argument("--speed-runs", type=int, default=5)
    ap.add_argument("--library-pass", action="store_true",
                    help="only the library subset's origins, only its rows (run after the library fits; the full run "
                         "then goes with --cache pointing nowhere, and --from-rows joins the two)")
    args = ap.parse_args(argv)
    if args.quick:
        args.vms, args.origins, args.speed_runs = 10, 6, 1
    models = tuple(args.models.split(","))
    if DEFAULT_FORECASTER not in models:
        models = (*models, DEFAULT_FORECASTER)
    t_start = time.perf_counter()
    cmd = "python -m benchmarks.forecast_accuracy " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"# forecast accuracy  (`{cmd.strip()}`)\n")
    print(f"machine: {machine_line()}, numpy {np.__version__} (shared machine: other work ran concurrently)\n")
    cache = open_cache(args.cache)
    if args.from_rows:
        rows = pd.concat([pd.read_csv(p) for p in args.from_rows.split(",")], ignore_index=True)
        rows["run"] = rows["run"].fillna("full") if "run" in rows else "full"
    else:
        frames = []
        for ds in args.datasets.split(","):
            series = load(ds, args.part, args.vms)
            if args.part == "young":  # only the young tasks' rows at their origins
                if ds != "google2019":
                    ap.error("--part young is the Google 2019 young-task set: use --datasets google2019")
                subset = young_origins(series)
                origins = np.array(sorted(subset))
            else:
                origins = split_origins(series, pick_origins(series, args.origins, np.random.default_rng(args.seed)),
                                        args.part)
                subset = (library_subset(ds, origins, series, args.lib_origins, args.lib_nodes, args.seed)
                          if args.part == "report" else {})
            if args.library_pass:
                origins = np.array(sorted(subset))
            rows, lib_used = evaluate(ds, series, origins, models, subset, cache,
                                      args.library_pass or args.part == "young")
            rows.insert(0, "dataset", ds)
            rows.insert(1, "run", "library" if args.library_pass else "full")
            if args.library_pass:
                rows = rows[rows.lib]
            frames.append(rows)
            print(f"- {ds}: {len(series)} series; {len(origins)} {args.part} origins of {args.origins} (seed {args.seed}); "
                  f"library subset: {lib_used} of {len(subset)} drawn origins fitted in time")
        rows = pd.concat(frames, ignore_index=True)
        if args.rows:
            rows.to_csv(args.rows, index=False)
    for ds, d in rows.groupby("dataset", sort=False):
        lib, d = d[d.lib], d[d.run == "full"]
        lib = lib[(lib.model == DEFAULT_FORECASTER) & (lib.horizon == HORIZONS_S[0])]
        print(f"- {ds}: {d.key.nunique()} series, {d.origin.nunique()} origins, "
              f"{len(d[(d.model == DEFAULT_FORECASTER) & (d.horizon == HORIZONS_S[0])])} series x origins; library "
              f"subset: {lib.origin.nunique()} origins, {len(lib)} series x origins")
    print("\n".join(report(rows)))
    if args.speed_runs:
        times = speed_check(DEFAULT_FORECASTER, runs=args.speed_runs)
        print(f"\nspeed: {DEFAULT_FORECASTER}.forecast_many, 1,000 nodes x (cpu, memory) x 7 days: median "
              f"{np.median(times):.2f} s of {len(times)} runs ({', '.join(f'{t:.2f}' for t in times)})")
    print(f"total run time {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
