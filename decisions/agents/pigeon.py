"""Agent ``pigeon``: the ``pigeon-holing`` priority of kube-safe-scheduler (IBM), vectorised.

For each candidate node the pod is placed there tentatively and a cluster-wide objective is
evaluated; lower is better, and the values are mapped to 1..10 (infeasible nodes get 0).

Policies (``POLICY_OBJECTIVE``), over the first ``NUM_RESOURCES`` of (cpu, memory, pods, gpu,
ephemeral-storage); u_n is usage / capacity of the first resource (cpu):

- ``LOAD_BALANCE``: population standard deviation of u.
- ``CONSOLIDATE``: 1 - sqrt(mean(term^2)), term = (avg - u) / avg below the mean, (u - avg) / (1 - avg)
  above it; 0 when avg is not in (0, 1).
- ``A_BINPACK`` (adaptive bin packing, Tantawi & Steinder, ICAC 2019): |gamma_sys - gamma_dem|, the
  gap between the multivariate coefficient of variation (Albert-Zhang) of node utilisation and that
  of pod demand (a running average over past calls, normalised by the mean node capacity).

Every objective is "the statistic of the cluster with one row changed", so each is computed for all
candidates at once from cluster-wide sums with the candidate's own row swapped out: O(N R^2) for
A_BINPACK, O(N) for LOAD_BALANCE and O(N log N) for CONSOLIDATE (a sort plus binary searches).
Nothing loops over nodes in Python and nothing is N x N.

Where the original (libpigeon, pigeon_c/src in IBM/kube-safe-scheduler) left details open or had
bugs, the choices are noted next to the code that makes them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from operator import gt
from typing import Any

import numpy as np

from decisions.agents.base import MAX_PRIORITY, Agent, Call
from kso.core.resources import CPU, EPHEMERAL_STORAGE, GPU, MEMORY, MIB, PODS
from kso.core.settings import setting
from kso.core.views import LastKept

A_BINPACK = "A_BINPACK"
LOAD_BALANCE = "LOAD_BALANCE"
CONSOLIDATE = "CONSOLIDATE"
POLICIES = (A_BINPACK, LOAD_BALANCE, CONSOLIDATE)

# The original's resource order; NUM_RESOURCES = k uses the first k.
RESOURCES = (CPU, MEMORY, PODS, GPU, EPHEMERAL_STORAGE)

# Demand defaults for a pod that requests nothing (the original's adapter.go: "TODO: make minimum
# resource requirements configurable"), so a best-effort pod still counts in the objective.
DEFAULT_CPU_MILLI = 10.0
DEFAULT_MEMORY_BYTES = 16.0 * MIB

# The original's units per resource in canonical units (cpu milli, memory MB, pods, gpu, ephemeral
# GB; MB / GB read as MiB / GiB, as DEFAULT_MEMORY_BYTES reads its "16 MB"). Ratios do not depend on
# them, but a resource no node has is left unnormalised in gamma_dem (see demand_gamma), and there the
# unit is the value: kept in bytes, a 1 GiB ephemeral request would be 2^30 and swamp every other
# resource. Such a resource is expressed in the original's unit instead.
ORIGINAL_UNIT = {CPU: 1.0, MEMORY: MIB, PODS: 1.0, GPU: 1.0, EPHEMERAL_STORAGE: 1024.0 * MIB}

# The original smooths demand with weight 1/min(count, 1/0.01): a plain mean of the first 100 pods,
# then an exponential average that remembers roughly the last 100.
DEMAND_WINDOW = 100

# Relative tolerance under which the values count as all equal (see pigeon_scores).
EQUAL_RTOL = 1e-12
# A span of values up to which finite_scores' clip is a no-op (see there).
CLIP_FREE_SPAN = 1e300

MEMO_KEY = "pigeon"

# np.einsum without its Python wrapper: without ``optimize`` the wrapper only hands its operands to this
# (the same C function, the same results), without the wrapper's per-call cost.
# np.clip(a, lo, hi) is this ufunc behind two Python wrappers.
# Both are numpy internals: where they are not (numpy 1.x, or a numpy that moved them) the public functions are
# used, with the same results at the wrappers' cost.
try:
    from numpy._core._multiarray_umath import c_einsum as _einsum  # numpy 2
    from numpy._core.umath import clip as _clip
except ImportError:
    _einsum, _clip = np.einsum, np.clip


@dataclass
class PigeonParams:
    policy_objective: str = setting("POLICY_OBJECTIVE", "A_BINPACK", kind="choice:A_BINPACK,LOAD_BALANCE,CONSOLIDATE",
                                    help="the pigeon agent's policy")
    num_resources: int = setting("NUM_RESOURCES", 2, lo=1, hi=5,
                                 help="the pigeon agent's resources: the first N of cpu, memory, pods, gpu, ephemeral-storage")


# ---- scoring ------------------------------------------------------------------------------------

def pigeon_scores(values: np.ndarray) -> np.ndarray:
    """Objective values (lower is better, NaN = infeasible) -> int scores 0..10.

    NaN -> 0; all equal -> 10; otherwise round(1 + 9 (max - v) / (max - min)), rounding halves up
    (Go's math.Round, which the original used; numpy's round would send 5.5 to 6 but 4.5 to 4)."""
    v = np.asarray(values, dtype=float)
    if v.ndim == 1 and v.size:
        vmax = float(np.maximum.reduce(v))  # = v.max(), without its wrapper
        if vmax == vmax:  # max is NaN when any value is: every value is finite here (the usual call)
            return finite_scores(v, vmax, float(np.minimum.reduce(v)))
    finite = ~np.isnan(v)
    out = np.zeros(v.shape, dtype=np.int64)
    if not finite.any():
        return out
    vmax = float(v[finite].max())
    vmin = float(v[finite].min())
    span = vmax - vmin
    # Equal nodes can come out a few ulps apart (the same sum taken with a different row swapped
    # in), and a plain "span == 0" would then stretch that noise over the whole 1..10 range, e.g.
    # scoring two identical nodes 1 and 10. Values are O(1), so 1e-12 is far below any real gap.
    if span <= EQUAL_RTOL * max(1.0, abs(vmax)):
        out[finite] = MAX_PRIORITY
        return out
    x = 1.0 + (MAX_PRIORITY - 1) * (vmax - v[finite]) / span
    out[finite] = np.clip(np.floor(x + 0.5), 0, MAX_PRIORITY).astype(np.int64)
    return out


def finite_scores(v: np.ndarray, vmax: float, vmin: float) -> np.ndarray:
    """pigeon_scores of values that are all finite: the same operations on the whole array instead of on its
    finite part (no masks, no gathers, no scatter; the clip as maximum / minimum in place, the same values where
    nothing is NaN).

    The clip changes nothing while the span is at most CLIP_FREE_SPAN: vmin <= v <= vmax, so (rounding being
    monotone) 0 <= vmax - v <= span, 9 (vmax - v) / span <= 9 (1 + 2^-52)^2 and the floor is 1..10 (nothing
    overflows to inf there); it is skipped then."""
    span = vmax - vmin
    if span <= EQUAL_RTOL * max(1.0, abs(vmax)):
        return np.full(v.shape, MAX_PRIORITY, dtype=np.int64)
    x = np.subtract(vmax, v)
    np.multiply(MAX_PRIORITY - 1, x, out=x)
    np.divide(x, span, out=x)
    np.add(1.0, x, out=x)
    np.add(x, 0.5, out=x)
    np.floor(x, out=x)  # = np.floor(1.0 + (MAX_PRIORITY - 1) * (vmax - v) / span + 0.5), in place
    if span > CLIP_FREE_SPAN:
        np.minimum(np.maximum(x, 0, out=x), MAX_PRIORITY, out=x)
    return x.astype(np.int64)


# ---- statistics helpers -------------------------------------------------------------------------

def albert_zhang(mu: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """Albert-Zhang multivariate coefficient of variation sqrt(mu' Sigma mu) / (mu' mu), given mu
    (..., R) and quad = mu' Sigma mu (...). 0 where either part is not positive, as the original
    (a negative quadratic form is rounding on a near-singular covariance, not variation)."""
    return albert_zhang_of(_einsum("...i,...i->...", mu, mu), quad)


def albert_zhang_of(denom: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """albert_zhang given denom = mu' mu."""
    # the common case (every one positive, none NaN: the least of both, NaN if any is, is positive): the masks below
    # change nothing (they only keep sqrt and / quiet); one reduction instead of two
    if denom.size and np.minimum.reduce(np.minimum(denom, quad), axis=None) > 0:
        return np.sqrt(quad) / denom
    ok = (denom > 0) & (quad > 0)
    return np.where(ok, np.sqrt(np.where(ok, quad, 0.0)) / np.where(ok, denom, 1.0), 0.0)


def utilisation(usage: np.ndarray, cap: np.ndarray, zero_cap: np.ndarray | float) -> np.ndarray:
    """usage / cap without a division warning; ``zero_cap`` where cap <= 0."""
    safe = np.where(cap > 0, cap, 1.0)
    return np.where(cap > 0, usage / safe, zero_cap)


@dataclass(slots=True)
class DemandStats:
    """Running first and second moments of pod demand (canonical units), as libpigeon's demandstats."""

    count: int = 0
    mean: np.ndarray | None = None  # (R,)
    second: np.ndarray | None = None  # (R, R), E[d d']

    def updated(self, demand: np.ndarray) -> DemandStats:
        count = min(self.count + 1, DEMAND_WINDOW)
        w = 1.0 / count
        outer = demand[:, None] * demand  # = np.outer(demand, demand), without its wrapper's overhead
        if self.mean is None or self.second is None or self.mean.shape != demand.shape:
            return DemandStats(count, demand.copy(), outer)
        return DemandStats(count, (1 - w) * self.mean + w * demand, (1 - w) * self.second + w * outer)


def demand_gamma(stats: DemandStats, cap: np.ndarray, unit: np.ndarray | float = 1.0) -> float:
    """gamma_dem: Albert-Zhang CV of demand, normalised per resource by the mean capacity of the
    nodes that have some (cap (K, R)). The covariance is E[d d'] - E[d] E[d]', both normalised
    (libpigeon's abpnf_getvariation_demand_history: the moments, not a sample of pods). ``unit``
    (scalar or (R,)) is the original's unit of each resource in canonical units (ORIGINAL_UNIT)."""
    if stats.mean is None or stats.second is None:
        return 0.0
    return demand_gamma_at(stats, average_capacity(cap, unit))


def average_capacity(cap: np.ndarray, unit: np.ndarray | float = 1.0) -> np.ndarray:
    """Per resource, the mean capacity of the nodes that have some of it (cap (K, R)); ``unit`` where none has."""
    pos = cap > 0
    count = pos.sum(axis=0)
    total = np.where(pos, cap, 0.0).sum(axis=0)
    # A resource no node has is left unnormalised, as in the original (cloudsystem_getaveragecapacity
    # returns 0 there and the normaliser skips it), i.e. in the original's unit, not in bytes. It
    # only shifts gamma_dem, equally for every node.
    unit = np.asarray(unit, dtype=float)
    if unit.shape != total.shape:
        unit = np.broadcast_to(unit, total.shape)
    return np.where(count > 0, total / np.maximum(count, 1), unit)


def demand_gamma_at(stats: DemandStats, avgcap: np.ndarray) -> float:
    """demand_gamma given the mean capacities (average_capacity of the call's nodes); stats has moments."""
    assert stats.mean is not None and stats.second is not None
    mu = stats.mean / avgcap
    cov = stats.second / (avgcap[:, None] * avgcap) - mu[:, None] * mu  # np.outer, inline
    return float(albert_zhang(mu, np.asarray(mu @ cov @ mu)))


# ---- objectives, one value per known node ---------------------------------------------------------
# Each takes the rows of the known nodes (K of them) and returns (K,) values as if the pod were placed
# on that row; infeasible rows are masked by the caller.

def load_balance_values(u: np.ndarray, u_new: np.ndarray) -> np.ndarray:
    """Population std of u with row i replaced by u_new[i], for each i."""
    k = u.size
    # Centre first: var = E[x^2] - E[x]^2 cancels badly when the u are close to each other and far
    # from 0; after subtracting their mean the two terms are of the size of the variance itself.
    c = u.mean()
    x, xn = u - c, u_new - c
    s1 = x.sum() - x + xn
    s2 = np.dot(x, x) - x * x + xn * xn
    var = s2 / k - (s1 / k) ** 2
    return np.sqrt(np.maximum(var, 0.0))


def consolidate_values(u: np.ndarray, u_new: np.ndarray) -> np.ndarray:
    """1 - sqrt(mean(term^2)) with row i replaced by u_new[i], for each i (0 if avg not in (0, 1)).

    Sum of (avg - u_j)^2 over u_j < avg and of (u_j - avg)^2 over the rest, for each candidate's own
    avg: sort u once, take prefix sums of x and x^2, and binary-search each avg. These sums still hold
    the candidate's old value, so its old term is taken out and its new term put in."""
    k = u.size
    c = u.mean()  # centred for the same reason as load_balance_values
    x, xn = u - c, u_new - c
    a = (xn - x) / k  # each candidate's new average, centred
    avg = a + c
    xs = np.sort(x)
    p1 = np.concatenate(([0.0], np.cumsum(xs)))
    p2 = np.concatenate(([0.0], np.cumsum(xs * xs)))
    j = np.searchsorted(xs, a, side="left")  # xs[:j] < a <= xs[j:]
    below = j * a * a - 2.0 * a * p1[j] + p2[j]
    above = (p2[k] - p2[j]) - 2.0 * a * (p1[k] - p1[j]) + (k - j) * a * a
    # Values equal to avg sit in "above" with a zero term, so the split point does not matter for them.
    inside = (avg > 0) & (avg < 1)
    lo = np.where(inside, avg, 1.0)
    hi = np.where(inside, 1.0 - avg, 1.0)
    total = np.maximum(below, 0.0) / lo**2 + np.maximum(above, 0.0) / hi**2

    def term2(v: np.ndarray) -> np.ndarray:
        return np.where(v < a, ((a - v) / lo) ** 2, ((v - a) / hi) ** 2)

    total = total - term2(x) + term2(xn)
    value = 1.0 - np.sqrt(np.maximum(total, 0.0) / k)
    return np.where(inside, value, 0.0)


def binpack_values(util: np.ndarray, util_new: np.ndarray, gamma_dem: float) -> np.ndarray:
    """|gamma_sys - gamma_dem| with row i of the (K, R) utilisation matrix replaced by util_new[i].

    gamma_sys needs mu' Sigma mu with mu, Sigma the mean and population covariance of the rows. With
    Q = X'X of the centred rows, swapping row i gives S_i = S - x_i + x'_i and
    mu' Q_i mu = mu' Q mu - (mu . x_i)^2 + (mu . x'_i)^2: (K, R) work, no (K, R, R) array."""
    return binpack_values_from(binpack_prelude(util), util_new, gamma_dem)


@dataclass(frozen=True, slots=True)
class BinpackPrelude:
    """binpack_values' terms of the nodes' utilisation alone (not of the pod): kept while the usage is the same."""

    k: int
    c: np.ndarray  # the mean utilisation per resource
    x: np.ndarray  # the centred utilisation
    q: np.ndarray  # x' x
    rest: np.ndarray  # the sum of the centred rows less each row


def binpack_prelude(util: np.ndarray) -> BinpackPrelude:
    k = util.shape[0]
    c = np.add.reduce(util, axis=0) / k  # = util.mean(axis=0) (its sum and division), without its wrapper
    x = util - c
    return BinpackPrelude(k, c, x, x.T @ x, np.add.reduce(x, axis=0) - x)


def binpack_values_from(pre: BinpackPrelude, util_new: np.ndarray, gamma_dem: float) -> np.ndarray:
    """binpack_values with the prelude of ``util`` given: binpack_values_einsums' values, bit for bit, with its four
    sums of products along a row ("ki,ki->k": mu with x, xn, m and mu) in one einsum over the four stacked.

    np.einsum sums such a row term by term in index order when the operands are F-ordered (the objective's are:
    utilisation is gathered by column); C-ordered with R > 1 it may not (R = 2 included: two rows of a property
    test differ in their last bit), and the stack (F-ordered) would: binpack_values_einsums then."""
    k, c, x, q = pre.k, pre.c, pre.x, pre.q
    r = c.shape[0]
    if r > 1 and not (x.flags.f_contiguous and util_new.flags.f_contiguous):
        return binpack_values_einsums(pre, util_new, gamma_dem)
    y = np.empty((4, r, k)).transpose(0, 2, 1)  # x, xn, m, mu: (K, R) each, F-ordered
    y[0] = x
    xn = np.subtract(util_new, c, out=y[1])
    m = np.add(pre.rest, xn, out=y[2])  # centred mean per candidate: (sum of x - x + xn) / k, as ever
    np.divide(m, k, out=m)
    mu = np.add(m, c, out=y[3])
    quad_q = _einsum("ki,ij,kj->k", mu, q, mu)
    dots = _einsum("ki,ski->sk", mu, y)  # mu . x, mu . xn, mu . m, mu . mu
    quad_q = quad_q - dots[0] ** 2 + dots[1] ** 2
    quad = quad_q / k - dots[2] ** 2
    return np.abs(albert_zhang_of(dots[3], quad) - gamma_dem)


def binpack_values_einsums(pre: BinpackPrelude, util_new: np.ndarray, gamma_dem: float) -> np.ndarray:
    """binpack_values_from one einsum per sum (the reference it keeps to)."""
    k, c, x, q = pre.k, pre.c, pre.x, pre.q
    xn = util_new - c
    m = (pre.rest + xn) / k  # centred mean per candidate, (K, R): (sum of x - x + xn) / k, as ever
    mu = m + c
    quad_q = _einsum("ki,ij,kj->k", mu, q, mu)
    quad_q = quad_q - _einsum("ki,ki->k", mu, x) ** 2 + _einsum("ki,ki->k", mu, xn) ** 2
    # Sigma = Q_i / K - m m' (covariance is shift-invariant, so the centred mean is the one to take out)
    quad = quad_q / k - _einsum("ki,ki->k", mu, m) ** 2
    return np.abs(albert_zhang(mu, quad) - gamma_dem)


# ---- agent ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CallCapacity:
    """What the objectives need of one call's capacity matrix (K, R) that depends on nothing else."""

    key: bytes  # the matrix's bytes
    shape: tuple[int, ...]
    average: np.ndarray  # average_capacity(matrix, units)
    all_positive: bool


@dataclass(slots=True, eq=False)
class UsageTerms:
    """One call's usage of the used resources and what the objectives take from it alone (kept for a read-only
    requested matrix and capacity, by identity: a store-wide view's, until a pod is bound or leaves)."""

    usage: np.ndarray  # (K, R)
    free: np.ndarray  # cap - usage
    least_free: list[float]  # per resource, the least free of the nodes (NaN ignored; NaN if all are)
    binpack: BinpackPrelude | None = None


@dataclass(slots=True)
class PigeonResult:
    values: np.ndarray  # (n,) objective per node of the call; NaN = infeasible or unknown
    gamma_dem: float | None  # A_BINPACK only
    demand_samples: int


class PigeonAgent(Agent):
    name = "pigeon"
    explain_per_node = ("pigeon_value",)
    Params = PigeonParams

    def __init__(self, params: PigeonParams) -> None:
        super().__init__(params)
        policy = str(params.policy_objective).upper()
        # The original falls back to A_BINPACK for a name it does not know (objfn_create's default).
        self.policy = policy if policy in POLICIES else A_BINPACK
        self.num_resources = int(min(max(int(params.num_resources), 1), len(RESOURCES)))
        self.resources = RESOURCES[: self.num_resources]
        self.units = np.array([ORIGINAL_UNIT[r] for r in self.resources])
        self._lock = threading.Lock()
        self._demand = DemandStats()
        self._settled: bytes | None = None  # a demand whose update leaves self._demand as it is (see _updated)
        self._last_capacity: CallCapacity | None = None
        self._view_capacity = LastKept()  # (cols, cap, capacity) of the last read-only alloc
        self._view_usage = LastKept()  # the UsageTerms of the last read-only requested and cap
        self._last_gamma: tuple[bytes, DemandStats, CallCapacity, float] | None = None
        self.priorities = {"pigeon-holing": self.score}
        # A_BINPACK and CONSOLIDATE pull pods together by requests; LOAD_BALANCE spreads them
        self.packing = frozenset() if self.policy == LOAD_BALANCE else frozenset(self.priorities)

    def demand(self, call: Call) -> np.ndarray:
        """The pod's demand over the used resources, canonical units (the objectives use ratios, so
        the original's MB / GB units change only the defaults, converted here, and a resource no node
        has, which demand_gamma takes in the original's unit: ORIGINAL_UNIT).

        Differences from the original (adapter.go), following kso's spec: requests are floats, so a
        memory request under 1 MiB is kept as it is (the original's integer MB made it 0 and then 16);
        the gpu demand is nvidia.com/gpu (the original read a resource "gpu" and, through an inverted
        ok-check, always got 0); ephemeral-storage demand and capacity are in the same unit (the
        original compared demand bytes with capacity GB). The pod counts as 1 pod."""
        req = call.pod.requests
        full = [req.get(CPU, 0.0) or DEFAULT_CPU_MILLI, req.get(MEMORY, 0.0) or DEFAULT_MEMORY_BYTES, 1.0,
                req.get(GPU, 0.0), req.get(EPHEMERAL_STORAGE, 0.0)]  # in RESOURCES' order
        return np.array(full[: self.num_resources], dtype=float)

    def _compute(self, call: Call, commit: bool) -> PigeonResult:
        view = call.view
        n = len(view)
        d = self.demand(call)
        stats = self._demand
        if self.policy == A_BINPACK:
            # The original adds the pod to the demand statistics before evaluating it
            # (evaluator_eval), so even the first pod has a demand shape. Once per call, under the
            # lock, so concurrent calls each count once; explain() only peeks.
            with self._lock:
                stats = self._updated(d, commit)

        # "All nodes" are the known nodes of this call: the original's state updater dropped every
        # node it was not told about in the call (stateupdater_stop), and kso has no capacity for an
        # unknown node to put in anyone's objective.
        all_known = view.all_known()
        rows = None if all_known else np.flatnonzero(view.known)
        if rows is not None and rows.size == 0:
            return PigeonResult(np.full(n, np.nan), None, stats.count)
        kept = None if rows is not None else self._view_capacity.get(view.alloc)
        if kept is not None:
            # the same read-only alloc as the last call (a store-wide view's: its columns unchanged)
            cols, cap, capacity = kept
        else:
            cols = [view.columns[r] for r in self.resources]
            # = alloc[rows][:, cols]: the same values and memory layout (column-major, as the column gather makes
            # it), which the sums of the objective below follow; a row-major copy changes their last bits.
            cap = (view.alloc if rows is None else view.alloc.take(rows, axis=0))[:, cols]
            capacity = self._capacity(cap)
            if rows is None and not view.alloc.flags.writeable:  # read only: the same object is the same values
                cap.flags.writeable = False
                self._view_capacity.keep((cols, cap, capacity), view.alloc)
        gamma_dem = None
        if self.policy == A_BINPACK and stats.mean is not None and stats.second is not None:
            gamma_dem = self._gamma(stats, capacity)
        elif self.policy == A_BINPACK:
            gamma_dem = 0.0
        requested = call.requested()
        used = None if rows is not None else self._view_usage.get(requested, cap)
        if used is None:
            usage = (requested if rows is None else requested.take(rows, axis=0))[:, cols]
            free = cap - usage
            used = UsageTerms(usage, free, np.fmin.reduce(free, axis=0).tolist() if free.size else [])
            if rows is None:  # kept when read only (a store-wide view's requested, the kept cap)
                self._view_usage.keep(used, requested, cap)
        usage = used.usage
        new_usage = usage + d
        # Infeasible when the demand exceeds what is left in any used resource (no overflow, as the
        # original's resource_canuse). A node with 0 of a resource the pod asks for fails here; one
        # with 0 of a resource the pod does not ask for (gpu, typically) is fine, as in the original.
        feasible = None  # None: every row feasible (the usual call: the least free per resource says so)
        # some d_j > free[k, j] exactly when d_j > min_k free[k, j] (NaN, which no comparison passes, left out)
        if not used.least_free or any(map(gt, d.tolist(), used.least_free)):
            short = d > used.free
            # = short.any(axis=1), without numpy's slow short-row reduction
            over = short[:, 0].copy()
            for j in range(1, short.shape[1]):
                over |= short[:, j]
            feasible = ~over
            if not feasible.any():
                return PigeonResult(np.full(n, np.nan), gamma_dem, stats.count)

        if gamma_dem is not None:
            # Utilisation clipped to [0, 1]; a resource with no capacity is 0 if unused, else full
            # (libpigeon's resource_getutilization). Every capacity positive (the usual case): utilisation()
            # is the plain ratio there.
            if capacity.all_positive:
                if used.binpack is None:  # the node side of the objective: kept with the usage it comes from
                    util = usage / cap
                    _clip(util, 0.0, 1.0, out=util)  # = np.clip(util, 0, 1) in place: its ufunc, without the wrappers
                    used.binpack = binpack_prelude(util)
                util_new = new_usage / cap
                _clip(util_new, 0.0, 1.0, out=util_new)
                obj = binpack_values_from(used.binpack, util_new, gamma_dem)
            else:
                util = np.clip(utilisation(usage, cap, (usage > 0).astype(float)), 0.0, 1.0)
                util_new = np.clip(utilisation(new_usage, cap, (new_usage > 0).astype(float)), 0.0, 1.0)
                obj = binpack_values(util, util_new, gamma_dem)
        else:
            # Unclipped ratio of the first resource, 1 without capacity (libpigeon's lbfn / consfn):
            # an overcommitted node shows as more than full.
            u = utilisation(usage[:, 0], cap[:, 0], 1.0)
            u_new = utilisation(new_usage[:, 0], cap[:, 0], 1.0)
            obj = load_balance_values(u, u_new) if self.policy == LOAD_BALANCE else consolidate_values(u, u_new)

        if feasible is not None:
            obj = np.where(feasible, obj, np.nan)
        if rows is None:
            return PigeonResult(obj, gamma_dem, stats.count)
        values = np.full(n, np.nan)
        values[rows] = obj
        return PigeonResult(values, gamma_dem, stats.count)

    def _updated(self, d: np.ndarray, commit: bool) -> DemandStats:
        """self._demand.updated(d) (kept with ``commit``). Once the running average has settled on a demand (one
        workload's pods all ask the same), updating with it gives back the same moments, bit for bit; that demand is
        remembered and the update skipped while it repeats. Under the lock."""
        old = self._demand
        key = d.tobytes()
        if key == self._settled:
            return old
        new = old.updated(d)
        if commit:
            self._demand = new
            settled = (new.count == old.count and old.mean is not None and old.second is not None and new.second is not None
                       and new.mean.tobytes() == old.mean.tobytes() and new.second.tobytes() == old.second.tobytes())
            self._settled = key if settled else None
        return new

    def _gamma(self, stats: DemandStats, capacity: CallCapacity) -> float:
        """demand_gamma_at(stats, capacity.average), kept for the last moments and capacities seen: the pods of
        one workload have the same demand, and the moments' running average then stays exactly that demand."""
        assert stats.mean is not None and stats.second is not None
        last = self._last_gamma
        if last is not None and last[1] is stats and last[2] is capacity:  # both kept, never changed in place
            return last[3]
        key = stats.mean.tobytes() + stats.second.tobytes() + capacity.key
        if last is not None and last[0] == key:
            self._last_gamma = (key, stats, capacity, last[3])
            return last[3]
        gamma = demand_gamma_at(stats, capacity.average)
        self._last_gamma = (key, stats, capacity, gamma)
        return gamma

    def _capacity(self, cap: np.ndarray) -> CallCapacity:
        """average_capacity(cap) and whether every entry is positive, kept for the last capacity matrix seen:
        consecutive calls mostly name the same nodes, whose capacities rarely change."""
        key = cap.tobytes()
        last = self._last_capacity
        if last is not None and last.key == key and last.shape == cap.shape:
            return last
        last = self._last_capacity = CallCapacity(key, cap.shape, average_capacity(cap, self.units), bool((cap > 0).all()))
        return last

    def result(self, call: Call) -> PigeonResult:
        """The values of this call, computed once (and the demand statistics updated once)."""
        memo = call.memo.get(MEMO_KEY)
        if memo is None:
            memo = call.memo[MEMO_KEY] = self._compute(call, commit=True)
        return memo

    def score(self, call: Call) -> np.ndarray:
        return pigeon_scores(self.result(call).values)

    def explain(self, call: Call) -> dict[str, Any]:
        # Reuse the values the priority computed; a bare /debug/explain must not feed the pod into the
        # demand statistics (that would change later decisions), so it only peeks.
        res = call.memo.get(MEMO_KEY)
        if res is None:
            res = self._compute(call, commit=False)
        out: dict[str, Any] = {
            "policy": self.policy,
            "resources": list(self.resources),
            "pigeon_value": [None if np.isnan(v) else float(v) for v in res.values],
        }
        if res.gamma_dem is not None:
            out["gamma_demand"] = res.gamma_dem
            out["demand_samples"] = res.demand_samples
        return out
