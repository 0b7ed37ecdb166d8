"""``kso forecast`` and ``kso annotate`` (added to the ``kso`` command by kso/cli.py).

``forecast`` prints the forecast per node (mean, p95, std of utilisation, model, age of the newest
sample); ``annotate`` writes kube-safe-scheduler's node annotations (``mean-free-cpu``, ``std-free-cpu``,
``mean-free-memory``, ``std-free-memory``, ``forcasted-free-cpu``, ``forcasted-free-memory``; cpu in
millicores, memory in MB = bytes / 1024^2) computed from the forecasts and each node's allocatable, so
an unmodified kube-safe-scheduler (or kso's AnnotationStats) consumes kso's forecasts.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import orjson

from forecasting.cli_flags import add_forecast_args, forecast_request
from forecasting.forecast_source import DEFAULT_SERIES, refresh_once, source_failure, synthetic_join
from forecasting.store import ForecastStore
from forecasting.types import RESOURCES, NodeForecast
from kso.core.cli_flags import add_cluster_args, cluster_source
from kso.core.cluster import ANNOTATION_FORECAST_FREE, ANNOTATION_MEAN_FREE, ANNOTATION_STD_FREE
from kso.core.cluster_source import load_nodes
from kso.core.objects import NodeInfo
from kso.core.resources import CPU, MEMORY, MIB
from kso.core.settings import load_settings

SOURCE_ANNOTATION = "kso.io/forecast-source"  # says where the numbers came from (synthetic joins too)


def add_commands(subparsers: Any) -> None:
    """Add ``forecast`` and ``annotate`` to an argparse subparsers object (see the module docstring)."""
    fc = subparsers.add_parser("forecast", help="forecast node utilisation from Prometheus or a trace")
    add_forecast_args(fc)
    fc.add_argument("--json", action="store_true", help="print JSON instead of a table")
    fc.set_defaults(func=cmd_forecast)

    an = subparsers.add_parser("annotate", help="write kube-safe-scheduler node annotations from forecasts")
    add_forecast_args(an)
    an.add_argument("--dry-run", action="store_true", help="print the patches instead of applying them")
    add_cluster_args(an, demo=False, snapshot_help="read nodes from a snapshot file instead of the API (implies --dry-run)")
    an.add_argument("--assign-traces", action="store_true",
                    help="with --trace: give the trace's series to the cluster's nodes in name order "
                         "(a synthetic join, recorded in the kso.io/forecast-source annotation)")
    an.add_argument("--cost", metavar="FILE", help="write node costs instead: prices from FILE (YAML/JSON key: price, or CSV "
                    "key,price), keyed by node name or by --cost-label's value (kso.core.node_costs)")
    an.add_argument("--cost-label", action="append", metavar="LABEL",
                    help="node label whose value keys the price file (repeatable; default the instance-type labels)")
    an.add_argument("--random", action="store_true", help="demo only: random costs from the seed annotator's price list")
    an.add_argument("--seed", type=int, default=None, help="with --random: random seed")
    an.set_defaults(func=cmd_annotate)


def _compute(args: argparse.Namespace) -> tuple[ForecastStore, Any, float, str | None]:
    """Build the source and forecaster, refresh a store once; returns (store, source, now, why it failed)."""
    request = forecast_request(args)
    store, source, _ = refresh_once(request, args.nodes or DEFAULT_SERIES)
    return store, source, time.time(), source_failure(request, store, str(getattr(source, "url", "")))


def _rows(store: ForecastStore, now: float, limit: int | None) -> list[dict[str, Any]]:
    snap = store.snapshot(now)
    rows = []
    for node in sorted(snap)[: limit or None]:
        per = snap[node]
        row: dict[str, Any] = {"node": node}
        for res in RESOURCES:
            f: NodeForecast | None = per.get(res)
            row[res] = None if f is None else {"mean": f.mean, "p95": f.p95, "std": f.std, "p99": f.p99,
                                                 "model": f.model, "age_s": store.age_s(node, res, now),
                                                 "stale": f.stale, "flags": f.flags, "notes": f.notes}
        rows.append(row)
    return rows


def _pct(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:5.1f}%"


def cmd_forecast(args: argparse.Namespace) -> int:
    store, source, now, failure = _compute(args)
    rows = _rows(store, now, args.nodes)
    status = store.describe(now)
    if args.json:
        out = {"source": status["source"], "horizon_s": args.horizon, "model": status["model"],
               "error": status["last_error"], "notes": status["notes"], "nodes": rows}
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
        return 0 if status["last_error"] is None else 1
    if failure:
        print(f"kso forecast: {failure}", file=sys.stderr)
        return 1
    head = f"{'NODE':<24} {'CPU MEAN':>8} {'CPU P95':>8} {'CPU STD':>8} {'MEM MEAN':>8} {'MEM P95':>8} " \
           f"{'MEM STD':>8}  {'MODEL':<24} {'AGE':>7}"
    print(f"# source {status['source']}, horizon {args.horizon:.0f}s")
    print(head)
    for r in rows:
        c, m = r["cpu"] or {}, r["memory"] or {}
        ages = [x["age_s"] for x in (c, m) if x]
        age = max(ages) if ages else math.nan
        model = (c or m).get("model", "-")
        stale = " stale" if any(x.get("stale") for x in (c, m) if x) else ""
        print(f"{r['node']:<24} {_pct(c.get('mean')):>8} {_pct(c.get('p95')):>8} {_pct(c.get('std')):>8} "
              f"{_pct(m.get('mean')):>8} {_pct(m.get('p95')):>8} {_pct(m.get('std')):>8}  {model:<24} "
              f"{age:6.0f}s{stale}")
    for note in status["notes"]:
        print(f"# note: {note}")
    if stale := [r for r in rows if any(x and x.get("stale") for x in (r["cpu"], r["memory"]))]:
        ages = {r["node"]: max(x["age_s"] for x in (r["cpu"], r["memory"]) if x) for r in stale}
        print(f"# note: {len(stale)} of {len(rows)} forecasts stale: "
              + ", ".join(f"{n} (newest sample {age / 86400:.1f} days old)" for n, age in ages.items())
              + "; kso does not act on a stale forecast: the extender's safe agent falls back to the node annotations"
              " and `kso forecast annotate` leaves the node unchanged")
    return 0


def annotations_for(node: NodeInfo, forecasts: dict[str, NodeForecast], source: str) -> dict[str, str]:
    """kube-safe-scheduler annotations for one node: free = allocatable * (1 - mean utilisation),
    std = allocatable * std. ``forcasted-free-*`` equals ``mean-free-*``: the mean already is the forecast,
    so the safe agent's blend (1 - w) mean + w forecast leaves it unchanged, and kso's AnnotationStats and
    ForecastStats then give the same numbers. Resources without a usable forecast are left out."""
    cap = {"cpu": node.allocatable.get(CPU, math.nan), "memory": node.allocatable.get(MEMORY, math.nan) / MIB}
    out: dict[str, str] = {}
    for j, res in enumerate(RESOURCES):
        f = forecasts.get(res)
        c = cap[res]
        if f is None or not math.isfinite(f.mean) or not math.isfinite(c) or c <= 0:
            continue
        free = max(c * (1.0 - f.mean), 0.0)
        std = c * max(f.std, 0.0) if math.isfinite(f.std) else 0.0
        out[ANNOTATION_MEAN_FREE[j]] = f"{free:.0f}"
        out[ANNOTATION_STD_FREE[j]] = f"{std:.0f}"
        out[ANNOTATION_FORECAST_FREE[j]] = f"{free:.0f}"
    if out:
        out[SOURCE_ANNOTATION] = source
    return out


def _cluster_nodes(args: argparse.Namespace) -> tuple[list[NodeInfo], Any]:
    """The nodes (kso.core.cluster_source) and a CoreV1Api to patch them with (None for a snapshot)."""
    nodes, api_client, skipped = load_nodes(cluster_source(args))
    for line in skipped:
        print(f"kso annotate: {line}", file=sys.stderr)
    if api_client is None:
        return nodes, None
    from kubernetes import client

    return nodes, client.CoreV1Api(api_client)


def cmd_annotate_cost(args: argparse.Namespace) -> int:
    """``kso annotate --cost FILE | --random``: the cost annotation (KSO_PLAN_COST_KEY) per node."""
    from kso.core import node_costs

    if args.cost and args.random:
        print("error: --cost and --random are alternatives", file=sys.stderr)
        return 2
    try:
        prices = node_costs.load_prices(args.cost) if args.cost else {}
    except node_costs.PriceFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    nodes, api = _cluster_nodes(args)
    if args.random:
        per_node, missing = node_costs.random_prices(nodes, args.seed), []
    else:
        per_node, missing = node_costs.node_prices(nodes, prices, args.cost_label or node_costs.INSTANCE_TYPE_LABELS)
    for line in missing:
        print(f"# {line}; annotation left unchanged", file=sys.stderr)
    key = load_settings(node_costs.CostKeySettings).cost_key
    return _apply_patches(node_costs.cost_patches(per_node, key), api, args.dry_run, len(nodes))


def _apply_patches(patches: dict[str, dict[str, Any]], api: Any, dry_run: bool, total: int) -> int:
    if dry_run or api is None:
        for name, patch in patches.items():
            print(orjson.dumps({"node": name, "patch": patch}).decode())
        return 0
    failed = 0
    for name, patch in patches.items():
        try:
            api.patch_node(name, patch, _request_timeout=30)
        except Exception as exc:  # noqa: BLE001 - report every node, keep patching the others
            failed += 1
            print(f"error: patch {name}: {exc}", file=sys.stderr)
    print(f"annotated {len(patches) - failed} of {total} nodes")
    return 1 if failed else 0


def cmd_annotate(args: argparse.Namespace) -> int:
    if getattr(args, "cost", None) or getattr(args, "random", False):
        return cmd_annotate_cost(args)
    if args.assign_traces and not args.trace:
        print("error: --assign-traces needs --trace", file=sys.stderr)
        return 2
    nodes, api = _cluster_nodes(args)
    store, source, now, failure = _compute(args)
    if failure:
        print(f"kso annotate: {failure}", file=sys.stderr)
        return 1
    snap = store.snapshot(now)
    label = getattr(source, "name", "?")
    if args.assign_traces:
        assigned = synthetic_join((n.name for n in nodes), snap)
        per_node = {name: (snap[key], f"synthetic:{label}:{key}") for name, key in assigned.items()}
    else:
        per_node = {n.name: (snap[n.name], f"{label}:{store.model}") for n in nodes if n.name in snap}
    patches: dict[str, dict[str, Any]] = {}
    for node in nodes:
        if node.name not in per_node:
            print(f"# {node.name}: no forecast, annotations left unchanged", file=sys.stderr)
            continue
        fcs, src = per_node[node.name]
        fresh = {r: f for r, f in fcs.items() if not f.stale}
        ann = annotations_for(node, fresh, src)
        if ann:
            patches[node.name] = {"metadata": {"annotations": ann}}
    return _apply_patches(patches, api, args.dry_run, len(nodes))


def main(argv: list[str] | None = None) -> int:
    """``python -m forecasting.cli forecast|annotate ...``: these two commands without the rest of ``kso``."""
    parser = argparse.ArgumentParser(prog="kso")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
