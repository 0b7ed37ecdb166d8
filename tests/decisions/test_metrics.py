"""decisions.metrics: one registry per engine (several engines live in one process), the cache gauges read at
each scrape, and the kept children of labelled metrics."""

from __future__ import annotations

from prometheus_client import generate_latest

from decisions.metrics import DecisionMetrics


def test_engines_in_one_process_keep_their_own_registries_and_read_the_cache_at_each_scrape() -> None:
    nodes = [3.0]
    first, second = DecisionMetrics(lambda: 1.5, lambda: nodes[0]), DecisionMetrics(lambda: 0.0, lambda: 0.0)
    first.unknown_nodes.inc(2)
    text = generate_latest(first.registry).decode()
    assert "kso_extender_unknown_nodes_total 2.0" in text and "kso_node_cache_nodes 3.0" in text
    assert "kso_node_cache_age_seconds 1.5" in text
    nodes[0] = 5.0
    assert "kso_node_cache_nodes 5.0" in generate_latest(first.registry).decode()
    assert "kso_extender_unknown_nodes_total 0.0" in generate_latest(second.registry).decode()


def test_a_kept_child_is_the_labelled_metric() -> None:
    metrics = DecisionMetrics(lambda: 0.0, lambda: 0.0)
    child = metrics.child(metrics.filtered, "safe-overload")
    assert child is metrics.child(metrics.filtered, "safe-overload")
    child.inc(4)
    assert metrics.filtered.labels("safe-overload")._value.get() == 4.0
