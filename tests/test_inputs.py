"""Command-line inputs shared by kso forecast / annotate / plan / reoptimize: kso.inputs (cluster) and
forecasting.inputs (forecast source, the synthetic join of trace series to nodes)."""

from __future__ import annotations

import argparse

import pytest

from forecasting.inputs import add_forecast_args, node_forecasts, refresh_once, synthetic_join
from kso.inputs import InputError, add_cluster_args, load_cluster, load_nodes


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_cluster_args(p)
    add_forecast_args(p)
    return p.parse_args(argv)


def test_synthetic_join_pairs_series_and_nodes_in_sorted_order() -> None:
    assert synthetic_join(["n-b", "n-a", "n-c"], ["s2", "s1"]) == {"n-a": "s1", "n-b": "s2"}
    assert synthetic_join([], ["s1"]) == {}


def test_trace_forecasts_are_keyed_by_the_clusters_nodes() -> None:
    # kso plan --trace used to key the forecasts by series (vm-001...), so no node of the cluster had one.
    args = _args(["--demo", "--trace", "embedded", "--model", "last-value"])
    state = load_cluster(args, "test").state
    forecasts, now, load_from = node_forecasts(args, state.node_names())
    assert forecasts is not None and now is not None
    assert sorted(forecasts) == sorted(state.node_names())
    store, _, _ = refresh_once(args, len(forecasts))
    by_series = store.snapshot(now)
    for node, key in synthetic_join(state.node_names(), by_series).items():
        assert forecasts[node]["cpu"].mean == by_series[key]["cpu"].mean
        assert forecasts[node]["cpu"].node == node
    assert "synthetic join" in load_from


def test_without_a_forecast_source_the_nodes_are_judged_on_annotations() -> None:
    forecasts, now, load_from = node_forecasts(_args([]), ["n1"])
    assert forecasts is None and now is None and "annotations" in load_from


@pytest.mark.parametrize("argv, message", [
    (["--snapshot", "/no/such/file"], "/no/such/file"),
    (["--kubeconfig", "/no/such/kubeconfig"], "cannot reach the Kubernetes API"),
])
def test_unusable_cluster_inputs_say_what(argv: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_cluster(_args(argv), "test")
    with pytest.raises(InputError, match=message):
        load_nodes(_args(argv), "test")


def test_unknown_trace_or_model_is_an_input_error() -> None:
    with pytest.raises(InputError, match="trace nosuch"):
        node_forecasts(_args(["--trace", "nosuch"]), ["n1"])
    with pytest.raises(InputError, match="forecasting model"):
        node_forecasts(_args(["--trace", "embedded", "--model", "no-such-model"]), ["n1"])
