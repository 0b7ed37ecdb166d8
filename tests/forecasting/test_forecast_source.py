"""forecasting.forecast_source: the forecasts a command reads (a ForecastRequest: Prometheus or a trace), the
synthetic join of trace series to nodes; and forecasting.cli_flags, the flags that name the request."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from forecasting.cli_flags import add_forecast_args, forecast_request
from forecasting.forecast_source import (
    ForecastRequest,
    configured_prometheus,
    node_forecasts,
    refresh_once,
    synthetic_join,
)
from kso.core.cluster_source import ClusterSource, InputError, load_cluster
from kso.core.settings import ConfigError


def test_the_flags_name_a_forecast_request() -> None:
    p = argparse.ArgumentParser()
    add_forecast_args(p)
    got = forecast_request(p.parse_args(["--trace", "embedded", "--model", "ewma", "--nodes", "3", "--window", "600",
                                         "--offset", "60", "--horizon", "300"]))
    assert got == ForecastRequest(trace="embedded", horizon_s=300.0, model="ewma", nodes=3, window_s=600.0, offset_s=60.0)
    with pytest.raises(SystemExit):  # alternatives
        p.parse_args(["--trace", "embedded", "--prometheus", "http://127.0.0.1:9"])


def test_synthetic_join_pairs_series_and_nodes_in_sorted_order() -> None:
    assert synthetic_join(["n-b", "n-a", "n-c"], ["s2", "s1"]) == {"n-a": "s1", "n-b": "s2"}
    assert synthetic_join([], ["s1"]) == {}


def test_trace_forecasts_are_keyed_by_the_clusters_nodes() -> None:
    # kso plan --trace used to key the forecasts by series (vm-001...), so no node of the cluster had one.
    request = ForecastRequest(trace="embedded", model="last-value")
    state = load_cluster(ClusterSource(demo=True)).state
    forecasts, now, load_from = node_forecasts(request, state.node_names())
    assert forecasts is not None and now is not None
    assert sorted(forecasts) == sorted(state.node_names())
    store, _, _ = refresh_once(request, len(forecasts))
    by_series = store.snapshot(now)
    for node, key in synthetic_join(state.node_names(), by_series).items():
        assert forecasts[node]["cpu"].mean == by_series[key]["cpu"].mean
        assert forecasts[node]["cpu"].node == node
    assert "synthetic join" in load_from


def test_without_a_forecast_source_the_nodes_are_judged_on_annotations() -> None:
    forecasts, now, load_from = node_forecasts(ForecastRequest(), ["n1"])
    assert forecasts is None and now is None and "annotations" in load_from


def test_unknown_trace_or_model_is_an_input_error() -> None:
    with pytest.raises(InputError, match="trace nosuch"):
        node_forecasts(ForecastRequest(trace="nosuch"), ["n1"])
    with pytest.raises(InputError, match="forecasting model"):
        node_forecasts(ForecastRequest(trace="embedded", model="no-such-model"), ["n1"])


@pytest.mark.parametrize(("env", "file", "want"), [
    ({}, {}, None),  # AUTO without a URL: the annotations
    ({"KSO_PROMETHEUS_URL": "http://prom:9090"}, {}, "http://prom:9090"),
    ({}, {"KSO_PROMETHEUS_URL": "http://file:9090"}, "http://file:9090"),
    ({"KSO_FORECAST_SOURCE": "prometheus"}, {}, "http://127.0.0.1:9090"),  # PROMETHEUS: the default URL
    ({"KSO_FORECAST_SOURCE": "NONE", "KSO_PROMETHEUS_URL": "http://prom:9090"}, {}, None),
    ({"KSO_PROMETHEUS_URL": "http://prom:9090"}, {"KSO_FORECAST_SOURCE": "NONE"}, None),
    ({"KSO_FORECAST_SOURCE": "AUTO"}, {"KSO_FORECAST_SOURCE": "NONE", "KSO_PROMETHEUS_URL": "http://f:1"}, "http://f:1"),
])
def test_the_settings_prometheus_follows_kso_forecast_source(env: dict[str, str], file: dict[str, str], want: str | None,
                                                               tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KSO_PROMETHEUS_URL", "KSO_FORECAST_SOURCE", "KSO_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "kso.yaml"
    path.write_text(json.dumps(file))  # JSON is YAML
    assert configured_prometheus(str(path)) == want


@pytest.mark.parametrize("where", ["environment", "file"])
def test_a_misspelt_forecast_source_is_a_configuration_error(where: str, tmp_path: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Read through its settings class (ExtenderSettings inherits the one declaration): a typo is an error naming
    it, never taken as PROMETHEUS (the value is neither NONE nor AUTO) nor as the default."""
    monkeypatch.delenv("KSO_FORECAST_SOURCE", raising=False)
    monkeypatch.setenv("KSO_PROMETHEUS_URL", "http://prom:9090")
    path = tmp_path / "kso.yaml"
    path.write_text(json.dumps({"KSO_FORECAST_SOURCE": "PROMETEUS"} if where == "file" else {}))
    if where == "environment":
        monkeypatch.setenv("KSO_FORECAST_SOURCE", "PROMETEUS")
    with pytest.raises(ConfigError, match=r"KSO_FORECAST_SOURCE='PROMETEUS'.*AUTO, NONE, PROMETHEUS"):
        configured_prometheus(str(path))
