"""statsforecast peers for benchmarks/forecast_accuracy.py, fitted on a random subset of nodes x origins.

    python -m benchmarks.forecast_library --dataset bitbrains[,alibaba2018,...] [--origins 60] [--lib-origins 12 --lib-nodes 8]

Peers (``pip install -e '.[bench-forecast]'``): statsforecast's AutoETS (non-seasonal: its ETS does not
take a 288-bin season), AutoARIMA (non-seasonal: a seasonal ARIMA with m = 288 does not fit in time) and
MSTL (daily season, AutoETS trend), each with its own (model) intervals and as ``+conformal`` with
statsforecast's ConformalIntervals (split conformal of the same point forecasts over
``LIB_CONFORMAL_WINDOWS`` refitted windows). Their forecasts are per step, so their p95 / p99 are per future
bin (an advantage over kso's one band per horizon). They fit on the last ``LIB_HISTORY_BINS`` of the raw
5-minute grid.

Why a subset: AutoARIMA + its conformal windows costs seconds per series, so the library models are fitted
on ``lib_nodes`` random nodes (both resources) at ``lib_origins`` random origins of the reporting part
(seeded; ``library_subset``). This command fits them into ``--cache`` origin by origin, so it can run in the
background and the accuracy benchmark uses every origin that was fitted in time (it says how many). Several
datasets in one run take turns origin by origin. A .tar.gz of the cache's files (e.g.
benchmarks/figures/forecast-library-fits-s8.tar.gz) is read by ``forecast_accuracy --cache``: no refits.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import zip_longest
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.forecast_data import HORIZONS_S, live_at, load, pick_origins, split_origins
from forecasting.models._base import STEP_S, Grid, resample
from forecasting.types import UtilisationSeries

LIB_BASE = ("sf-autoets", "sf-autoarima", "sf-mstl")
LIB_MODELS = LIB_BASE + tuple(f"{m}+conformal" for m in LIB_BASE)
LIB_HISTORY_BINS = {"sf-autoets": 576, "sf-autoarima": 576, "sf-mstl": 864}  # 2, 2 and 3 days
LIB_CONFORMAL_WINDOWS = 3
DATASETS = ("bitbrains", "alibaba2018", "google2019")
DEFAULT_CACHE = os.environ.get("KSO_BENCH_CACHE", str(Path.home() / ".cache/kso-forecast-bench"))


def library_subset(dataset: str, origins: np.ndarray, series: list[UtilisationSeries], lib_origins: int,
                   lib_nodes: int, seed: int) -> dict[float, set[str]]:
    """origin -> node keys the library models are fitted for: ``lib_origins`` origins drawn at random from
    ``origins`` and at each up to ``lib_nodes`` of the nodes live there (both resources), seeded."""
    rng = np.random.default_rng([seed, sum(map(ord, dataset))])
    chosen = np.sort(rng.choice(origins, size=min(lib_origins, len(origins)), replace=False))
    out: dict[float, set[str]] = {}
    for o in chosen:
        hist, _ = live_at(series, float(o))
        nodes = sorted({s.key for s in hist})
        pick = rng.choice(len(nodes), size=min(lib_nodes, len(nodes)), replace=False) if nodes else []
        out[float(o)] = {nodes[i] for i in pick}
    return out


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


def cache_path(cache: Path, dataset: str, origin: float, name: str) -> Path:
    return cache / f"{dataset}-{origin:.0f}-{name}.npz"


def fit_library(grid: Grid, keys: list[str], h: int, name: str) -> dict[str, np.ndarray]:
    """Per row of ``grid`` (the raw 5-minute grid): the mean over steps 1..h, p95 and p99 per step, of one
    statsforecast model fitted on the last LIB_HISTORY_BINS[base] observed-or-filled bins; and the seconds."""
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
    mean_steps = out[name].to_numpy().reshape(S, h)
    p95 = np.maximum(out[f"{name}-hi-90"].to_numpy().reshape(S, h), mean_steps)
    p99 = np.maximum(out[f"{name}-hi-98"].to_numpy().reshape(S, h), p95)
    return {"keys": np.array(keys), "mean_steps": mean_steps, "p95": p95, "p99": p99, "seconds": np.array(seconds)}


def load_cached(cache: Path, dataset: str, origin: float, name: str) -> dict[str, np.ndarray] | None:
    path = cache_path(cache, dataset, origin, name)
    if not path.exists():
        return None
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True,
                    help="bitbrains, alibaba2018, google2019, or several comma-separated (their origins interleaved)")
    ap.add_argument("--vms", type=int, default=200)
    ap.add_argument("--origins", type=int, default=60)
    ap.add_argument("--lib-origins", type=int, default=12)
    ap.add_argument("--lib-nodes", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", default=DEFAULT_CACHE)
    args = ap.parse_args(argv)
    datasets = args.dataset.split(",")
    if bad := [d for d in datasets if d not in DATASETS]:
        ap.error(f"unknown dataset(s) {', '.join(bad)}; known: {', '.join(DATASETS)}")
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    h = round(max(HORIZONS_S) / STEP_S)
    queues = []
    for ds in datasets:
        series = load(ds, "report", args.vms)
        origins = split_origins(series, pick_origins(series, args.origins, np.random.default_rng(args.seed)), "report")
        subset = library_subset(ds, origins, series, args.lib_origins, args.lib_nodes, args.seed)
        # origins in a random order, every model at each: whatever finishes in time is a balanced subset
        order = np.random.default_rng(args.seed).permutation(sorted(subset))
        queues.append([(ds, series, subset, float(o)) for o in order])
    # one origin of each dataset in turn, so a run stopped early has fitted all datasets alike
    for ds, series, subset, origin in (job for rnd in zip_longest(*queues) for job in rnd if job is not None):
        hist, _ = live_at(series, origin)
        hist = [s for s in hist if s.key in subset[origin]]
        grid = resample(hist, origin, robust=False)
        keys = [f"{s.key}/{s.resource}" for s in hist]
        for name in LIB_MODELS:
            path = cache_path(cache, ds, origin, name)
            if path.exists():
                continue
            res = fit_library(grid, keys, h, name)
            np.savez(path, **res)
            print(f"{ds} {origin:.0f} {name}: {len(keys)} series, {float(res['seconds']):.1f} s",
                  file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
