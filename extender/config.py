"""The extender's settings and every enabled agent's parameters, parsed in one place."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.agents import AGENTS
from kso.settings import load_settings, read_config_file, setting

# Weights of the original deployment (safe-overload 1, safe-balance 10, pigeon 10), plus kso's
# congestion and size-aware image scores at 1. They only matter relative to each other: the combined
# score is their weighted mean, on 0..10.
DEFAULT_WEIGHTS = {"safe-overload": 1, "safe-balance": 10, "pigeon-holing": 10, "congestion": 1,
                   "image-locality": 1}


@dataclass
class ExtenderSettings:
    http_port: int = setting("HTTP_PORT", 80, lo=1, hi=65535)
    host: str = setting("KSO_HOST", "0.0.0.0")
    log_level: str = setting("LOG_LEVEL", "INFO")
    url_prefix: str = setting("KSO_URL_PREFIX", "", help="prefix of /filter, /prioritize, /bind, /preempt")
    agents: list[str] = setting("KSO_AGENTS", ["safe", "pigeon", "congestion", "image"], kind="list")
    weights: dict[str, int] = setting("KSO_WEIGHTS", DEFAULT_WEIGHTS, kind="weights")
    # Predicates used by the combined /filter; empty = every predicate of the enabled agents.
    filters: list[str] = setting("KSO_FILTERS", [], kind="list")
    max_body_bytes: int = setting("KSO_MAX_BODY_BYTES", 64 * 1024 * 1024, lo=1024)
    cluster_source: str = setting("KSO_CLUSTER_SOURCE", "auto", kind="choice:AUTO,API,SNAPSHOT,DEMO")
    snapshot_path: str = setting("KSO_SNAPSHOT", "")
    kubeconfig: str = setting("KUBECONFIG", "")
    cache_sync_timeout_s: float = setting("KSO_CACHE_SYNC_TIMEOUT_S", 60.0, lo=0)
    # Where the safe agent's statistics come from: forecasts from Prometheus (refreshed in the background
    # every KSO_FORECAST_REFRESH seconds), falling back to node annotations per node. AUTO = PROMETHEUS
    # when KSO_PROMETHEUS_URL is set, else annotations only.
    forecast_source: str = setting("KSO_FORECAST_SOURCE", "AUTO", kind="choice:AUTO,NONE,PROMETHEUS")
    forecast_model: str = setting("KSO_FORECAST_MODEL", "", help="forecaster name; empty = the default")


@dataclass
class Config:
    settings: ExtenderSettings
    agent_params: dict[str, Any] = field(default_factory=dict)
    # The variables this config was read from (environment, then file), for the layers that parse their
    # own settings dataclasses from the same place (forecasting's Prometheus and store settings).
    env: dict[str, str] = field(default_factory=dict)

    def validate(self) -> list[str]:
        """Problems that make the configuration unusable, each a sentence."""
        problems = [f"KSO_AGENTS names unknown agent {a!r} (known: {', '.join(AGENTS)})"
                    for a in self.settings.agents if a not in AGENTS]
        return problems


def load_config(env: Mapping[str, str] | None = None, config_file: str | None = None) -> Config:
    env = os.environ if env is None else env
    file_values = read_config_file(config_file or env.get("KSO_CONFIG"))
    settings = load_settings(ExtenderSettings, env, file_values)
    params = {name: load_settings(cls.Params, env, file_values) for name, cls in AGENTS.items()}
    merged = {**{k: str(v) for k, v in file_values.items()}, **env}
    return Config(settings, params, merged)
