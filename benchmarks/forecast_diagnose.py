"""Where a model's Google 2019 forecasts miss: per row (task x origin x horizon) coverage and p95 pinball of
the model and the peers, by the task's history length at the origin and by origin.

    python -m benchmarks.forecast_diagnose [--part report] [--origins 40] [--model NAME] [--peers ibm,...]

History length = time since the task's first sample inside the 7-day window (a restart more than 7 days after
the previous run leaves only the new run); ``limit changed`` = the task's cpu_limit / memory_limit (the
utilisation's denominator) took more than one value in the 24 h before the origin.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from benchmarks.forecast_accuracy import model_factory
from benchmarks.forecast_data import GOOGLE, HORIZONS_S, live_at, load_google, pick_origins, split_origins
from forecasting.models._base import resample


def rows_for(part: str, n_origins: int, models: list[str], seed: int = 1) -> pd.DataFrame:
    series = load_google()
    origins = split_origins(series, pick_origins(series, n_origins, np.random.default_rng(seed)), part)
    raw = pd.read_csv(GOOGLE, usecols=["time", "collection_id", "instance_index", "cpu_limit", "memory_limit"])
    raw["t"] = raw.time / 1e6
    raw["key"] = "google/" + raw.collection_id.astype(str) + "/" + raw.instance_index.astype(str)
    limits = {k: g.sort_values("t") for k, g in raw.groupby("key")}
    forecasters = {m: model_factory(m)() for m in models}
    out = []
    for o in origins:
        hist, fut = live_at(series, float(o))
        grids = {rb: resample(hist, float(o), robust=rb) for rb in (False, True)}
        for hs in HORIZONS_S:
            y = fut[hs]
            fcs = {m: f.forecast_grid(grids[f.robust_input], hist, hs) for m, f in forecasters.items()}
            for i, s in enumerate(hist):
                g = limits[s.key]
                col = "cpu_limit" if s.resource == "cpu" else "memory_limit"
                past = g[(g.t > o - 86400.0) & (g.t <= o)][col]
                fin = np.isfinite(y[i])
                row = {"origin_day": o / 86400.0, "key": s.key, "resource": s.resource, "horizon_min": hs / 60,
                       "history_h": (o - s.t[0]) / 3600.0, "limit_changed": bool(past.nunique() > 1),
                       "n": int(fin.sum())}
                for m, fc in fcs.items():
                    d = y[i] - fc[i].p95
                    row[f"{m}|pin"] = float(np.where(fin, np.maximum(0.95 * d, -0.05 * d), 0.0).sum())
                    row[f"{m}|c95"] = int(((y[i] <= fc[i].p95) & fin).sum())
                    row[f"{m}|width"] = fc[i].p95 - s.y[-1]
                out.append(row)
    return pd.DataFrame(out)


def summary(d: pd.DataFrame, models: list[str]) -> list[str]:
    lines = []
    d = d.assign(history=pd.cut(d.history_h, [0, 12, 24, 48, np.inf], labels=["<12 h", "12-24 h", "24-48 h", ">48 h"]))
    for (r, hm), c in d.groupby(["resource", "horizon_min"], sort=False):
        lines.append(f"\n### {r}, {hm:.0f} min ({c.n.sum()} values; pin95 per value, p95 coverage)\n")
        head = "| rows by | rows | values | " + " | ".join(f"{m} pin95 | cov95" for m in models) + " |"
        lines += [head, "|---|---:|---:|" + "---:|---:|" * len(models)]
        for by in ("history", "limit_changed"):
            for k, g in c.groupby(by, observed=True):
                n = g.n.sum()
                cells = " | ".join(f"{g[m + '|pin'].sum() / n:.5f} | {100 * g[m + '|c95'].sum() / n:.1f}%" for m in models)
                lines.append(f"| {by} {k} | {len(g)} | {n} | {cells} |")
        miss = (c.n - c[f"{models[0]}|c95"]).groupby(c.origin_day.round(2)).sum().sort_values(ascending=False)
        tot = miss.sum()
        top = ", ".join(f"day {day:.2f}: {v} ({100 * v / max(tot, 1):.0f}%)" for day, v in miss.head(5).items())
        lines.append(f"\n{models[0]}: {tot} values above p95 (5% of the cell = {0.05 * c.n.sum():.0f}); "
                     f"the 5 origins with most: {top}")
        w = {m: float(np.median(c[f'{m}|width'])) for m in models}
        lines.append("median p95 - newest value: " + ", ".join(f"{m} {v:.4f}" for m, v in w.items()))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["report", "tune"], default="report")
    ap.add_argument("--origins", type=int, default=40)
    ap.add_argument("--model", default="holt-winters+conformal")
    ap.add_argument("--peers", default="ibm,last-value+conformal,ewma+conformal")
    args = ap.parse_args(argv)
    models = [args.model, *args.peers.split(",")]
    print(f"# Google 2019 rows by history length (`python -m benchmarks.forecast_diagnose --part {args.part} "
          f"--origins {args.origins} --model {args.model} --peers {args.peers}`)")
    print("\n".join(summary(rows_for(args.part, args.origins, models), models)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
