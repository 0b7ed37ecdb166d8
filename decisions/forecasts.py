"""The forecasts the safe agent judges by: a forecast store refreshed from Prometheus in the background,
behind the NodeStatsSource the engine's agents read (``kso extender`` and ``kso scheduler`` alike)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import numpy as np

from kso.core.stats import NodeStatsSource

log = logging.getLogger("kso.extender")


def start_forecasts(config: Any) -> tuple[NodeStatsSource, Callable[[], Any]] | None:
    """Forecast-backed statistics for ``config`` (extender.config.Config: its store, prometheus and forecast model
    settings), refreshed by an APScheduler job off the request path; None when
    forecasting is off. The first refresh starts at once but nobody waits for it: until it succeeds
    (and whenever forecasts go stale) the safe agent uses the node annotations."""
    if config.store is None or config.prometheus is None:  # forecasts off (extender.config.load_config)
        return None
    from apscheduler.schedulers.background import BackgroundScheduler

    from forecasting.models import DEFAULT_FORECASTER, get_forecaster
    from forecasting.prometheus import PrometheusSource
    from forecasting.stats_source import ForecastStats
    from forecasting.store import ForecastStore
    from kso.core.stats import AnnotationStats

    store = ForecastStore(config.store)
    source = PrometheusSource(config.prometheus)
    forecaster = get_forecaster(config.settings.forecast_model or DEFAULT_FORECASTER)
    scheduler = BackgroundScheduler(daemon=True)
    scheduler.add_job(store.refresh, "interval", seconds=store.settings.refresh_s, args=(source, forecaster),
                      id="forecast-refresh", max_instances=1, coalesce=True, next_run_time=datetime.now())
    scheduler.start()
    log.info("forecasts: %s from %s every %.0f s", forecaster.name, source.settings.url, store.settings.refresh_s)
    return ForecastStats(store, AnnotationStats()), partial(scheduler.shutdown, wait=False)


# kso_forecast_refresh_failures_total's reasons, shown at 0 before the first failure (so rate() and alerts work)
FAILURE_REASONS = ("timeout", "unreachable", "http_error", "rejected", "bad_data", "no_node_names", "no_data",
                   "forecaster", "source_error")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ForecastHealth:
    """Whether kso judges the nodes of its cache with load data, for /metrics, /readyz, kso scheduler's status page and
    the shadow's report: where each node's statistics come from (a fresh forecast, node annotations, nothing), the age
    of the forecasts, the refreshes failed by reason, and since when kso has judged without a fresh forecast.

    ``stats``: the safe agent's ForecastStats (its store's RefreshStatus is the refresh side); ``state``: the node cache.
    Computed when asked (a scrape, a probe), in O(nodes)."""

    def __init__(self, stats: Any, state: Any, url: str = "", clock: Callable[[], float] = time.time) -> None:
        self.stats = stats
        self.store = stats.store
        self.state = state
        self.url = url
        self.clock = clock
        self._lock = threading.Lock()
        self._without_since: float | None = None

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        now = self.clock() if now is None else now
        st = self.store.status
        names = sorted(self.state.node_names())
        counts = {"forecast": 0, "partial": 0, "annotations": 0, "none": 0}
        ages: np.ndarray = np.zeros(0)
        if names:
            view = self.state.view(names)
            for src in self.stats.free_stats(view).source:
                # forecasting.stats_source: "forecast:MODEL", "forecast:MODEL+<the other resource's fallback>",
                # "annotations", "none" (a model's name may hold a "+" of its own: holt-winters+conformal)
                if src.startswith("forecast:"):
                    key = "partial" if src.endswith(("+none", "+annotations")) else "forecast"
                else:
                    key = "annotations" if src == "annotations" else "none"
                counts[key] += 1
            mean, _, age, _ = self.store.lookup(names, now)
            age = np.where(np.isfinite(mean), age, -np.inf).max(axis=1)
            ages = age[np.isfinite(age) & (age >= 0)]
        fresh = counts["forecast"] + counts["partial"]
        without = counts["none"]
        with self._lock:
            if fresh or not names:
                self._without_since = None
            elif self._without_since is None:
                until = self.store.fresh_until()
                self._without_since = until if until is not None and until <= now else \
                    (now if st.last_success is not None else st.started)
            since = self._without_since
        if st.last_error:
            why = (f"refreshes failing since {_iso(st.failing_since or now)} ({st.consecutive_failures} in a row, "
                   f"{st.last_reason}: {st.last_error})")
        elif st.last_success is None:
            why = "no refresh has succeeded yet"
        elif len(ages) == 0 and self.store.fresh_until() is not None:
            why = "no forecast names a node of the cache (KSO_PROMETHEUS_NODE_MAPPING?)"
        else:
            why = "every forecast older than KSO_FORECAST_STALE_AFTER"
        n = len(names)
        if not n:
            condition = "no nodes in the node cache"
        elif since is not None and without == n:
            condition = f"judging without load data since {_iso(since)}: no fresh forecast ({why}), no node annotations"
        elif since is not None and without:
            condition = (f"judging without load data since {_iso(since)} on {without} of {n} nodes (the others on their "
                         f"node annotations): no fresh forecast ({why})")
        elif since is not None:
            condition = f"judging on node annotations since {_iso(since)}: no fresh forecast ({why})"
        elif without:
            condition = f"forecasts for {fresh} of {n} nodes; {without} without load data (no forecast, no annotations)"
        else:
            condition = f"forecasts for {fresh} of {n} nodes" + (f", node annotations for {counts['annotations']}"
                                                                if counts["annotations"] else "")
        return {
            "source": self.url or st.source, "condition": condition,
            "without_load_data_since": None if since is None or without == 0 else _iso(since),
            "no_fresh_forecast_since": None if since is None else _iso(since),
            "nodes": n, "nodes_by_load_data": counts, "nodes_without_load_data": without,
            "forecast_age_s": ({"min": round(float(ages.min()), 1), "median": round(float(np.median(ages)), 1),
                                "max": round(float(ages.max()), 1)} if len(ages) else None),
            "refresh_failures": dict(st.failures), "last_refresh_s": st.last_duration_s, "last_read": st.last_read,
        }

    @property
    def no_fresh_since(self) -> float | None:
        """Since when (wall clock) no node of the cache has had a fresh forecast, as of the last snapshot."""
        with self._lock:
            return self._without_since

    def register(self, registry: Any, basics: bool = False) -> None:
        """Add the metrics to a prometheus_client registry; ``basics``: also the last-success, age and consecutive
        failure gauges (decisions.metrics.DecisionMetrics.watch_forecasts gives the engine's registry those)."""
        registry.register(_HealthCollector(self, basics))


class _HealthCollector:
    def __init__(self, health: ForecastHealth, basics: bool) -> None:
        self.health = health
        self.basics = basics

    def describe(self) -> list[Any]:
        return []  # collected at scrape time only (nothing to check at registration)

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        h = self.health
        st = h.store.status
        snap = h.snapshot()
        failures = CounterMetricFamily("kso_forecast_refresh_failures", "Forecast refreshes failed, by reason: timeout, "
                                       "unreachable, http_error, rejected (HTTP 4xx), bad_data, no_node_names, no_data, "
                                       "forecaster, source_error", labels=["reason"])
        for reason in dict.fromkeys((*FAILURE_REASONS, *st.failures)):
            failures.add_metric([reason], float(st.failures.get(reason, 0)))
        yield failures
        yield CounterMetricFamily("kso_forecast_refreshes", "Forecast refreshes that succeeded", value=float(st.successes))
        yield GaugeMetricFamily("kso_forecast_refresh_duration_seconds", "Wall time of the last forecast refresh "
                                "(reading the source and forecasting; NaN: none yet)",
                                value=math.nan if st.last_duration_s is None else float(st.last_duration_s))
        age = GaugeMetricFamily("kso_forecast_node_age_seconds", "Age of the newest sample behind the nodes' forecasts "
                                "(the older of cpu and memory), over the nodes of the cache that have one: min, median, "
                                "max (NaN: none)", labels=["stat"])
        ages = snap["forecast_age_s"] or {}
        for stat in ("min", "median", "max"):
            age.add_metric([stat], float(ages.get(stat, math.nan)))
        yield age
        nodes = GaugeMetricFamily("kso_forecast_nodes", "Nodes of the cache by where the safe agent's load data comes "
                                  "from: forecast (fresh, both resources), partial (one resource), annotations, none",
                                  labels=["source"])
        for key, count in snap["nodes_by_load_data"].items():
            nodes.add_metric([key], float(count))
        yield nodes
        yield GaugeMetricFamily("kso_forecast_nodes_without_load_data", "Nodes of the cache judged without load data "
                                "(no fresh forecast, no node annotations: the safe agent passes them unjudged)",
                                value=float(snap["nodes_without_load_data"]))
        since = h.no_fresh_since
        yield GaugeMetricFamily("kso_forecast_no_fresh_forecast_since_timestamp_seconds", "Since when no node of the "
                                "cache has had a fresh forecast (NaN: some have)",
                                value=math.nan if since is None else float(since))
        if self.basics:
            now = time.time()
            yield GaugeMetricFamily("kso_forecast_last_success_timestamp_seconds", "Wall clock of the last successful "
                                    "forecast refresh (NaN: none yet)",
                                    value=math.nan if st.last_success is None else float(st.last_success))
            yield GaugeMetricFamily("kso_forecast_consecutive_failures", "Forecast refreshes failed in a row since the "
                                    "last success", value=float(st.consecutive_failures))
            yield GaugeMetricFamily("kso_forecast_age_seconds", "Seconds since the last successful forecast refresh "
                                    "(+Inf: none yet)",
                                    value=math.inf if st.last_success is None else max(0.0, now - st.last_success))


def forecast_health(engine: Any, state: Any, url: str = "") -> ForecastHealth | None:
    """The ForecastHealth of an engine whose safe agent reads forecasts (a store behind its statistics); None when it
    reads annotations only (forecasts off)."""
    stats = getattr(getattr(engine, "agents", {}).get("safe"), "stats", None)
    if stats is None or getattr(stats, "store", None) is None:
        return None
    return ForecastHealth(stats, state, url)
