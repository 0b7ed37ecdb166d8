"""Agent ``safe``: safe overloading and safe balancing (kube-safe-scheduler), on forecast or
annotated load statistics. The maths is in kso.core.safety; this file turns a call into its inputs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from decisions.agents.base import Agent, Call, PredicateResult
from kso.core.resources import CPU, MEMORY, MIB
from kso.core.safety import (
    SafeBoundSettings,
    balance_score,
    beta_cases,
    fitted_risk,
    held_past,
    least_risk,
    overload_score,
    safe_overload_risk,
    special_risk,
)
from kso.core.settings import setting
from kso.core.stats import AnnotationStats, NodeStatsSource
from kso.core.views import LastKept, NodeView

log = logging.getLogger("kso.extender.safe")

RESOURCE_NAMES = ("cpu", "memory")
_RESOURCE_SLOT = np.arange(len(RESOURCE_NAMES))


@dataclass
class SafeParams(SafeBoundSettings):  # U* and eps: declared once, in kso.core.safety
    forecast_weight: int = setting("SAFEFORECASTWEIGHT", 20, kind="percent",
                                   help="weight of the forecast against the measured statistics in the safe agent, percent")
    # kso addition: a bound pod is added to its node's measured load at its requests until the statistics can have
    # seen it (Trimaran and Koordinator do the same); -1 derives that time from the statistics source's own window
    # (decisions.recent), a number of seconds overrides it, 0 turns it off.
    recent_bind_window_s: float = setting("KSO_RECENT_BIND_WINDOW_S", -1.0, lo=-1, hi=86400,
                                          help="seconds a bound pod counts at its requests on its node; -1 = until the "
                                               "statistics' window can have seen it (derived), 0 = off")
    annotation_window_s: float = setting("KSO_ANNOTATION_WINDOW_S", 900.0, lo=0, hi=86400,
                                         help="the node annotations' averaging window plus how often they are written "
                                              "(load-watcher's 15 minutes), seconds: a pod is in them this long after "
                                              "its bind")
    # kso addition (bounded holding, kso.core.safety.held_past): a pod refused on every node it is offered and
    # pending at least this long (since its creationTimestamp) is passed to the least-risk node(s). 300 s is
    # kube-scheduler's podMaxInUnschedulablePodsDuration: a refused pod is retried within that anyway, so the
    # default holds a pod for about one retry. 0 = release at once; inf = never (the rule alone).
    max_hold_s: float = setting("KSO_SAFE_MAX_HOLD_S", 300.0, lo=0,
                                help="a pod safe-overload refuses on every node, pending this long, is passed to the node(s) of"
                                     " least risk (the cluster-autoscaler does not see an extender's refusals), seconds; 0 = at"
                                     " once, inf = never")


# The numbers of the reasons, from tables where that is safe: "%.1f" of k / 10 and "%.3g" of k / 1000.
_TENTHS = np.array([f"{k // 10}.{k % 10}" for k in range(1001)], dtype=object)
_SIG3 = np.array(["" if k < 100 else "1" if k == 1000 else f"0.{k:03d}".rstrip("0") for k in range(1001)], dtype=object)
# Scaled values this close to a rounding tie are formatted by Python: the scaled product (at most 1000)
# is within ~1e-13 of the exact one, so outside this band its nearest integer is the exact value's.
_TIE_BAND = 1e-6


def _format_scaled(values: np.ndarray, scale: float, ok: np.ndarray, table: np.ndarray, spec: str) -> list[str]:
    """format(v, spec) for each v: table[nearest integer of v * scale] where ``ok`` (and not near a tie),
    Python's own formatting elsewhere."""
    with np.errstate(invalid="ignore"):
        scaled = values * scale
        below = np.floor(scaled)
        frac = scaled - below
        ok = ok & (np.abs(frac - 0.5) > _TIE_BAND)
    out: list[str] = table.take(np.where(ok, below + (frac > 0.5), 0).astype(np.intp)).tolist()
    if not ok.all():
        for i in np.flatnonzero(~ok).tolist():
            out[i] = format(float(values[i]), spec)
    return out


def fixed1(values: np.ndarray) -> list[str]:
    """f"{v:.1f}" for each v (from the table for 0 < v <= 100)."""
    return _format_scaled(values, 10.0, (values > 0) & (values <= 100), _TENTHS, ".1f")


def sig3(values: np.ndarray) -> list[str]:
    """f"{v:.3g}" for each v (from the table for 0.1 <= v <= 1)."""
    return _format_scaled(values, 1000.0, (values >= 0.1) & (values <= 1.0), _SIG3, ".3g")


class RiskMemo:
    """The last Beta-CDF risk computed for each (node row, resource) slot, with the mu and sigma it was computed
    from. The risk is a pure function of (mu, sigma) for a given U*, so a slot whose inputs are exactly those of
    the last call is answered from here, bit for bit: replicas of one workload (the same requests) meet the
    same nodes call after call, and only the nodes whose load changed since (a bind, an annotation) need
    betainc again (most of the maths on a large cluster). No invalidation is needed, whatever
    happens to a row: a changed input is a miss."""

    def __init__(self, u_star: float) -> None:
        self.u_star = u_star
        self._lock = threading.Lock()
        self._mu = np.full(0, np.nan)
        self._sigma = np.full(0, np.nan)
        self._risk = np.full(0, np.nan)

    def fitted_risk(self, slots: np.ndarray, mu: np.ndarray, sigma: np.ndarray, var: np.ndarray,
                    spread: np.ndarray) -> np.ndarray:
        """fitted_risk(mu, var, spread, U*) for entries where a Beta fits, ``slots`` (same shape, >= 0) naming
        each entry's memo slot."""
        with self._lock:
            if slots.size and int(slots.max()) >= self._mu.size:
                self._grow(int(slots.max()) + 1)
            hit = (self._mu.take(slots) == mu) & (self._sigma.take(slots) == sigma)
            risk = self._risk.take(slots)
            if hit.all():
                return risk
            miss = ~hit
            fresh = fitted_risk(mu[miss], var[miss], spread[miss], self.u_star)
            risk[miss] = fresh
            where = slots[miss]
            self._mu[where] = mu[miss]
            self._sigma[where] = sigma[miss]
            self._risk[where] = fresh
            return risk

    def _grow(self, size: int) -> None:
        size = max(size, 2 * self._mu.size)
        for name in ("_mu", "_sigma", "_risk"):
            old = getattr(self, name)
            new = np.full(size, np.nan)
            new[:old.size] = old
            setattr(self, name, new)


NO_STATS_NOTE = "safe-overload: no load statistics for this node; passed unjudged"
RELEASE_NOTE = ("safe-overload: refused on every node offered, pod held {held:.0f} s >= KSO_SAFE_MAX_HOLD_S {hold:g} s; "
                "passed at the least risk P(util > {u:.0%}) = {risk:.3g} (eps {eps})")

# Relative margin under eps within which the Cantelli bound is not trusted to decide (see SafeInputs.over):
# far above the error of betainc and of the bound's own arithmetic (~1e-15).
BOUND_MARGIN = 1e-6


@dataclass(slots=True)
class SafeInputs:
    mu: np.ndarray  # (n, 2)
    sigma: np.ndarray  # (n, 2)
    valid: np.ndarray  # (n, 2) bool: a mean and a positive capacity are known
    capacity: np.ndarray  # (n, 2) cpu milli, MB
    source: list[str]
    u_star: float
    full_risk: np.ndarray | None = None  # (n, 2) P(util > U*), 0 where not valid; see ``risk``
    slots: np.ndarray | None = None  # (n, 2) RiskMemo slot of each entry (node row * 2 + resource)
    memo: RiskMemo | None = None
    some: bool | None = None  # valid.any(), once known (see some_valid)

    def some_valid(self) -> bool:
        """valid.any(), asked once per inputs (a kept SafeBase's inputs: once per view)."""
        if self.some is None:
            self.some = bool(np.logical_or.reduce(self.valid, axis=None))
        return self.some

    def _fitted(self, where: np.ndarray, var: np.ndarray, spread: np.ndarray) -> np.ndarray:
        """fitted_risk of the entries ``where`` (a Beta fits there), through the memo when there is one."""
        if self.memo is None or self.slots is None:
            return fitted_risk(self.mu[where], var[where], spread[where], self.u_star)
        return self.memo.fitted_risk(self.slots[where], self.mu[where], self.sigma[where], var[where], spread[where])

    @property
    def risk(self) -> np.ndarray:
        """P(util > U*) per node and resource (0 where not valid), computed on first use."""
        if self.full_risk is None:
            if self.memo is None:
                self.full_risk = np.where(self.valid, safe_overload_risk(self.mu, self.sigma, self.u_star), 0.0)
            else:  # safe_overload_risk, its fitted entries through the memo
                mu = self.mu
                var, spread, fits, point = beta_cases(mu, self.sigma)
                risk = special_risk(mu, point, var, spread, self.u_star)
                if fits.any():
                    risk[fits] = self._fitted(fits, var, spread)
                self.full_risk = np.where(self.valid, risk, 0.0)
        return self.full_risk

    def over(self, eps: float) -> tuple[np.ndarray, np.ndarray]:
        """(valid & risk > eps, risk) where the returned risk is exact wherever the first is True (the
        rest may be NaN): the filter's question, without the Beta CDF of nodes that are clearly safe.

        Cantelli's inequality holds for any distribution with mean mu and variance sigma^2, the
        moment-matched Beta included: P(U > U*) <= sigma^2 / (sigma^2 + (U* - mu)^2) when mu < U*.
        Where that bound is below eps (less a margin), risk > eps is False for certain, as it is for
        the betainc value, so betainc (most of the filter's maths) runs only on
        the rest. The rule's special cases (mu = 0, sigma = 0, no Beta fits) never take the shortcut."""
        if self.full_risk is not None:
            return self.valid & (self.full_risk > eps), self.full_risk
        mu = self.mu
        var, spread, fits, point = beta_cases(mu, self.sigma)
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = self.u_star - mu
            bound = var / (var + gap * gap)
        need = self.valid & ~(fits & (gap > 0) & (bound < eps * (1.0 - BOUND_MARGIN)))
        risk = np.full(mu.shape, np.nan)
        fitted = need & fits
        risk[fitted] = self._fitted(fitted, var, spread)
        special = need & ~fits
        if special.any():
            risk[special] = special_risk(mu[special], point[special], var[special], spread[special], self.u_star)
        return need & (risk > eps), risk


def _read_only(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


@dataclass(slots=True, eq=False)
class SafeBase:
    """What SafeAgent's inputs take from one view's columns alone (not from the pod), kept (SafeAgent.base) for the
    read-only columns it was computed from. ``inputs``: the whole inputs when no node has a valid statistic (they
    do not depend on the pod then), else the parts _inputs_from computes, in its order: the used load before the
    pod's demand, sigma, valid, capacity, sources, memo slots, and the filter's no-statistics notes."""

    inputs: SafeInputs | None = None
    used: np.ndarray | None = None
    sigma: np.ndarray | None = None
    valid: np.ndarray | None = None
    capacity: np.ndarray | None = None
    source: list[str] | None = None
    slots: np.ndarray | None = None
    notes: dict[int, str] | None = None
    result: PredicateResult | None = None  # filter_overload's, when nothing is valid
    zeros: np.ndarray | None = None  # the priorities' scores when nothing is valid
    some: bool | None = None  # valid.any()
    sources: np.ndarray | None = None  # ``source`` as an object array, to be taken by rows (None: every node "none")


class SafeAgent(Agent):
    name = "safe"
    explain_per_node = ("stats_source", *(f"{r}_{k}" for r in RESOURCE_NAMES for k in ("mu", "sigma", "risk")))
    Params = SafeParams

    def __init__(self, params: SafeParams, stats: NodeStatsSource | None = None) -> None:
        super().__init__(params)
        self.stats: NodeStatsSource = stats or AnnotationStats()
        self.u_star = params.utilization / 100.0
        self.eps = params.percentile / 100.0
        self.w = params.forecast_weight / 100.0
        self._head = f"P(util > {self.u_star:.0%}) ="
        self._eps_text = f"{self.eps:.2g}"
        self.risk_memo = RiskMemo(self.u_star)
        self._base = LastKept()  # the last read-only view's pod-independent inputs (see SafeBase)
        # the SafeBase last taken for a call's view: (the store-wide view's, the rows taken, the call's) (see base)
        self._last_taken: tuple[SafeBase, np.ndarray, SafeBase] | None = None
        self._zeros_kept: tuple[np.ndarray, np.ndarray] | None = None
        self._unjudged_kept: tuple[PredicateResult, np.ndarray] | None = None
        self.clock: Callable[[], float] = time.time  # the hold's "now", epoch seconds (the replay sets its own)
        self.released_total: Any = None  # a counter (.inc()) of held pods released; extender.metrics sets it
        self.predicates = {"safe-overload": self.filter_overload}
        self.priorities = {"safe-overload": self.score_overload, "safe-balance": self.score_balance}

    def inputs(self, call: Call) -> SafeInputs:
        memo = call.memo.get(self.name)
        if memo is None:
            memo = call.memo[self.name] = self._inputs(call)
        return memo

    def _inputs(self, call: Call) -> SafeInputs:
        """_inputs_from's inputs; with the annotations as the source (its values are the view's columns) and
        nothing freed, from what the view's columns alone give (SafeBase, kept while they do not change) and the
        pod's demand: ~6 numpy calls instead of ~25, the same values bit for bit."""
        if type(self.stats) is not AnnotationStats or call.freed is not None:
            return self._inputs_from(call)
        base = self.base(call.view)
        if base.inputs is not None:
            return base.inputs
        assert base.used is not None and base.capacity is not None and base.sigma is not None
        assert base.valid is not None and base.source is not None
        demand = np.array([call.pod.requests.get(CPU, 0.0), call.pod.requests.get(MEMORY, 0.0) / MIB])
        cap = base.capacity
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = np.add(base.used, demand)  # = _inputs_from's used += demand, on a copy of the kept used
            np.divide(mu, cap, out=mu)
            np.minimum(np.maximum(mu, 0.0, out=mu), 1.0, out=mu)
        mu = np.where(base.valid, mu, 0.0)
        return SafeInputs(mu, base.sigma, base.valid, cap, base.source, self.u_star, slots=base.slots,
                          memo=self.risk_memo, some=base.some)

    def base(self, view: NodeView) -> SafeBase:
        """The SafeBase of ``view``'s columns. A call's view (gathered from a store): taken by its rows from the
        SafeBase of the store-wide view, which is kept while its columns do not change (every value of a SafeBase is
        per node, so the same values as _base_of(view), whatever list of nodes the call names). Else: kept from the
        last call when its columns are the same arrays (read only), built whole before it is kept."""
        whole = view.whole
        if whole is not None and view.rows is not None:
            of_whole, last = self.whole_base(whole), self._last_taken
            if last is not None and last[0] is of_whole and last[1] is view.rows:  # the same view again
                return last[2]
            base = self._taken(of_whole, view)
            self._last_taken = (of_whole, view.rows, base)
            return base
        base = self._base.get(view.mean_free, view.alloc, view.rows, view.std_free, view.forecast_free, view.recent)
        if base is None:
            base = self._base_of(view)
            # when nothing is valid only the means (which say so, and the sources), the capacity and the rows count;
            # else the statistics and the recent binds too
            self._base.keep(base, view.mean_free, view.alloc, view.rows,
                            *(() if base.inputs is not None else (view.std_free, view.forecast_free, view.recent)))
        return base

    def whole_base(self, whole: NodeView) -> SafeBase:
        """The SafeBase of a store-wide view (ClusterState.whole) without the recent binds (which it does not hold:
        each call adds its own), kept while its columns are the same arrays."""
        base = self._base.get(whole.mean_free, whole.alloc, whole.rows, whole.std_free, whole.forecast_free)
        if base is None:
            base = self._base_of(whole, recent=False)
            self._base.keep(base, whole.mean_free, whole.alloc, whole.rows, whole.std_free, whole.forecast_free)
        return base

    def _taken(self, whole: SafeBase, view: NodeView) -> SafeBase:
        """The SafeBase of a call's ``view`` from the SafeBase of its store-wide view (``whole``): taken by its rows,
        the view's recent binds added as _base_of adds them."""
        rows = view.rows
        assert rows is not None
        n = len(rows)
        base = SafeBase()
        if whole.inputs is not None:
            kept = whole.inputs
            zeros, none = self._zeros(n)
            if whole.sources is None:  # no node of the store has a mean free: none of the call has
                base.inputs = SafeInputs(zeros, zeros, none, kept.capacity.take(rows, axis=0), ["none"] * n,
                                         self.u_star, full_risk=zeros)
            else:  # means somewhere, but nothing valid: neither in the call
                base.inputs = SafeInputs(zeros, zeros, kept.valid.take(rows, axis=0), kept.capacity.take(rows, axis=0),
                                         whole.sources.take(rows).tolist(), self.u_star, full_risk=zeros)
            return self._unjudged(base, n)
        assert whole.valid is not None and whole.capacity is not None and whole.sources is not None
        assert whole.used is not None and whole.sigma is not None and whole.slots is not None
        valid = whole.valid.take(rows, axis=0)
        cap = whole.capacity.take(rows, axis=0)
        source = whole.sources.take(rows).tolist()
        if not valid.any():
            zeros = self._zeros(n)[0]
            base.inputs = SafeInputs(zeros, zeros, valid, cap, source, self.u_star, full_risk=zeros)
            return self._unjudged(base, n)
        used = whole.used.take(rows, axis=0)
        if self.params.recent_bind_window_s != 0:
            used += view.recent
        base.used, base.sigma, base.valid, base.capacity, base.source, base.slots = (
            used, whole.sigma.take(rows, axis=0), valid, cap, source, whole.slots.take(rows, axis=0))
        _read_only(base.used, base.sigma, base.valid, base.capacity, base.slots)
        base.notes = dict.fromkeys(np.flatnonzero(~(valid[:, 0] | valid[:, 1])).tolist(), NO_STATS_NOTE)
        base.some = True
        return base

    def _zeros(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(n, 2) zeros, float and bool, read only: kept for the last n (a call's nodes are a window of a fixed size)."""
        kept = self._zeros_kept
        if kept is None or len(kept[0]) != n:
            kept = self._zeros_kept = (np.zeros((n, 2)), np.zeros((n, 2), dtype=bool))
            _read_only(*kept)
        return kept

    def _base_of(self, view: NodeView, recent: bool = True) -> SafeBase:
        """_inputs_from's steps that do not involve the pod (or nothing is valid: all of them), in its order;
        without adding the recent binds when not ``recent``."""
        base = SafeBase()
        n = len(view)
        if np.isnan(view.mean_free).all():
            base.inputs = SafeInputs(np.zeros((n, 2)), np.zeros((n, 2)), np.zeros((n, 2), dtype=bool),
                                     view.stat_capacity(), ["none"] * n, self.u_star, full_risk=np.zeros((n, 2)))
        else:
            stats = self.stats.free_stats(view)
            cap = view.stat_capacity()
            free = stats.mean_free
            fc = stats.forecast_free
            valid = ~np.isnan(free) & (cap > 0)
            base.sources = np.array(stats.source, dtype=object)
            if not valid.any():
                base.inputs = SafeInputs(np.zeros(cap.shape), np.zeros(cap.shape), valid, cap, stats.source,
                                         self.u_star, full_risk=np.zeros(cap.shape))
            else:
                has_forecast = ~np.isnan(fc)
                if has_forecast.any():
                    free = np.where(has_forecast, (1.0 - self.w) * free + self.w * fc, free)
                used = np.maximum(cap - free, 0.0)
                if self.params.recent_bind_window_s != 0 and recent:
                    used += view.recent
                valid = ~np.isnan(free) & (cap > 0)
                std = stats.std_free
                with np.errstate(divide="ignore", invalid="ignore"):
                    sigma = np.where(np.isnan(std), 0.0, std) / cap
                    np.clip(sigma, 0.0, 1.0, out=sigma)
                sigma = np.where(valid, sigma, 0.0)
                slots = None if view.rows is None else view.rows[:, None] * 2 + _RESOURCE_SLOT
                _read_only(used, sigma, valid, cap, *(() if slots is None else (slots,)))
                base.used, base.sigma, base.valid, base.capacity, base.source, base.slots = (
                    used, sigma, valid, cap, stats.source, slots)
                base.notes = dict.fromkeys(np.flatnonzero(~(valid[:, 0] | valid[:, 1])).tolist(), NO_STATS_NOTE)
                base.some = bool(valid.any())
        return self._unjudged(base, n) if base.inputs is not None else base

    def _unjudged(self, base: SafeBase, n: int) -> SafeBase:
        """``base`` whose inputs say nothing is valid, with its read-only inputs, filter result and scores."""
        s = base.inputs
        assert s is not None
        _read_only(s.mu, s.sigma, s.valid, s.capacity, *(() if s.full_risk is None else (s.full_risk,)))
        kept = self._unjudged_kept
        if kept is None or len(kept[1]) != n:  # the same for the same n: kept for the last n
            kept = self._unjudged_kept = (
                PredicateResult(np.ones(n, dtype=bool), {}, dict.fromkeys(range(n), NO_STATS_NOTE)),
                np.zeros(n, dtype=int))
            _read_only(kept[0].passed, kept[1])
        base.result, base.zeros = kept
        return base

    def _inputs_from(self, call: Call) -> SafeInputs:
        """The inputs of a call, computed from its view and the stats source (the reference _inputs keeps to)."""
        view = call.view
        if type(self.stats) is AnnotationStats and np.isnan(view.mean_free).all():
            # No node of the call has a mean free: nothing is valid (below), and AnnotationStats would name
            # every node's source "none"; the same inputs without gathering and masking the statistics.
            n = len(view)
            return SafeInputs(np.zeros((n, 2)), np.zeros((n, 2)), np.zeros((n, 2), dtype=bool), view.stat_capacity(),
                              ["none"] * n, self.u_star, full_risk=np.zeros((n, 2)))
        stats = self.stats.free_stats(view)
        cap = view.stat_capacity()
        free = stats.mean_free
        fc = stats.forecast_free
        # A node is judged where it has a mean free and a capacity (the forecast blend below keeps a NaN mean
        # NaN). Where none has (a cluster before any statistics exist, as a new install starts), every value
        # below would be masked out: mu = sigma = risk = 0 and nothing valid, without the ~30 numpy calls.
        valid = ~np.isnan(free) & (cap > 0)
        if not valid.any():
            return SafeInputs(np.zeros(cap.shape), np.zeros(cap.shape), valid, cap, stats.source, self.u_star,
                              full_risk=np.zeros(cap.shape))
        has_forecast = ~np.isnan(fc)
        if has_forecast.any():
            free = np.where(has_forecast, (1.0 - self.w) * free + self.w * fc, free)
        demand = np.array([call.pod.requests.get(CPU, 0.0), call.pod.requests.get(MEMORY, 0.0) / MIB])
        used = np.maximum(cap - free, 0.0)
        if self.params.recent_bind_window_s != 0:
            used += view.recent
        if call.freed is not None:
            cols = [view.columns[CPU], view.columns[MEMORY]]
            used = np.maximum(used - call.freed[:, cols] * np.array([1.0, 1.0 / MIB]), 0.0)
        valid = ~np.isnan(free) & (cap > 0)
        std = stats.std_free
        # The same values as np.clip(x, 0, 1) and nan_to_num at a fraction of the calls' overhead: mu's clip
        # as maximum then minimum in place (they differ from clip only on -0.0, which mu cannot be: used
        # is a maximum with +0.0 plus non-negative terms), and a missing std read as 0 (nan_to_num's +-inf
        # rewrite is moot under the clip, which sigma keeps: a "-0" annotation gives -0.0, shown in reasons).
        with np.errstate(divide="ignore", invalid="ignore"):
            used += demand
            mu = np.divide(used, cap, out=used)
            np.minimum(np.maximum(mu, 0.0, out=mu), 1.0, out=mu)
            sigma = np.where(np.isnan(std), 0.0, std) / cap
            np.clip(sigma, 0.0, 1.0, out=sigma)
        mu = np.where(valid, mu, 0.0)
        sigma = np.where(valid, sigma, 0.0)
        slots = None
        if view.rows is not None:  # row 0 (unknown nodes) is never valid, so never looked up
            slots = view.rows[:, None] * 2 + _RESOURCE_SLOT
        return SafeInputs(mu, sigma, valid, cap, stats.source, self.u_star, slots=slots, memo=self.risk_memo)

    def _kept(self, s: SafeInputs) -> SafeBase | None:
        """The SafeBase ``s`` came from (its kept result, notes and zeros were made from the same inputs), or None."""
        last = self._last_taken
        for base in (None if last is None else last[2], self._base.value):
            if base is not None and (s is base.inputs or s.valid is base.valid):
                return base
        return None

    def filter_overload(self, call: Call) -> PredicateResult:
        s = self.inputs(call)
        base = self._kept(s)
        if s.full_risk is not None and not s.some_valid():  # no statistics anywhere: every node passes unjudged
            if base is not None and base.result is not None:  # read only, as every PredicateResult is once returned
                return base.result
            return PredicateResult(np.ones(len(s.valid), dtype=bool), {},
                                   dict.fromkeys(range(len(s.valid)), NO_STATS_NOTE))
        failed, risk = s.over(self.eps)
        passed = ~(failed[:, 0] | failed[:, 1])
        reasons: dict[int, str] = {}
        bad = np.flatnonzero(~passed)
        if len(bad):
            reasons = dict(zip(bad.tolist(), self._reasons(s, risk, bad, failed[bad]), strict=True))
        if base is not None and base.notes is not None:
            notes = base.notes
        else:
            no_stats = np.flatnonzero(~(s.valid[:, 0] | s.valid[:, 1])).tolist()
            notes = dict.fromkeys(no_stats, NO_STATS_NOTE)
        if len(bad) and len(bad) == len(passed):  # refused everywhere: the only path that pays for the hold
            notes = dict(notes)  # changed in place by a release: never the kept one
            self._release_held(call, risk, failed, passed, reasons, notes)
        return PredicateResult(passed, reasons, notes)

    def _release_held(self, call: Call, risk: np.ndarray, failed: np.ndarray, passed: np.ndarray,
                      reasons: dict[int, str], notes: dict[int, str]) -> None:
        """Bounded holding (kso.core.safety, where the rule and its reasons are): the pod was refused on every
        node; if it has been pending at least max_hold_s, pass the least-risk node(s) (in place: ``passed``
        set, their reasons replaced by a note), the others keep their reasons."""
        hold = self.params.max_hold_s
        created = call.pod.created_seconds()
        now = self.clock()
        if created is None or not held_past(created, now, hold):
            return
        worst = np.where(failed, risk, -np.inf).max(axis=1)  # the refused entries' risks are exact (SafeInputs.over)
        chosen = np.flatnonzero(least_risk(worst)).tolist()
        passed[chosen] = True
        text = RELEASE_NOTE.format(held=now - created, hold=hold, u=self.u_star, risk=float(worst[chosen[0]]),
                                   eps=self._eps_text)
        for i in chosen:
            del reasons[i]
            notes[i] = text
        if self.released_total is not None:
            self.released_total.inc()
        log.info("pod %s: %s (%d of %d nodes)", call.pod.key, text, len(chosen), len(passed))

    def _reasons(self, s: SafeInputs, risk: np.ndarray, bad: np.ndarray, failed: np.ndarray) -> list[str]:
        """The reason of each node of ``bad`` (in that order), e.g. "safe-overload: cpu P(util > 90%) = 0.592 >
        eps 0.3 (forecast util 90.0% +- 7.5% with this pod, from annotations)"; ``failed`` (len(bad), 2)
        says which resources failed.

        The text of f"{risk:.3g}", f"{mu:.1%}" and f"{sigma:.1%}" (= f"{mu * 100:.1f}%": CPython multiplies
        by 100 in double precision, as numpy does here), with the numbers from tables (sig3, fixed1) and
        each reason one f-string of strings: formatting every value on its own dominated the filter when
        many nodes fail."""
        # The failed (node, resource) entries in reason order (node by node, cpu before memory), formatted
        # in two table lookups, then consumed in that order.
        flat = failed.ravel()
        n_failed = int(flat.sum())
        risks = iter(sig3(risk[bad].ravel()[flat]))
        pct = fixed1(np.concatenate(((s.mu[bad] * 100.0).ravel()[flat], (s.sigma[bad] * 100.0).ravel()[flat])))
        mus, sigmas = iter(pct[:n_failed]), iter(pct[n_failed:])
        src = s.source
        head, eps = self._head, self._eps_text
        texts: list[str] = []
        for i, (cpu, memory) in zip(bad.tolist(), failed.tolist(), strict=True):
            so = src[i]
            if cpu:
                text = (f"safe-overload: cpu {head} {next(risks)} > eps {eps} (forecast util {next(mus)}% +- "
                        f"{next(sigmas)}% with this pod, from {so})")
                if memory:
                    text = (f"{text}; memory {head} {next(risks)} > eps {eps} (forecast util {next(mus)}% +- "
                            f"{next(sigmas)}% with this pod, from {so})")
            else:
                text = (f"safe-overload: memory {head} {next(risks)} > eps {eps} (forecast util {next(mus)}% +- "
                        f"{next(sigmas)}% with this pod, from {so})")
            texts.append(text)
        return texts

    @staticmethod
    def _combine(scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
        # cpu and memory combine by the minimum of the valid ones; none valid -> 0.
        # Column by column (two of them): the same values as min(axis=1) / any(axis=1), ~10x faster.
        masked = np.where(valid, scores, np.iinfo(np.int64).max)
        out = np.minimum(masked[:, 0], masked[:, 1])
        return np.where(valid[:, 0] | valid[:, 1], out, 0).astype(int)

    def _no_scores(self, s: SafeInputs) -> np.ndarray:
        """What _combine makes of any scores when no node is valid: all 0 (the kept read-only array, or a new one)."""
        base = self._kept(s)
        return base.zeros if base is not None and base.zeros is not None else np.zeros(len(s.valid), dtype=int)

    def score_overload(self, call: Call) -> np.ndarray:
        s = self.inputs(call)
        if not s.some_valid():  # what _combine makes of any scores then
            return self._no_scores(s)
        return self._combine(overload_score(s.risk, self.eps), s.valid)

    def score_balance(self, call: Call) -> np.ndarray:
        s = self.inputs(call)
        if not s.some_valid():
            return self._no_scores(s)
        return self._combine(balance_score(s.mu, s.sigma), s.valid)

    def explain(self, call: Call) -> dict[str, Any]:
        s = self.inputs(call)
        out: dict[str, Any] = {"stats_source": s.source}
        for r, name in enumerate(RESOURCE_NAMES):
            out[f"{name}_mu"] = [round(float(x), 6) if v else None for x, v in zip(s.mu[:, r], s.valid[:, r], strict=True)]
            out[f"{name}_sigma"] = [round(float(x), 6) if v else None for x, v in zip(s.sigma[:, r], s.valid[:, r], strict=True)]
            out[f"{name}_risk"] = [float(x) if v else None for x, v in zip(s.risk[:, r], s.valid[:, r], strict=True)]
        return out
