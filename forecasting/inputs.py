"""The forecast source a command reads: ``--prometheus URL`` or ``--trace NAME|PATH`` and the forecast
options, parsed the same way for ``kso forecast``, ``kso annotate``, ``kso plan`` and ``kso reoptimize``;
and the one synthetic join that gives a trace's series to a cluster's nodes.

Reading the cluster itself is kso.core.inputs (the layer below).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable
from typing import Any

from forecasting.store import ForecastStore, StoreSettings
from forecasting.types import NodeForecast
from kso.core.inputs import InputError
from kso.core.settings import load_settings

DEFAULT_SERIES = 20  # trace series read when neither --nodes nor a cluster says how many


def add_forecast_args(p: argparse.ArgumentParser) -> None:
    """--prometheus / --trace (alternatives) and the forecast options."""
    store_defaults = load_settings(StoreSettings)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prometheus", metavar="URL", help="Prometheus URL (default: KSO_PROMETHEUS_URL)")
    src.add_argument("--trace", metavar="NAME|PATH",
                     help="bitbrains, alibaba, embedded, or a CSV path in one of their layouts")
    p.add_argument("--horizon", type=float, default=store_defaults.horizon_s,
                   help="forecast horizon, seconds (default: KSO_FORECAST_HORIZON)")
    p.add_argument("--model", default=None, help="forecasting model (default: the registry's default)")
    p.add_argument("--nodes", type=int, default=None, metavar="N", help="only the first N nodes / trace series")
    p.add_argument("--window", type=float, default=None, metavar="S", help="trace: seconds of history used")
    p.add_argument("--offset", type=float, default=0.0, metavar="S", help="trace: start this far into the trace")


def refresh_once(args: argparse.Namespace, n_series: int) -> tuple[ForecastStore, Any, float | None]:
    """Build the source (``n_series`` trace series) and the forecaster, refresh a store once. Returns
    (store, source, the forecasts' "now": the trace's own clock, None for Prometheus = wall clock); a
    source that answers with an error is ``store.last_error``. Raises InputError for an unknown model,
    an unreadable trace or an unusable Prometheus URL."""
    from forecasting.models import DEFAULT_FORECASTER, get_forecaster

    try:
        forecaster = get_forecaster(args.model or DEFAULT_FORECASTER)
    except (KeyError, ValueError) as exc:
        raise InputError(f"forecasting model: {exc}") from None
    source: Any
    now: float | None = None
    if args.trace:
        from forecasting.traces import TraceError, TraceSource

        try:
            source = TraceSource(args.trace, n_series=n_series, window_s=args.window, start_offset_s=args.offset)
            # A trace's clock is its own: ages are measured from the trace's end, not from today.
            now = source.now()
        except (TraceError, OSError, ValueError) as exc:
            text = str(exc)  # TraceError already names the trace
            raise InputError(text if text.startswith(f"trace {args.trace}") else f"trace {args.trace}: {text}") from None
    else:
        from forecasting.prometheus import PrometheusSource

        try:
            source = PrometheusSource(url=args.prometheus)
        except Exception as exc:  # noqa: BLE001 - bad URL or settings
            raise InputError(f"prometheus {args.prometheus}: {exc}") from None
    store = ForecastStore()
    store.refresh(source, forecaster, args.horizon, now=now)
    return store, source, now


def synthetic_join(node_names: Iterable[str], series_keys: Iterable[str]) -> dict[str, str]:
    """Node name -> trace series key: the i-th series (by key) stands for the i-th node (by name). A
    synthetic join, said so wherever it is used; extra nodes or series are left out."""
    return dict(zip(sorted(node_names), sorted(series_keys), strict=False))


def node_forecasts(args: argparse.Namespace, node_names: Iterable[str]) -> tuple[dict[str, dict[str, NodeForecast]] | None,
                                                                                  float | None, str]:
    """(forecasts by node and resource, their "now", where the load comes from) for a cluster's nodes.
    Without --prometheus or --trace: (None, None, ...) and the caller judges nodes on their annotations.
    A trace's series are given to the nodes by synthetic_join. Raises InputError when the forecasts
    cannot be had."""
    if not (args.prometheus or args.trace):
        return None, None, "node annotations (kube-safe-scheduler) where present, else the pods' requests"
    names = sorted(node_names)
    store, _, now = refresh_once(args, args.nodes or len(names))
    if store.last_error:
        where = f"trace {args.trace}" if args.trace else f"Prometheus {args.prometheus}"
        hint = "" if args.trace else " (run without --prometheus to use the node annotations)"
        raise InputError(f"forecasts from {where} failed: {store.last_error}{hint}")
    snap = store.snapshot(now)
    if args.trace:
        joined = synthetic_join(names, snap)
        mapped = {node: {r: dataclasses.replace(f, node=node) for r, f in snap[key].items()} for node, key in joined.items()}
        return mapped, now, (f"trace {args.trace} ({store.model}); series given to the nodes in name order, "
                             "a synthetic join")
    return snap, None, f"prometheus {args.prometheus} ({store.model})"
