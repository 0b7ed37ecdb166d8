"""The forecast flags of every command that forecasts (``kso forecast``, ``annotate``, ``plan``, ``reoptimize``):
--prometheus / --trace (alternatives) and the forecast options, turned into a
forecasting.forecast_source.ForecastRequest. Only the command-line modules use this."""

from __future__ import annotations

import argparse

from forecasting.forecast_source import ForecastRequest
from forecasting.store import StoreSettings
from kso.core.settings import load_settings


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


def forecast_request(args: argparse.Namespace) -> ForecastRequest:
    """The ForecastRequest the flags of add_forecast_args name."""
    return ForecastRequest(prometheus=args.prometheus, trace=args.trace, horizon_s=args.horizon, model=args.model,
                           nodes=args.nodes, window_s=args.window, offset_s=args.offset)
