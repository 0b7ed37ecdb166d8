"""The placement problem as integer arrays (what CP-SAT, the heuristics and the LP bound all read), the
solver's options and result types, and the exact evaluation of a placement.

The bottom of the optimizer's solver stack: optimizer.plan.heuristics, optimizer.plan.exact, optimizer.plan.cpsat and
optimizer.plan.model import from here, never the other way round.
Units in the model are integers: cpu millicores, memory MiB (requests rounded up, capacities down).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kso.core.placement import rule_violation
from kso.core.resources import CPU, MEMORY, MIB, PODS
from optimizer.plan.chance import beta_max_mean, linear_safe_bound, plan_risk, z_value
from optimizer.plan.problem import LOAD_RESOURCES, PlacementProblem

POLICIES = ("binpack", "load-balance", "consolidate", "a-binpack", "cost")
SCALE = {MEMORY: 1.0 / MIB}  # canonical unit -> model unit; everything else 1:1
T_MAX = 1000
T_CEIL = T_MAX * 100  # domain of the load indexes; nodes already far over their bound are clamped


@dataclass(slots=True)
class SolverOptions:
    policy: str = "binpack"
    time_limit_s: float = 30.0
    workers: int = 2
    relative_gap: float = 0.01
    repair_rounds: int = 3
    seed: int = 0
    hint: str = "ffd"  # "ffd" | "none": start CP-SAT from the first-fit-decreasing placement
    # Above this many (class, node) pairs one CP-SAT model is too slow on a few cores (at 1,500 nodes x ~100
    # classes on 2 workers it did not improve on the hint within a plan's time limit), so the plan is improved by
    # large-neighbourhood search instead: CP-SAT re-solves a few dozen nodes at a time.
    full_model_limit: int = 40_000
    lns_nodes: int = 48
    lns_step_s: float = 3.0
    # The LP relaxation's bound (and gap) of a plan CP-SAT gave none for: reporting only, the placement does
    # not depend on it. A caller that never reads bound or gap (the trace replay) may skip its cost.
    lp_bound: bool = True


@dataclass
class Compiled:
    """The problem as integer arrays, shared by CP-SAT, the heuristics and the LP bound."""

    resources: list[str]
    node_names: list[str]
    class_keys: list[str]
    counts: np.ndarray  # (C,)
    req: np.ndarray  # (C, R) int model units
    free: np.ndarray  # (N, R) int
    eligible: np.ndarray  # (C, N) bool: rules allow it and one pod fits
    a: np.ndarray  # (2, C, N) int: per-pod term of the safe bound (cpu, memory)
    budget: np.ndarray  # (2, N) int: safe budget (may be negative = node already over its bound)
    bound_cap: np.ndarray  # (2, N) float: U* cap in model units
    bound_const: np.ndarray  # (2, N) float: U* cap - budget, the load already there (with spread)
    mean0: np.ndarray  # (2, N) canonical: current load mean
    var0: np.ndarray  # (2, N)
    cap: np.ndarray  # (2, N) canonical allocatable of cpu, memory
    mu: np.ndarray  # (2, C) canonical per-pod usage mean
    var: np.ndarray  # (2, C)
    has_pods: np.ndarray  # (N,) bool
    cost: np.ndarray  # (N,) float
    reasons: dict[str, int] = field(default_factory=dict)  # why (class, node) pairs were excluded

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_classes(self) -> int:
        return len(self.class_keys)

    def subset(self, nodes: np.ndarray, counts: np.ndarray) -> Compiled:
        """The same problem restricted to ``nodes`` with ``counts`` pods of each class to place there."""
        return Compiled(self.resources, [self.node_names[i] for i in nodes], self.class_keys, counts.astype(np.int64),
                        self.req, self.free[nodes], self.eligible[:, nodes], self.a[:, :, nodes], self.budget[:, nodes],
                        self.bound_cap[:, nodes], self.bound_const[:, nodes], self.mean0[:, nodes], self.var0[:, nodes],
                        self.cap[:, nodes], self.mu, self.var, self.has_pods[nodes], self.cost[nodes])

    def ub(self) -> np.ndarray:
        """(C, N) most pods of each class that fit on each node alone (resources and safe bound)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            per_r = np.where(self.req[:, None, :] > 0, self.free[None, :, :] // np.maximum(self.req[:, None, :], 1),
                             np.iinfo(np.int64).max)
            by_fit = per_r.min(axis=2)
            per_s = np.where(self.a > 0, np.maximum(self.budget[:, None, :], 0) // np.maximum(self.a, 1),
                             np.iinfo(np.int64).max)
            by_safe = per_s.min(axis=0)
        ub = np.minimum(np.minimum(by_fit, by_safe), self.counts[:, None])
        return np.where(self.eligible, np.maximum(ub, 0), 0).astype(np.int64)


def merge_identical_classes(comp: Compiled) -> tuple[Compiled, np.ndarray]:
    """(the problem with the classes that are identical for every constraint and objective merged: same
    requests, usage mean and variance (so the same safe-bound terms) and the same eligible nodes, their
    counts summed; the merged class of each original class). A cluster's many owners of the same shape
    (hundreds of ReplicaSets of 100m / 128Mi) are one class to the solver. ``comp`` itself when nothing merges."""
    groups: dict[bytes, int] = {}
    group = np.empty(comp.n_classes, dtype=np.int64)
    for ci in range(comp.n_classes):
        sig = comp.req[ci].tobytes() + comp.mu[:, ci].tobytes() + comp.var[:, ci].tobytes() + comp.eligible[ci].tobytes()
        group[ci] = groups.setdefault(sig, len(groups))
    if len(groups) == comp.n_classes:
        return comp, np.arange(comp.n_classes)
    reps = np.array([int(np.argmax(group == g)) for g in range(len(groups))], dtype=np.int64)
    counts = np.bincount(group, weights=comp.counts, minlength=len(groups)).astype(np.int64)
    merged = Compiled(comp.resources, comp.node_names, [comp.class_keys[c] for c in reps], counts, comp.req[reps],
                      comp.free, comp.eligible[reps], comp.a[:, reps, :], comp.budget, comp.bound_cap, comp.bound_const,
                      comp.mean0, comp.var0, comp.cap, comp.mu[:, reps], comp.var[:, reps], comp.has_pods, comp.cost,
                      comp.reasons)
    return merged, group


def split_merged(x: np.ndarray, group: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A placement of merged classes (merge_identical_classes) as one of the original classes: each merged
    class's pods, node by node, go to its members in turn (any split is the same placement to every rule)."""
    out = np.zeros((len(group), x.shape[1]), dtype=np.int64)
    for g in range(x.shape[0]):
        members = np.nonzero(group == g)[0]
        if len(members) == 1:
            out[members[0]] = x[g]
            continue
        upto = np.cumsum(x[g])  # pods of the merged class on the nodes up to each one
        starts = np.concatenate([[0], np.cumsum(counts[members])[:-1]])
        for ci, s0 in zip(members, starts, strict=True):
            filled = np.clip(upto - s0, 0, counts[ci])
            out[ci] = np.diff(filled, prepend=0)
    return out


def _units(resource: str, value: float, up: bool) -> int:
    v = value * SCALE.get(resource, 1.0)
    return int(math.ceil(v - 1e-9)) if up else int(math.floor(v + 1e-9))


def compile_problem(problem: PlacementProblem) -> Compiled:
    problem.validate()
    nodes, classes = problem.nodes, problem.classes
    resources = [CPU, MEMORY, PODS]
    for c in classes:
        for r, v in c.requests.items():
            if v > 0 and r not in resources:
                resources.append(r)
    n_n, n_c, n_r = len(nodes), len(classes), len(resources)
    req = np.array([[_units(r, c.requests.get(r, 0.0), up=True) for r in resources] for c in classes],
                   dtype=np.int64).reshape(n_c, n_r)
    free = np.array([[_units(r, n.allocatable.get(r, 0.0) - n.requested.get(r, 0.0), up=False) for r in resources]
                     for n in nodes], dtype=np.int64).reshape(n_n, n_r)
    free = np.maximum(free, 0)
    counts = np.array([c.count for c in classes], dtype=np.int64)

    reasons: dict[str, int] = {}
    eligible = np.ones((n_c, n_n), dtype=bool)
    # Classes with the same placement rules (most have none) share one pass over the nodes.
    by_rules: dict[tuple[Any, ...], tuple[np.ndarray, dict[str, int]]] = {}
    for ci, c in enumerate(classes):
        if c.example is None:
            continue
        pod = c.example
        rules = (tuple(sorted(pod.node_selector.items())), pod.tolerations, pod.required_terms)
        if rules not in by_rules:
            column = np.ones(n_n, dtype=bool)
            why_counts: dict[str, int] = {}
            for ni, n in enumerate(nodes):
                why = rule_violation(pod, n.info) if n.info is not None else None
                if why:
                    column[ni] = False
                    why_counts[why.split(" ")[0]] = why_counts.get(why.split(" ")[0], 0) + 1
            by_rules[rules] = column, why_counts
        column, why_counts = by_rules[rules]
        eligible[ci] = column
        for reason, k in why_counts.items():
            reasons[reason] = reasons.get(reason, 0) + k
    fits = (req[:, None, :] <= free[None, :, :]).all(axis=2)
    reasons["requests-do-not-fit"] = int((eligible & ~fits).sum())
    eligible &= fits

    # Safe bound per node and load resource, on the forecast load (or, without a forecast, the bound
    # pods' requests as a stand-in for their load, with no spread).
    mu = np.array([[c.usage.mean.get(r, c.requests.get(r, 0.0)) for c in classes] for r in LOAD_RESOURCES]).reshape(2, n_c)
    sd = np.array([[c.usage.std.get(r, 0.0) for c in classes] for r in LOAD_RESOURCES]).reshape(2, n_c)
    var = sd * sd
    weights = np.maximum(counts, 0).astype(float)
    z = z_value(problem.eps)
    a = np.zeros((2, n_c, n_n), dtype=np.int64)
    budget = np.zeros((2, n_n), dtype=np.int64)
    bound_cap = np.zeros((2, n_n))
    bound_const = np.zeros((2, n_n))
    mean0 = np.zeros((2, n_n))
    var0 = np.zeros((2, n_n))
    cap = np.zeros((2, n_n))
    for ri, r in enumerate(LOAD_RESOURCES):
        scale = SCALE.get(r, 1.0)
        fill_mu = float(np.average(mu[ri], weights=weights)) if weights.sum() else 0.0
        fill_var = float(np.average(var[ri], weights=weights)) if weights.sum() else 0.0
        for ni, n in enumerate(nodes):
            load = n.load.get(r)
            if load is not None and math.isfinite(load.mean):
                mean0[ri, ni], sd0 = load.mean, (load.std if math.isfinite(load.std) else 0.0)
            else:
                mean0[ri, ni], sd0 = n.requested.get(r, 0.0), 0.0
            var0[ri, ni], cap[ri, ni] = sd0 * sd0, n.allocatable.get(r, 0.0)
        z_nodes = _z_per_node(z, np.sqrt(var0[ri]), cap[ri], fill_mu, fill_var, problem)
        for ni in range(n_n):
            m, s, c_n = float(mean0[ri, ni]), math.sqrt(var0[ri, ni]), float(cap[ri, ni])
            coeff, bud = linear_safe_bound(m, s, c_n, mu[ri], var[ri], problem.u_star, float(z_nodes[ni]), fill_mu, fill_var)
            a[ri, :, ni] = np.ceil(np.clip(coeff * scale, 0.0, 2.0**40) - 1e-9).astype(np.int64)
            budget[ri, ni] = int(math.floor(min(max(bud * scale, -2.0**52), 2.0**52) + 1e-9)) if math.isfinite(bud) else -1
            bound_cap[ri, ni] = problem.u_star * c_n * scale
            bound_const[ri, ni] = bound_cap[ri, ni] - budget[ri, ni]
    return Compiled(resources, [n.name for n in nodes], [c.key for c in classes], counts, req, free, eligible,
                    a, budget, bound_cap, bound_const, mean0, var0, cap, mu, var,
                    np.array([n.has_pods for n in nodes], dtype=bool), np.array([n.cost for n in nodes]), reasons)


# The normal z can be looser than the Beta rule (at eps = 0.3 the Beta is skewed towards U*), so each
# node gets the larger of the two, the Beta one read at the spread the node would have when full:
#     z_beta = (U* - beta_max_mean(sigma_full)) / sigma_full,
#     sigma_full = sqrt(s^2 + U* cap / fill_mu * fill_var) / cap.
def _z_per_node(z: float, s: np.ndarray, cap: np.ndarray, fill_mu: float, fill_var: float,
                problem: PlacementProblem) -> np.ndarray:
    fill = np.maximum(fill_mu, 1e-3 * cap)  # as in linear_safe_bound
    with np.errstate(divide="ignore", invalid="ignore"):
        full_var = s * s + np.where(fill > 0, problem.u_star * cap / fill * fill_var, 0.0)
        sigma = np.where(cap > 0, np.sqrt(full_var) / cap, 0.0)
        z_beta = (problem.u_star - beta_max_mean(sigma, problem.u_star, problem.eps)) / sigma
    return np.where((cap > 0) & (sigma > 1e-6), np.maximum(z, z_beta), z)


@dataclass
class SolveResult:
    x: np.ndarray  # (C, N) pods planned
    unplaced: np.ndarray  # (C,)
    status: str
    objective: float
    bound: float
    gap: float
    wall_s: float
    first_feasible_s: float | None
    gap_1pct_s: float | None
    nodes_used: int
    violations: int  # nodes above their safe bound under the exact (Beta) rule
    repair_rounds: int
    risk: np.ndarray  # (2, N) Beta risk after the plan
    headroom: np.ndarray  # (2, N) canonical: mean load the node can still take under its bound
    notes: list[str] = field(default_factory=list)
    progress: list[tuple[float, float, float]] = field(default_factory=list)  # (t, objective, bound)
    start_score: tuple[int, float, float] | None = None  # plan_score of the start the search began from


def evaluate(comp: Compiled, x: np.ndarray, u_star: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(risk, headroom, mean, var) per load resource and node after placing x, under the exact rule."""
    mean = comp.mean0 + np.einsum("rc,cn->rn", comp.mu, x)
    var = comp.var0 + np.einsum("rc,cn->rn", comp.var, x)
    risk = plan_risk(mean, var, comp.cap, u_star)
    headroom = comp.budget / np.array([[SCALE.get(r, 1.0)] for r in LOAD_RESOURCES]) - np.einsum(
        "rcn,cn->rn", comp.a / np.array([SCALE.get(r, 1.0) for r in LOAD_RESOURCES])[:, None, None], x)
    return risk, headroom, mean, var



# Load index of a node against its bound, per mille of U* cap (1000 = at the bound), in the model's
# integer form:  index[r, n] >= (T_MAX * sum_c a[r, c, n] x[c, n] + const[r, n]) / cap[r, n]  with
#     cap[r, n] = max(U* cap in model units, 1),  const[r, n] = ceil(T_MAX * clamp(bound_const, 0, 50 cap)).
# (the load already on the node is clamped so nodes far over their bound keep the domain small).
def index_terms(comp: Compiled) -> tuple[np.ndarray, np.ndarray]:
    """(cap, const) of the load index, both (2, N) int64."""
    cap_i = np.maximum(comp.bound_cap, 1.0).astype(np.int64)
    const = np.ceil(T_MAX * np.minimum(np.maximum(comp.bound_const, 0.0), 50.0 * cap_i)).astype(np.int64)
    return cap_i, const


def load_index(comp: Compiled, x: np.ndarray) -> np.ndarray:
    """(2, N) load index of each node and load resource after placing x (the model's own rounding)."""
    cap_i, const = index_terms(comp)
    load = np.einsum("rcn,cn->rn", comp.a, x) * T_MAX + const
    return np.minimum(-(-load // cap_i), T_CEIL)


# Load-balance's spread: sum over nodes of max(t_n - target, 0), t_n = the node's load index (the larger of
# cpu and memory), target = the index every node would have if the load were spread perfectly:
#     target = T_MAX * (sum_n bound_const[., n] + sum_c count_c mean_n a[., c, n]) / sum_n bound_cap[., n]
# summed over both resources. The model (optimizer.plan.model) and the plan's score (optimizer.plan.exact)
# use this same measure, so CP-SAT's objective ranks plans as the score does.
def balance_target(comp: Compiled) -> int:
    total = comp.bound_const.sum() + float((comp.a.mean(axis=2) * comp.counts[None, :]).sum()) if comp.n_nodes else 0.0
    return int(T_MAX * total / max(comp.bound_cap.sum(), 1.0))


def balance_spread(comp: Compiled, x: np.ndarray, target: int | None = None) -> int:
    """Load-balance's spread of placement x: sum_n max(t_n - target, 0) over the nodes (see balance_target)."""
    if comp.n_nodes == 0:
        return 0
    index = load_index(comp, x).max(axis=0)
    return int(np.maximum(index - (balance_target(comp) if target is None else target), 0).sum())


# Node weights of the node-counting policies, in units of one node = ``unit``:
#     binpack: unit;  consolidate: unit x the node's free cpu / the largest node's (at least 1), so small
#     nodes open last;  cost: unit x the node's cost.
def node_weights(comp: Compiled, policy: str, unit: int = 100) -> np.ndarray:
    if policy == "consolidate":
        free_cpu = comp.free[:, comp.resources.index(CPU)].astype(float)
        biggest = max(float(free_cpu.max(initial=0.0)), 1.0)
        return np.maximum(np.round(unit * free_cpu / biggest), 1).astype(np.int64)
    if policy == "cost":
        return np.maximum(np.round(unit * comp.cost), 0).astype(np.int64)
    return np.full(comp.n_nodes, unit, dtype=np.int64)


# a-binpack (ICAC'19 adaptive binpack, L1 form): node cpu request share s_n = floor(T_MAX req_n / free_n)
# (0..T_MAX); the dispersion S = sum_n |s_n - s_bar| over the nodes that can take pods is driven towards
# the demand's own dispersion D* = n * s_bar * cv(demand) * sqrt(2 / pi), where s_bar = T_MAX x demand /
# capacity and cv = the coefficient of variation of the pods' cpu requests (matching the coefficients of
# variation, in L1).
def a_binpack_shape(comp: Compiled) -> tuple[int, float]:
    """(s_bar, D* per node) of the a-binpack objective."""
    cpu = comp.resources.index(CPU)
    demand = comp.req[:, cpu].astype(float)
    w = comp.counts.astype(float)
    if not w.sum():
        return 0, 0.0
    mean = float(np.average(demand, weights=w))
    cv = float(np.sqrt(np.average((demand - mean) ** 2, weights=w)) / max(mean, 1e-9))
    s_bar = int(T_MAX * float((demand * w).sum()) / max(float(comp.free[:, cpu].sum()), 1.0))
    return s_bar, s_bar * cv * math.sqrt(2 / math.pi)


def a_binpack_miss(comp: Compiled, x: np.ndarray, nodes: np.ndarray | None = None) -> float:
    """|S - D*| of a placement, over ``nodes`` (default: every node that can take a pod and has cpu)."""
    cpu = comp.resources.index(CPU)
    free_cpu = comp.free[:, cpu]
    if nodes is None:
        nodes = comp.eligible.any(axis=0) & (free_cpu > 0)
    s_bar, per_node = a_binpack_shape(comp)
    share = (T_MAX * (comp.req[:, cpu] @ x)) // np.maximum(free_cpu, 1)
    spread = float(np.abs(share[nodes] - s_bar).sum())
    return abs(spread - int(int(nodes.sum()) * per_node))
