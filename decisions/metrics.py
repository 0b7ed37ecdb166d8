"""kso's own /metrics (prometheus_client): the decision engine's counters and the extender's request times.
One registry per engine instance, so several can live in one process (tests, benchmarks) without clashing.
The published names keep their ``kso_extender_`` prefix: dashboards and alerts read them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Buckets resolve the sub-millisecond hot path finely enough to read a p99 from them (25-50 us steps up
# to 1 ms, where NodeNames calls on a few hundred nodes fall), then slow full-node calls up to kube-scheduler's
# 5 s timeout. observe() walks the bounds in order, so a fast call pays for few of them.
LATENCY_BUCKETS = (0.000025, 0.00005, 0.000075, 0.0001, 0.000125, 0.00015, 0.000175, 0.0002, 0.00025, 0.0003,
                   0.00035, 0.0004, 0.0005, 0.0006, 0.0007, 0.0008, 0.0009, 0.001, 0.00125, 0.0015, 0.002,
                   0.0025, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class DecisionMetrics:
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
                                "Nodes passed without a judgement because a statistic was missing, or passed "
                                "despite it to a held pod (see kso_extender_safe_released_total), by predicate",
                                ["reason"], registry=r)
        self.safe_released = Counter("kso_extender_safe_released_total",
                                     "Calls where safe-overload refused a pod on every node and, the pod pending at "
                                     "least KSO_SAFE_MAX_HOLD_S, passed it to the least-risk node(s)", registry=r)
        self.bindings = Counter("kso_extender_bindings_total", "Bind calls, by result: ok, error, expired (waited past "
                                "KSO_BIND_MAX_WAIT_S for a bind slot; not posted), full (too many waiting; not posted)",
                                ["result"], registry=r)
        # The API server's part of a bind (the Binding's round trip, and the read-back after a refusal), without
        # the wait for a bind slot that the bind verb's own latency includes.
        self.bind_api = Histogram("kso_extender_bind_api_seconds", "Time the API server took per bind",
                                  buckets=LATENCY_BUCKETS, registry=r)
        age = Gauge("kso_node_cache_age_seconds", "Seconds since the node cache last heard from its source",
                    registry=r)
        age.set_function(cache_age)
        nodes = Gauge("kso_node_cache_nodes", "Nodes in the node cache", registry=r)
        nodes.set_function(cache_nodes)
        self.plan_decisions = Counter("kso_plan_decisions_total",
                                      "Prioritize calls by plan use: hit (plan nodes ranked first), miss (the pod's "
                                      "class has no free slot among the call's nodes), none (no usable plan)",
                                      ["result"], registry=r)
        self.packing_withheld = Counter("kso_packing_withheld_nodes_total",
                                        "Nodes a packing priority was withheld on in a prioritize call because kso "
                                        "cannot see their load yet (no statistics, or KSO_PACK_UNSEEN_MAX of allocatable "
                                        "bound since the statistics last saw them)", registry=r)
        self.plan_events = Counter("kso_plan_events_total", "Plans installed, and plans rejected by reason "
                                   "(corrupt, stale, unreadable)", ["event"], registry=r)
        self.plan_solves = Counter("kso_plan_solves_total", "Background plan solves, by result", ["result"], registry=r)
        self.plan_solve_seconds = Histogram("kso_plan_solve_seconds", "Wall time of a background plan solve",
                                            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300), registry=r)
        self.plan_age = Gauge("kso_plan_age_seconds", "Age of the plan in use (NaN: none)", registry=r)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def plan_event(self, kind: str, detail: str) -> None:
        """The plan cache's report of a plan installed or rejected (its ``on_event``), counted by kind."""
        self.plan_events.labels(kind).inc()

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: prometheus_client's labels() validates and looks the child up
        under a lock on every call, and the hot path asks for the same few children every call."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def watch_forecasts(self, status: Callable[[], Any]) -> None:
        """Forecast-source health from the forecast store's refresh status (last_success: wall clock or
        None, consecutive_failures: int): a refresh that keeps failing shows here, not only in the log."""
        r = self.registry

        def last_success() -> float:
            t = status().last_success
            return math.nan if t is None else float(t)

        def age() -> float:
            t = status().last_success
            return math.inf if t is None else max(0.0, time.time() - t)

        Gauge("kso_forecast_last_success_timestamp_seconds", "Wall clock of the last successful forecast refresh "
              "(NaN: none yet)", registry=r).set_function(last_success)
        Gauge("kso_forecast_consecutive_failures", "Forecast refreshes failed in a row since the last success",
              registry=r).set_function(lambda: float(status().consecutive_failures))
        Gauge("kso_forecast_age_seconds", "Seconds since the last successful forecast refresh (+Inf: none yet)",
              registry=r).set_function(age)
