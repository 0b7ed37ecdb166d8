"""ForecastStats: kso's NodeStatsSource backed by a ForecastStore, falling back per node and resource.

For a node and resource with a fresh forecast (newest sample younger than the store's staleness
threshold, finite mean, known capacity): mean_free = cap * (1 - mean), std_free = cap * std, in the safe
agent's units (cpu millicores, memory MB), with forecast_free NaN (the mean already is the forecast, so
the safe agent's forecast blend must not count it twice). Everything else (no forecast, stale, NaN, no
capacity) gets the fallback's numbers (kube-safe-scheduler's annotations by default): a missing metric
never fails a node, it only loses the better estimate.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from forecasting.store import ForecastStore
from kso.core.stats import AnnotationStats, FreeStats, NodeStatsSource
from kso.core.views import NodeView


class ForecastStats:
    name = "forecast"

    def __init__(self, store: ForecastStore, fallback: NodeStatsSource | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.fallback: NodeStatsSource = fallback if fallback is not None else AnnotationStats()
        self.clock = clock

    def free_stats(self, view: NodeView) -> FreeStats:
        fb = self.fallback.free_stats(view)
        n = len(view)
        if n == 0:
            return fb
        mean_u, std_u, age, model = self.store.lookup(view.names, self.clock())
        cap = view.stat_capacity()
        use = (np.isfinite(mean_u) & (age <= self.store.settings.stale_after_s) & np.isfinite(cap) & (cap > 0))
        # Free capacity cannot be negative: usage above allocatable (overcommit) means nothing is free,
        # and a negative value would read as "no data" where annotations are parsed.
        mean_free = np.where(use, np.maximum(cap * (1.0 - np.nan_to_num(mean_u)), 0.0), fb.mean_free)
        # A forecast without a spread counts as no spread (0), as a missing std annotation does.
        std_free = np.where(use, cap * np.nan_to_num(np.maximum(std_u, 0.0)), fb.std_free)
        forecast_free = np.where(use, np.nan, fb.forecast_free)
        tag = f"forecast:{model}"
        source = []
        for i in range(n):
            if use[i].all():
                source.append(tag)
            elif use[i].any():
                source.append(f"{tag}+{fb.source[i]}")  # one resource forecast, the other from fallback
            else:
                source.append(fb.source[i])
        return FreeStats(mean_free, std_free, forecast_free, source)
