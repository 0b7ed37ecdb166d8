"""kso's own /metrics (prometheus_client). One registry per extender instance, so several can live in
one process (tests, benchmarks) without clashing."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Buckets resolve the sub-millisecond hot path as well as slow full-node calls.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ExtenderMetrics:
    def __init__(self, cache_age: Callable[[], float], cache_nodes: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.latency = Histogram("kso_extender_request_duration_seconds",
                                 "Time to answer one extender call, by verb", ["verb"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.errors = Counter("kso_extender_errors_total", "Calls answered with an error, by verb and kind",
                              ["verb", "kind"], registry=r)
        self.filtered = Counter("kso_extender_nodes_filtered_total", "Nodes rejected by filter, by predicate",
                                ["reason"], registry=r)
        self.unknown_nodes = Counter("kso_extender_unknown_nodes_total",
                                     "Nodes named in a call that the node cache does not know (passed unjudged)",
                                     registry=r)
        self.unjudged = Counter("kso_extender_nodes_unjudged_total",
                                "Nodes passed without a judgement because a statistic was missing, by predicate",
                                ["reason"], registry=r)
        self.bindings = Counter("kso_extender_bindings_total", "Bind calls, by result", ["result"], registry=r)
        age = Gauge("kso_node_cache_age_seconds", "Seconds since the node cache last heard from its source",
                    registry=r)
        age.set_function(cache_age)
        nodes = Gauge("kso_node_cache_nodes", "Nodes in the node cache", registry=r)
        nodes.set_function(cache_nodes)
