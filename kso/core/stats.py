"""Where per-node load statistics come from: one interface, several sources.

``FreeStats`` holds, for the nodes of one call, the mean and std of *free* cpu (millicores) and memory
(MB) and an optional forecast of free capacity, NaN where unknown. Two sources implement
``NodeStatsSource``: kube-safe-scheduler's node annotations (``AnnotationStats``, here) and kso's own
forecasts (``forecasting.stats_source.ForecastStats``, which falls back to the annotations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kso.core.views import NodeView


@dataclass(slots=True)
class FreeStats:
    mean_free: np.ndarray  # (n, 2) cpu milli, memory MB; NaN = no data
    std_free: np.ndarray  # (n, 2); NaN = no data (counts as 0 spread)
    forecast_free: np.ndarray  # (n, 2); NaN = no forecast
    source: list[str]  # per node: where the numbers came from ("annotations", "forecast", "none")


class NodeStatsSource(Protocol):
    name: str

    def free_stats(self, view: NodeView) -> FreeStats: ...


class AnnotationStats:
    """kube-safe-scheduler's annotations (mean-free-cpu, std-free-cpu, ...), parsed when the node
    entered the cache."""

    name = "annotations"
    # Per node "none" (no annotation) or "annotations", by table lookup: cheaper than a Python
    # conditional over numpy bools (once per filter and prioritize).
    _SOURCES = np.array(["none", "annotations"], dtype=object)

    def free_stats(self, view: NodeView) -> FreeStats:
        has = ~np.isnan(view.mean_free).all(axis=1)
        return FreeStats(
            view.mean_free,
            view.std_free,
            view.forecast_free,
            self._SOURCES[has.astype(np.intp)].tolist(),
        )
