"""Agent ``cost``: prefer cheaper nodes, by the node cost the plan's COST policy reads (the annotation or
label named by KSO_PLAN_COST_KEY, Hightower's ``hightower.com/cost`` by default; one cost key for all of kso)."""

from __future__ import annotations

from typing import Any

import numpy as np

from decisions.agents.base import MAX_PRIORITY, Agent, Call
from kso.core.node_costs import CostKeySettings as CostParams  # KSO_PLAN_COST_KEY, the one cost key of kso
from optimizer.plan.cluster_problem import node_cost


# score_n = round-half-up(10 (max - c_n) / (max - min)) over the call's known nodes; all equal -> 10;
# a node the cache does not know (NaN) -> 0. Missing or unusable costs are 1.0 (optimizer.inputs.node_cost).
def cost_score(costs: np.ndarray) -> np.ndarray:
    known = ~np.isnan(costs)
    if not known.any():
        return np.zeros(len(costs), dtype=int)
    lo, hi = float(costs[known].min()), float(costs[known].max())
    if hi == lo:
        scores = np.full(len(costs), float(MAX_PRIORITY))
    else:
        scores = np.floor(MAX_PRIORITY * (hi - np.nan_to_num(costs, nan=hi)) / (hi - lo) + 0.5)
    return np.where(known, scores, 0).astype(int)


class CostAgent(Agent):
    name = "cost"
    Params = CostParams

    def __init__(self, params: CostParams) -> None:
        super().__init__(params)
        self.priorities = {"cost": self.score}

    def costs(self, call: Call) -> np.ndarray:
        key = self.params.cost_key
        out = np.full(len(call.view), np.nan)
        for i, node in enumerate(call.view.nodes):
            if node is None:
                continue
            cached = node.memo.get("cost")  # the memo dies with the node object, so an update re-reads it
            if cached is None or cached[0] != key:
                cached = node.memo["cost"] = (key, node_cost(node.labels, node.annotations, key))
            out[i] = cached[1]
        return out

    def score(self, call: Call) -> np.ndarray:
        return cost_score(self.costs(call))

    def explain(self, call: Call) -> dict[str, Any]:
        return {"cost": [None if np.isnan(v) else float(v) for v in self.costs(call)]}
