"""How long a bound pod counts at its request on its node before the load statistics can have seen it.

The safe agent judges a node by its measured load; a pod bound a moment ago is not in it yet, so kso adds the pod's
requests to the node (ClusterState's recent binds) until the statistics the agent reads cover the pod. That time is
the statistics source's own, derived here from the settings that define it (KSO_RECENT_BIND_WINDOW_S = -1, the
default), rather than a fixed number:

* node annotations (kube-safe-scheduler's annotator, load-watcher's rule, ``kso annotate``): the annotator's
  averaging window and how often it writes (KSO_ANNOTATION_WINDOW_S): a pod bound at t is in every sample of the
  window from t + that on;
* kso's forecasts from Prometheus: one scrape (KSO_PROMETHEUS_SCRAPE_INTERVAL) for the pod's usage to be sampled, the
  widest range selector of the node queries (``rate(...[5m])``: the cpu query averages the last 5 minutes), one step
  of the range query's grid (KSO_PROMETHEUS_STEP: the newest point is at most one step old) and one refresh of the
  store (KSO_FORECAST_REFRESH). A node without a fresh forecast is judged by its annotations, so the hold is the
  longer of the two.
"""

from __future__ import annotations

import re
from typing import Any

# PromQL range selectors: [5m], [90s], [1h30m]
_RANGE = re.compile(r"\[((?:\d+(?:ms|[smhdwy]))+)(?::[^\]]*)?\]")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def range_seconds(query: str) -> float:
    """The widest range selector of a PromQL query, in seconds (0 when it has none: a gauge)."""
    widest = 0.0
    for text in _RANGE.findall(query):
        total = sum(float(n) * _UNIT[u] for n, u in re.findall(r"(\d+)(ms|[smhdwy])", text))
        widest = max(widest, total)
    return widest


def recent_bind_hold_s(config: Any) -> float:
    """Seconds a bound pod counts at its request (extender.config.Config: the safe agent's parameters, and the
    Prometheus and forecast store settings when forecasts are in use). 0 = never (the rule off)."""
    safe = config.agent_params["safe"]
    if safe.recent_bind_window_s >= 0:
        return float(safe.recent_bind_window_s)
    hold = float(safe.annotation_window_s)
    prometheus, store = config.prometheus, config.store
    if prometheus is not None and store is not None:
        window = max(range_seconds(prometheus.query_node_cpu), range_seconds(prometheus.query_node_memory))
        hold = max(hold, prometheus.scrape_interval_s + window + prometheus.step_s + store.refresh_s)
    return hold
