"""Agent ``congestion``: prefer nodes with a low ``congestion-factor`` annotation (kube-safe-scheduler)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from decisions.agents.base import MAX_PRIORITY, Agent, Call
from kso.core.settings import setting
from kso.core.views import LastKept


@dataclass
class CongestionParams:
    factor_max: int = setting("CONGESTION_FACTOR_MAX", 100, lo=1, hi=1_000_000,
                              help="the congestion agent's cap on a node's congestion-factor annotation")


# cf = min(v, MAX) if v > 0 else 0;  score = round-half-away-from-zero(10 (1 - cf / MAX)).
# The annotation is an integer (the seed parses it with Atoi); anything else counts as 0.
def congestion_score(factor: np.ndarray, factor_max: int) -> np.ndarray:
    # NaN (no annotation) fails v == floor(v) and counts 0 with the non-integers, in one pass instead of a
    # nan_to_num first (whose +-inf -> +-max float gives the same scores as +-inf itself here).
    v = np.where(factor == np.floor(factor), factor, 0.0)
    cf = np.where(v > 0, np.minimum(v, factor_max), 0.0)
    x = 10.0 * (1.0 - cf / factor_max)
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(int)


class CongestionAgent(Agent):
    name = "congestion"
    explain_per_node = ("congestion_factor",)
    Params = CongestionParams

    def __init__(self, params: CongestionParams) -> None:
        super().__init__(params)
        self.priorities = {"congestion": self.score}
        self._kept = LastKept()  # the scores of the last read-only congestion column

    def score(self, call: Call) -> np.ndarray:
        view = call.view
        if view.whole is not None and view.rows is not None:  # per node: taken from the store-wide view's, kept
            return self.score(Call(call.pod, view.whole)).take(view.rows)
        factor = view.congestion
        kept = self._kept.get(factor)
        if kept is not None:  # the same read-only column as the last call: the same scores
            return kept
        # no node annotated (the common case): congestion_score gives each 10 (= isnan(factor).all(), without its wrapper)
        if np.logical_and.reduce(np.isnan(factor)):
            scores = np.full(len(factor), MAX_PRIORITY, dtype=int)
        else:
            scores = congestion_score(factor, self.params.factor_max)
        if not factor.flags.writeable:  # a store-wide view's column (ClusterState.whole): kept, read only
            scores.flags.writeable = False
            self._kept.keep(scores, factor)
        return scores

    def explain(self, call: Call) -> dict[str, Any]:
        return {"congestion_factor": [None if np.isnan(v) else float(v) for v in call.view.congestion]}
