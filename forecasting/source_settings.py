"""Where kso's forecasts come from (KSO_FORECAST_SOURCE), declared once: kso extender's settings inherit it (the
safe agent's statistics, extender.config.ExtenderSettings) and kso plan / kso reoptimize read it when no flag
names a load source (forecasting.forecast_source.configured_prometheus). A module of its own, light to import:
every kso command checks the configuration against the declared settings before it starts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kso.core.settings import setting

PROMETHEUS_URL = "KSO_PROMETHEUS_URL"  # forecasting.prometheus.PrometheusSettings.url


@dataclass
class ForecastSourceSettings:
    """For kso extender: forecasts from Prometheus, refreshed in the background every KSO_FORECAST_REFRESH
    seconds, with node annotations standing in per node where a forecast is missing; or annotations only."""

    forecast_source: str = setting("KSO_FORECAST_SOURCE", "AUTO", kind="choice:AUTO,NONE,PROMETHEUS",
                                   help="where the safe agent's statistics come from (and kso plan's and kso reoptimize's "
                                        "node loads when no flag names a source); AUTO = Prometheus once "
                                        "KSO_PROMETHEUS_URL is set, else node annotations")

    def forecasts_from_prometheus(self, url_set: bool) -> bool:
        """Forecasts come from Prometheus: always with PROMETHEUS, with AUTO once KSO_PROMETHEUS_URL is set
        (``url_set``), never with NONE."""
        source = self.forecast_source.upper()  # the default is not normalised by a parser
        return source == "PROMETHEUS" or (source == "AUTO" and url_set)


def prometheus_url_set(env: Mapping[str, str], file_values: Mapping[str, Any]) -> bool:
    """Whether KSO_PROMETHEUS_URL is set (the environment over the config file): what AUTO asks, and what a
    settings class cannot tell from its default."""
    return bool(env.get(PROMETHEUS_URL, file_values.get(PROMETHEUS_URL)))
