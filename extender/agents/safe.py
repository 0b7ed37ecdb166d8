"""Agent ``safe``: safe overloading and safe balancing (kube-safe-scheduler), on forecast or
annotated load statistics. The maths is in kso.safety; this file turns a call into its inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from extender.agents.base import Agent, Call, PredicateResult
from kso.resources import CPU, MEMORY, MIB
from kso.safety import balance_score, overload_score, safe_overload_risk
from kso.settings import setting
from kso.stats import AnnotationStats, NodeStatsSource

RESOURCE_NAMES = ("cpu", "memory")


@dataclass
class SafeParams:
    utilization: int = setting("SAFEUTILIZATION", 90, kind="percent", help="U*, percent")
    percentile: int = setting("SAFEPERCENTILE", 30, kind="percent", help="eps, percent")
    forecast_weight: int = setting("SAFEFORECASTWEIGHT", 20, kind="percent", help="weight of forecast")
    # kso addition: pods bound within this many seconds are added to the measured load, because the
    # statistics do not show them yet (Trimaran and Koordinator do the same). 0 turns it off.
    recent_bind_window_s: float = setting("KSO_RECENT_BIND_WINDOW_S", 300.0, lo=0, hi=86400)


@dataclass(slots=True)
class SafeInputs:
    mu: np.ndarray  # (n, 2)
    sigma: np.ndarray  # (n, 2)
    risk: np.ndarray  # (n, 2)
    valid: np.ndarray  # (n, 2) bool: a mean and a positive capacity are known
    capacity: np.ndarray  # (n, 2) cpu milli, MB
    source: list[str]


class SafeAgent(Agent):
    name = "safe"
    Params = SafeParams

    def __init__(self, params: SafeParams, stats: NodeStatsSource | None = None) -> None:
        super().__init__(params)
        self.stats: NodeStatsSource = stats or AnnotationStats()
        self.u_star = params.utilization / 100.0
        self.eps = params.percentile / 100.0
        self.w = params.forecast_weight / 100.0
        self.predicates = {"safe-overload": self.filter_overload}
        self.priorities = {"safe-overload": self.score_overload, "safe-balance": self.score_balance}

    def inputs(self, call: Call) -> SafeInputs:
        memo = call.memo.get(self.name)
        if memo is None:
            memo = call.memo[self.name] = self._inputs(call)
        return memo

    def _inputs(self, call: Call) -> SafeInputs:
        view = call.view
        stats = self.stats.free_stats(view)
        cap = view.stat_capacity()
        free = stats.mean_free
        fc = stats.forecast_free
        free = np.where(np.isnan(fc), free, (1.0 - self.w) * free + self.w * fc)
        demand = np.array([call.pod.requests.get(CPU, 0.0), call.pod.requests.get(MEMORY, 0.0) / MIB])
        used = np.maximum(cap - free, 0.0)
        if self.params.recent_bind_window_s > 0:
            used = used + view.recent
        if call.freed is not None:
            cols = [view.columns[CPU], view.columns[MEMORY]]
            used = np.maximum(used - call.freed[:, cols] * np.array([1.0, 1.0 / MIB]), 0.0)
        valid = ~np.isnan(free) & (cap > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = np.clip((used + demand) / cap, 0.0, 1.0)
            sigma = np.clip(np.nan_to_num(stats.std_free, nan=0.0) / cap, 0.0, 1.0)
        mu = np.where(valid, mu, 0.0)
        sigma = np.where(valid, sigma, 0.0)
        risk = np.where(valid, safe_overload_risk(mu, sigma, self.u_star), 0.0)
        return SafeInputs(mu, sigma, risk, valid, cap, stats.source)

    def filter_overload(self, call: Call) -> PredicateResult:
        s = self.inputs(call)
        failed = s.valid & (s.risk > self.eps)
        passed = ~failed.any(axis=1)
        reasons: dict[int, str] = {}
        bad = np.flatnonzero(~passed)
        if len(bad):
            # Python floats, not numpy scalars, in the f-strings: formatting numpy scalars dominated
            # the filter's cost when many nodes fail.
            risk, mu, sigma, fail = (a[bad].tolist() for a in (s.risk, s.mu, s.sigma, failed))
            head = f"P(util > {self.u_star:.0%}) ="
            for k, i in enumerate(bad.tolist()):
                parts = [
                    f"{RESOURCE_NAMES[r]} {head} {risk[k][r]:.3g} > eps {self.eps:.2g} "
                    f"(forecast util {mu[k][r]:.1%} +- {sigma[k][r]:.1%} with this pod, from {s.source[i]})"
                    for r in range(2)
                    if fail[k][r]
                ]
                reasons[i] = "safe-overload: " + "; ".join(parts)
        notes = {int(i): "safe-overload: no load statistics for this node; passed unjudged"
                 for i in np.flatnonzero(~s.valid.any(axis=1))}
        return PredicateResult(passed, reasons, notes)

    @staticmethod
    def _combine(scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
        # cpu and memory combine by the minimum of the valid ones; none valid -> 0.
        masked = np.where(valid, scores, np.iinfo(np.int64).max)
        out = masked.min(axis=1)
        return np.where(valid.any(axis=1), out, 0).astype(int)

    def score_overload(self, call: Call) -> np.ndarray:
        s = self.inputs(call)
        return self._combine(overload_score(s.risk, self.eps), s.valid)

    def score_balance(self, call: Call) -> np.ndarray:
        s = self.inputs(call)
        return self._combine(balance_score(s.mu, s.sigma), s.valid)

    def explain(self, call: Call) -> dict[str, Any]:
        s = self.inputs(call)
        out: dict[str, Any] = {"stats_source": s.source}
        for r, name in enumerate(RESOURCE_NAMES):
            out[f"{name}_mu"] = [round(float(x), 6) if v else None for x, v in zip(s.mu[:, r], s.valid[:, r], strict=True)]
            out[f"{name}_sigma"] = [round(float(x), 6) if v else None for x, v in zip(s.sigma[:, r], s.valid[:, r], strict=True)]
            out[f"{name}_risk"] = [float(x) if v else None for x, v in zip(s.risk[:, r], s.valid[:, r], strict=True)]
        return out
