"""One row per cluster size from benchmarks.e2e's --json files (a before/after run: kso of this tree as ``kso``, the
tree before as a ``--kso-env "KSO_BENCH_TREE=...;KSO_BENCH_CONFIGS=kso,kso-bind"`` variant):

    python -m benchmarks.e2e_summary RUN.json [RUN.json ...]

Per file, medians over its rounds: the extender's CPU per pod (trivial / kso before / kso after, and kso binding),
kso's filter p50 / p99, kube-scheduler's CPU per pod (alone / with kso after), RSS at the end of the runs (peak) of
kso before / after and of kube-scheduler alone, each kso's seconds to /readyz against kube-scheduler's seconds to its
first bind (alone), pods/s as a ratio to alone, the load average."""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any


def _med(values: list[float]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan


def _role(config: str) -> str:
    """``kso``/``kso-bind`` (this tree), ``kso-before``/``kso-bind-before`` (a KSO_BENCH_TREE variant), or as is."""
    base, _, label = config.partition("[")
    return f"{base}-before" if "KSO_BENCH_TREE" in label else config


def _f(x: float, digits: int = 2) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def summary_row(data: dict[str, Any]) -> str:
    setup, runs = data["setup"], data["runs"]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault(_role(r["config"]), []).append(r)

    def med(role: str, get: Any) -> float:
        return _med([get(r) for r in by.get(role, [])])

    def cpu(role: str) -> float:
        return med(role, lambda r: r["extender_cpu_ms"])

    def filt(role: str, key: str) -> float:
        return med(role, lambda r: r["verbs"]["filter"][key] if r["verbs"].get("filter", {}).get("calls") else math.nan)

    def rss(roles: tuple[str, ...], who: str) -> str:
        rs = [r for role in roles for r in by.get(role, [])]
        end = _med([r[who]["rss_mib"] for r in rs])
        peak = max((r[who]["hwm_mib"] for r in rs if not math.isnan(r[who]["hwm_mib"])), default=math.nan)
        return f"{_f(end, 0)} ({_f(peak, 0)})"

    anchor = med("alone", lambda r: r["scheduler_first_bind_s"])
    ready = {("before" if "KSO_BENCH_TREE" in s["label"] else "after"): s for s in setup["startups"]
             if s["label"].startswith("kso")}

    def start(which: str) -> str:
        s = ready.get(which)
        return "-" if s is None else f"{s['ready_s']:.1f} ({s['ready_s'] / anchor:.1f}x)"

    ratio = " / ".join(_f(med(role, lambda r: r["ratio"])) for role in
                       ("trivial", "kso-before", "kso", "kso-bind-before", "kso-bind"))
    return (f"| {setup['nodes']:,} ({setup['bound_pods']:,}) | {setup['pods']:,} | "
            f"{_f(cpu('trivial'))} / {_f(cpu('kso-before'))} / {_f(cpu('kso'))} | "
            f"{_f(cpu('kso-bind-before'))} / {_f(cpu('kso-bind'))} | "
            f"{_f(filt('kso-before', 'p50_ms'))} / {_f(filt('kso-before', 'p99_ms'), 1)} -> "
            f"{_f(filt('kso', 'p50_ms'))} / {_f(filt('kso', 'p99_ms'), 1)} | "
            f"{_f(med('alone', lambda r: r['scheduler_cpu_ms']))} / {_f(med('kso', lambda r: r['scheduler_cpu_ms']))} | "
            f"{rss(('kso-before', 'kso-bind-before'), 'extender_memory')} / {rss(('kso', 'kso-bind'), 'extender_memory')}"
            f" / {rss(('alone',), 'scheduler_memory')} | {start('before')} / {start('after')} vs {_f(anchor, 1)} | "
            f"{ratio} | {_f(_med([r['load1'] for r in runs]), 1)} |")


HEADER = ("| nodes (bound pods) | pending pods per run | extender CPU ms/pod: trivial / kso before / kso after | "
          "kso-bind CPU ms/pod before / after | kso filter p50 / p99 ms, before -> after | kube-scheduler CPU ms/pod "
          "alone / with kso after | RSS MiB at run end (peak): kso before / kso after / kube-scheduler alone | "
          "s to /readyz kso before / after (x kube-scheduler's) vs kube-scheduler's start to first bind | pods/s "
          "ratio to alone: trivial / kso before / after / kso-bind before / after | load avg |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.e2e_summary", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN.json", help="benchmarks.e2e --json files, one per cluster size")
    args = ap.parse_args(argv)
    rows = []
    for path in args.runs:
        try:
            rows.append(summary_row(json.loads(Path(path).read_text())))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            ap.exit(2, f"e2e_summary: {path} is not a benchmarks.e2e --json file: {type(exc).__name__}: {exc}\n")
    print(HEADER)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
