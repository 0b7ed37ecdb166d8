"""The forecasts a command reads (a ForecastRequest: Prometheus or a trace, and the forecast options), the
same way for ``kso forecast``, ``kso annotate``, ``kso plan`` and ``kso reoptimize`` (their flags:
forecasting.cli_flags); and the one synthetic join that gives a trace's series to a cluster's nodes.

Reading the cluster itself is kso.core.cluster_source (the layer below).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from forecasting.store import ForecastStore
from forecasting.types import NodeForecast
from kso.core.cluster_source import InputError

DEFAULT_SERIES = 20  # trace series read when neither --nodes nor a cluster says how many


@dataclass(frozen=True, slots=True)
class ForecastRequest:
    """What a command forecasts from: a Prometheus URL or a trace (NAME or CSV path; neither = no forecasts,
    nodes are judged on their annotations), the horizon (seconds), the model (None = the registry's default),
    how many nodes / trace series (None = as many as the caller has), and for a trace the seconds of history
    used and how far into the trace to start."""

    prometheus: str | None = None
    trace: str | None = None
    horizon_s: float = 900.0
    model: str | None = None
    nodes: int | None = None
    window_s: float | None = None
    offset_s: float = 0.0


def refresh_once(request: ForecastRequest, n_series: int) -> tuple[ForecastStore, Any, float | None]:
    """Build the source (``n_series`` trace series) and the forecaster, refresh a store once. Returns
    (store, source, the forecasts' "now": the trace's own clock, None for Prometheus = wall clock); a
    source that answers with an error is ``store.last_error``. Raises InputError for an unknown model,
    an unreadable trace or an unusable Prometheus URL."""
    from forecasting.models import DEFAULT_FORECASTER, get_forecaster

    try:
        forecaster = get_forecaster(request.model or DEFAULT_FORECASTER)
    except (KeyError, ValueError) as exc:
        raise InputError(f"forecasting model: {exc}") from None
    source: Any
    now: float | None = None
    if request.trace:
        from forecasting.traces import TraceError, TraceSource

        try:
            source = TraceSource(request.trace, n_series=n_series, window_s=request.window_s,
                                 start_offset_s=request.offset_s)
            # A trace's clock is its own: ages are measured from the trace's end, not from today.
            now = source.now()
        except (TraceError, OSError, ValueError) as exc:
            text = str(exc)  # TraceError already names the trace
            raise InputError(text if text.startswith(f"trace {request.trace}")
                             else f"trace {request.trace}: {text}") from None
    else:
        from forecasting.prometheus import PrometheusSource

        if request.prometheus:
            check_prometheus_url(request.prometheus)
        try:
            source = PrometheusSource(url=request.prometheus)
        except Exception as exc:  # noqa: BLE001 - bad URL or settings
            raise InputError(f"prometheus {request.prometheus}: {exc}") from None
    store = ForecastStore()
    with _said_by_the_command():
        store.refresh(source, forecaster, request.horizon_s, now=now)
    return store, source, now


def check_prometheus_url(url: str) -> None:
    """InputError unless ``url`` is an http(s) URL with a host; for ``host:port`` it suggests ``http://host:port``."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.hostname:
        return
    guess = "http://" + (url.split("://", 1)[1] if "://" in url else url)
    raise InputError(f"Prometheus URL {url!r} is not an http:// or https:// URL; did you mean {guess}?")


@contextmanager
def _said_by_the_command() -> Iterator[None]:
    """A command reports a failed refresh itself, in one line (source_failure); the store's warning and
    urllib3's retry warning, there for the extender's log, would say the same again on the terminal."""
    loggers = [logging.getLogger(name) for name in ("kso.forecasting.store", "urllib3.connectionpool")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def source_failure(request: ForecastRequest, store: ForecastStore, url: str = "") -> str | None:
    """One line saying why the refresh of ``store`` failed (the source and the cause; for a connection that
    failed, the operating system's words), or None when it did not. ``url``: the Prometheus read when no flag
    named one (KSO_PROMETHEUS_URL's value)."""
    error = store.last_error
    if error is None:
        return None
    where = (f"trace {request.trace}" if request.trace else f"Prometheus {request.prometheus}" if request.prometheus
             else f"Prometheus {url} (KSO_PROMETHEUS_URL)" if url else "Prometheus KSO_PROMETHEUS_URL")
    refused = re.search(r"\[Errno -?\d+\] ([^'\"()\]]+)", error)
    if refused and not request.trace:
        return f"{where}: cannot connect ({refused.group(1).strip()})"
    if "timed out" in error.lower() and not request.trace:
        return f"{where}: no answer within KSO_PROMETHEUS_TIMEOUT"
    return f"{where}: {error}"


def synthetic_join(node_names: Iterable[str], series_keys: Iterable[str]) -> dict[str, str]:
    """Node name -> trace series key: the i-th series (by key) stands for the i-th node (by name). A
    synthetic join, said so wherever it is used; extra nodes or series are left out."""
    return dict(zip(sorted(node_names), sorted(series_keys), strict=False))


def node_forecasts(request: ForecastRequest, node_names: Iterable[str]) -> tuple[dict[str, dict[str, NodeForecast]] | None,
                                                                                  float | None, str]:
    """(forecasts by node and resource, their "now", where the load comes from) for a cluster's nodes.
    Without --prometheus or --trace: (None, None, ...) and the caller judges nodes on their annotations.
    A trace's series are given to the nodes by synthetic_join. Raises InputError when the forecasts
    cannot be had."""
    if not (request.prometheus or request.trace):
        return None, None, "node annotations (kube-safe-scheduler) where present, else the pods' requests"
    names = sorted(node_names)
    store, _, now = refresh_once(request, request.nodes or len(names))
    failure = source_failure(request, store)
    if failure:
        hint = "" if request.trace else "; without --prometheus the nodes are judged on their annotations"
        raise InputError(f"forecasts failed: {failure}{hint}")
    snap = store.snapshot(now)
    if request.trace:
        joined = synthetic_join(names, snap)
        mapped = {node: {r: dataclasses.replace(f, node=node) for r, f in snap[key].items()} for node, key in joined.items()}
        return mapped, now, (f"trace {request.trace} ({store.model}); series given to the nodes in name order, "
                             "a synthetic join")
    return snap, None, f"prometheus {request.prometheus} ({store.model})"


def configured_prometheus(config_file: str | None) -> str | None:
    """The Prometheus of kso's settings, for a run whose flags name no load source: by kso extender's rule
    (forecasting.source_settings: KSO_FORECAST_SOURCE AUTO = once KSO_PROMETHEUS_URL is set, PROMETHEUS = always,
    NONE = never; the environment over the --config file), so a command run beside kso extender (the reoptimize
    CronJob reads kso-settings) judges nodes on the same forecasts. ConfigError for a value its setting does not
    accept (kso.cli has checked every KSO_ value of both before the command runs)."""
    from forecasting.prometheus import PrometheusSettings
    from forecasting.source_settings import ForecastSourceSettings, prometheus_url_set
    from kso.core.settings import load_settings, read_config_file

    file_values = read_config_file(config_file)
    source = load_settings(ForecastSourceSettings, None, file_values)
    if not source.forecasts_from_prometheus(prometheus_url_set(os.environ, file_values)):
        return None
    return load_settings(PrometheusSettings, None, file_values).url


def node_forecasts_or_settings(request: ForecastRequest, node_names: Iterable[str], config_file: str | None,
                               say: Any) -> tuple[dict[str, dict[str, NodeForecast]] | None, float | None, str,
                                                  ForecastRequest]:
    """node_forecasts, from the Prometheus of kso's settings (configured_prometheus) when the flags name no source
    (--prometheus / --trace); and the request that was used (its ``prometheus`` None when none was). A source that
    fails is an error (InputError, one line), whether a flag or the settings named it: a one-shot command does not
    plan or move pods on the annotations because KSO_PROMETHEUS_URL is wrong or down (KSO_FORECAST_SOURCE=NONE is
    how to run without it). ``say`` is kept for the callers' signature."""
    from_settings = not (request.prometheus or request.trace)
    if from_settings:
        request = dataclasses.replace(request, prometheus=configured_prometheus(config_file))
    try:
        forecasts, now, load_from = node_forecasts(request, node_names)
    except InputError as exc:
        if not (from_settings and request.prometheus):
            raise
        failure = str(exc).split("; without --prometheus", 1)[0]
        raise InputError(f"{failure} (KSO_PROMETHEUS_URL, from kso's settings; KSO_FORECAST_SOURCE=NONE judges the "
                         "nodes on their annotations without it)") from None
    return forecasts, now, load_from, request
