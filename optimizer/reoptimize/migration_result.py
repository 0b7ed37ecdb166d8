"""What a re-optimisation returns (optimizer.reoptimize.migration solves it): the moves, each node's outcome, and the
target plan the extender follows while the evicted pods are re-created."""

from __future__ import annotations

import hashlib
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from kso.core.cluster import ClusterState
from kso.core.objects import PodInfo
from optimizer.plan.compiled import POLICIES, Compiled, evaluate
from optimizer.plan.placement_plan import PlacementPlan, PlanClass, class_rules, plan_nodes
from optimizer.plan.problem import LOAD_RESOURCES, NodeLoad, PlacementProblem

RISK, POLICY = "risk", "policy"


@dataclass(slots=True)
class Move:
    pod: str
    namespace: str
    uid: str
    from_node: str
    to_node: str
    reason: str  # "risk" (the source node is over its safe bound) | "policy"
    class_key: str
    priority: int = 0


@dataclass(slots=True)
class NodeOutcome:
    name: str
    pods_before: int
    pods_after: int
    mean_before: dict[str, float]  # forecast mean load / allocatable, per LOAD_RESOURCES
    mean_after: dict[str, float]
    risk_before: float  # max over resources of P(util > U*), exact rule
    risk_after: float
    over_before: bool
    over_after: bool
    in_use_before: bool
    in_use_after: bool
    moved_out: int = 0
    moved_in: int = 0


@dataclass
class MigrationResult:
    moves: list[Move]
    nodes: list[NodeOutcome]
    plan: PlacementPlan  # target slots of every move
    status: str
    objective: float
    bound: float
    wall_s: float
    candidates: int  # movable pods the model could move
    policy: str
    u_star: float
    eps: float
    notes: list[str] = field(default_factory=list)
    _ctx: Any = field(default=None, repr=False)

    @property
    def over_before(self) -> list[str]:
        return [n.name for n in self.nodes if n.over_before]

    @property
    def over_after(self) -> list[str]:
        return [n.name for n in self.nodes if n.over_after]

    def nodes_in_use(self) -> tuple[int, int]:
        return sum(n.in_use_before for n in self.nodes), sum(n.in_use_after for n in self.nodes)

    def plan_for(self, moves: list[Move], now: float | None = None) -> PlacementPlan:
        """The target plan of a subset of the moves (e.g. the evictions that succeeded)."""
        return target_plan(self._ctx, moves, now)


@dataclass
class MigrationContext:
    problem: PlacementProblem
    comp: Compiled
    plan_keys: list[str]  # per internal class: the class key the extender computes for its pods
    namespaces: list[str]
    members: list[dict[int, list[PodInfo]]]  # per class: node index -> movable pods there
    x_cur: np.ndarray
    x_new: np.ndarray
    anchored: np.ndarray
    risk_after: np.ndarray
    policy: str
    status: str
    objective: float
    bound: float
    wall_s: float
    notes: list[str]
    # per node (problem.nodes order): its load as read, before the movable pods were taken out of it
    loads_now: list[dict[str, NodeLoad]] = field(default_factory=list)


def moves_of(ctx: MigrationContext, over_before: np.ndarray) -> list[Move]:
    comp, x, x_cur = ctx.comp, ctx.x_new, ctx.x_cur
    moves: list[Move] = []
    for ci in range(comp.n_classes):
        leave = x_cur[ci] - x[ci]
        evicted: list[tuple[PodInfo, int]] = []
        for ni in np.nonzero(leave > 0)[0]:
            # Risk sources first; within a node the lowest priority, then by name.
            evicted += [(p, int(ni)) for p in ctx.members[ci][int(ni)][: int(leave[ni])]]
        evicted.sort(key=lambda pn: (not over_before[pn[1]], pn[0].priority, pn[0].name))
        targets = [int(ni) for ni in np.nonzero(leave < 0)[0] for _ in range(int(-leave[ni]))]
        for (pod, src), dst in zip(evicted, targets, strict=True):
            moves.append(Move(pod.name, pod.namespace, pod.uid, comp.node_names[src], comp.node_names[dst],
                              RISK if over_before[src] else POLICY, ctx.plan_keys[ci], pod.priority))
    moves.sort(key=lambda m: (m.reason != RISK, m.from_node, m.namespace, m.pod))
    return moves


def outcomes(ctx: MigrationContext, state: ClusterState, risk_before: np.ndarray, mean_before: np.ndarray,
              mean_after: np.ndarray, over_before: np.ndarray, moves: list[Move]) -> list[NodeOutcome]:
    comp, eps = ctx.comp, ctx.problem.eps
    out_n: dict[str, int] = defaultdict(int)
    in_n: dict[str, int] = defaultdict(int)
    for m in moves:
        out_n[m.from_node] += 1
        in_n[m.to_node] += 1
    rows = []
    for ni, name in enumerate(comp.node_names):
        pods = len(state.pods_on(name))
        with np.errstate(divide="ignore", invalid="ignore"):
            before = {r: float(max(mean_before[ri, ni], 0.0) / comp.cap[ri, ni]) if comp.cap[ri, ni] > 0 else math.nan
                      for ri, r in enumerate(LOAD_RESOURCES)}
            after = {r: float(max(mean_after[ri, ni], 0.0) / comp.cap[ri, ni]) if comp.cap[ri, ni] > 0 else math.nan
                     for ri, r in enumerate(LOAD_RESOURCES)}
        r_before = float(risk_before[:, ni].max())
        r_after = float(ctx.risk_after[:, ni].max())
        rows.append(NodeOutcome(
            name, pods, pods - out_n[name] + in_n[name], before, after, r_before, r_after,
            bool(over_before[ni]), bool(((ctx.risk_after[:, ni] > eps + 1e-9) & (comp.cap[:, ni] > 0)).any()),
            bool(ctx.anchored[ni] or ctx.x_cur[:, ni].any()), bool(ctx.anchored[ni] or ctx.x_new[:, ni].any()),
            out_n[name], in_n[name]))
    return rows


def placements(ctx: MigrationContext, moves: list[Move]) -> tuple[np.ndarray, np.ndarray]:
    """(x_evicted, x_after): pods of each class on each node once the moves' pods are evicted, and once
    their replacements are on the target nodes."""
    comp = ctx.comp
    class_of = {(key, ns): ci for ci, (key, ns) in enumerate(zip(ctx.plan_keys, ctx.namespaces, strict=True))}
    node_of = {name: ni for ni, name in enumerate(comp.node_names)}
    x_evicted = ctx.x_cur.copy()
    x_after = ctx.x_cur.copy()
    for m in moves:
        ci = class_of[(m.class_key, m.namespace)]
        x_evicted[ci, node_of[m.from_node]] -= 1
        x_after[ci, node_of[m.from_node]] -= 1
        x_after[ci, node_of[m.to_node]] += 1
    return x_evicted, x_after


# Agreement asked of the re-optimiser's load of a node with what its own source says (of capacity): far below
# what a checker can tell apart, far above the rounding of taking the movable pods' usage out and back in.
SAME_LOAD = 1e-9


def load_sources(ctx: MigrationContext, x_evicted: np.ndarray, mean: np.ndarray, var: np.ndarray) -> list[dict[str, str]]:
    """Per node and load resource, where its load once the moves' pods are evicted comes from: the node's own
    source (a forecast, the annotations, the bound pods' requests) where the load is still what that source
    says, else "given": the re-optimiser's what-if load (the node's load less the evicted pods' usage
    estimate, or movable pods that stay counted at their measured usage instead of their requests)."""
    comp, problem = ctx.comp, ctx.problem
    out = []
    for ni, node in enumerate(problem.nodes):
        sources = {}
        for ri, r in enumerate(LOAD_RESOURCES):
            load = ctx.loads_now[ni].get(r) if ctx.loads_now else None
            if load is not None and math.isfinite(load.mean):
                source, ref_mean, ref_std = load.source, load.mean, load.std if math.isfinite(load.std) else 0.0
            else:  # the requests of the pods that stay: those that never move, and the movable ones not evicted
                source, ref_std = "requests", 0.0
                ref_mean = node.requested.get(r, 0.0) + sum(
                    int(x_evicted[ci, ni]) * wc.requests.get(r, 0.0) for ci, wc in enumerate(problem.classes))
            tol = SAME_LOAD * max(float(comp.cap[ri, ni]), 1.0)
            same = abs(mean[ri, ni] - ref_mean) <= tol and abs(math.sqrt(max(var[ri, ni], 0.0)) - ref_std) <= tol
            sources[r] = source if same else "given"
        out.append(sources)
    return out


def target_plan(ctx: MigrationContext, moves: list[Move], now: float | None = None) -> PlacementPlan:
    """A PlacementPlan whose slots are the moves' targets: the extender sends each replacement pod of a
    class to a node with a free slot, and the pods bound now (the baseline) take none. Its loads and risks
    "before" are those of the cluster once the moves' pods are evicted (their replacements pending), "after"
    once the replacements are placed, as a ``kso plan`` plan states them for its pending pods; each class
    lists the evicted pods its slots are for."""
    now = time.time() if now is None else now
    comp, problem = ctx.comp, ctx.problem
    x_evicted, x_after = placements(ctx, moves)
    before = evaluate(comp, x_evicted, problem.u_star)
    after = evaluate(comp, x_after, problem.u_star)
    class_of = {(key, ns): ci for ci, (key, ns) in enumerate(zip(ctx.plan_keys, ctx.namespaces, strict=True))}
    classes: dict[str, PlanClass] = {}
    for m in moves:
        pc = classes.get(m.class_key)
        if pc is None:
            wc = problem.classes[class_of[(m.class_key, m.namespace)]]
            usage = {"mean": dict(wc.usage.mean), "std": dict(wc.usage.std), "source": wc.usage.source}
            pc = classes[m.class_key] = PlanClass(dict(wc.requests), 0, 0, {},
                                                  {"pods": [], "rules": class_rules(wc.example), "usage": usage})
        pc.count += 1
        pc.slots[m.to_node] = pc.slots.get(m.to_node, 0) + 1
        pc.detail["pods"].append(f"{m.namespace}/{m.pod}")
    nodes = plan_nodes(comp, before, after, ctx.anchored | x_after.any(axis=0),
                       load_sources(ctx, x_evicted, before[2], before[3]))
    body = orjson.dumps({k: c.slots for k, c in classes.items()}, option=orjson.OPT_SORT_KEYS)
    plan_id = hashlib.sha1(body + str(now).encode()).hexdigest()[:12]
    policy = ctx.policy if ctx.policy in POLICIES else "binpack"
    notes = [f"kso reoptimize: target slots of {len(moves)} evicted pods", *ctx.notes]
    if ctx.policy not in POLICIES:
        notes.append(f"policy {ctx.policy}: risk moves only (recorded as {policy})")
    return PlacementPlan(plan_id, now, policy, ctx.status, ctx.objective, ctx.bound, math.nan, problem.u_star,
                         problem.eps, ctx.wall_s, dict(problem.input_ages), classes, nodes,
                         list(problem.baseline_pods), notes)
