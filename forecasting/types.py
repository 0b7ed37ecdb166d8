"""The types every forecasting part shares: a utilisation series in, a NodeForecast out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

RESOURCES = ("cpu", "memory")


@dataclass(slots=True)
class UtilisationSeries:
    """One node's (or pod's) utilisation of one resource over time.

    ``t``: unix seconds, strictly increasing; ``y``: utilisation as a ratio of capacity (0..1, may
    exceed 1 for overcommitted usage), NaN where a sample is missing. ``capacity`` is in canonical units
    (cpu millicores, memory bytes) when known, NaN otherwise."""

    key: str  # node name (or namespace/pod)
    resource: str  # "cpu" | "memory"
    t: np.ndarray
    y: np.ndarray
    capacity: float = math.nan
    # What the source or the input checks found and did (forecasting.quality); carried onto the forecast.
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.t = np.asarray(self.t, dtype=float)
        self.y = np.asarray(self.y, dtype=float)
        if self.t.shape != self.y.shape or self.t.ndim != 1:
            raise ValueError(f"series {self.key}/{self.resource}: t and y must be 1-D of equal length")

    def __len__(self) -> int:
        return len(self.t)


@dataclass(slots=True)
class NodeForecast:
    """Predicted utilisation (ratio of capacity) of one node and resource over the next window."""

    node: str
    resource: str
    mean: float
    # Gaussian-equivalent spread of the upper tail: (p95 - mean) / 1.645, so mean + 1.645 std = p95 and a
    # consumer that models utilisation as mean +- std (the safe agent, kube-safe-scheduler's std-free-*
    # annotations) sees the calibrated band, not a raw residual spread (see models._base.assemble).
    std: float
    p50: float
    p90: float
    p95: float
    p99: float
    horizon_s: float
    model: str
    computed_at: float  # unix seconds
    newest_sample_age_s: float  # age of the newest sample when computed
    stale: bool = False
    notes: list[str] = field(default_factory=list)
    # machine-readable marks (forecasting.quality: short-history, spike-removed, lagging-samples, ...)
    flags: list[str] = field(default_factory=list)

    def age_s(self, now: float) -> float:
        """Age of the newest sample behind this forecast, now."""
        return self.newest_sample_age_s + max(now - self.computed_at, 0.0)
