"""The forecasts the safe agent judges by: a forecast store refreshed from Prometheus in the background,
behind the NodeStatsSource the engine's agents read (``kso extender`` and ``kso scheduler`` alike)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from kso.core.stats import NodeStatsSource

log = logging.getLogger("kso.extender")


def start_forecasts(config: Any) -> tuple[NodeStatsSource, Callable[[], Any]] | None:
    """Forecast-backed statistics for ``config`` (extender.config.Config: its store, prometheus and forecast model
    settings), refreshed by an APScheduler job off the request path; None when
    forecasting is off. The first refresh starts at once but nobody waits for it: until it succeeds
    (and whenever forecasts go stale) the safe agent uses the node annotations."""
    if config.store is None or config.prometheus is None:  # forecasts off (extender.config.load_config)
        return None
    from datetime import datetime

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
