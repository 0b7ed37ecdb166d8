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
from kso.core.resources import CPU, MEMORY
from optimizer.plan.compiled import POLICIES, Compiled
from optimizer.plan.placement_plan import PlacementPlan, PlanClass, PlanNodeInfo
from optimizer.plan.problem import LOAD_RESOURCES, PlacementProblem

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
    headroom_after: np.ndarray
    policy: str
    status: str
    objective: float
    bound: float
    wall_s: float
    notes: list[str]


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


def target_plan(ctx: MigrationContext, moves: list[Move], now: float | None = None) -> PlacementPlan:
    """A PlacementPlan whose slots are the moves' targets: the extender sends each replacement pod of a
    class to a node with a free slot, and the pods bound now (the baseline) take none."""
    now = time.time() if now is None else now
    comp, problem = ctx.comp, ctx.problem
    requests = {ctx.plan_keys[ci]: dict(c.requests) for ci, c in enumerate(problem.classes)}
    classes: dict[str, PlanClass] = {}
    for m in moves:
        pc = classes.setdefault(m.class_key, PlanClass(requests.get(m.class_key, {}), 0, 0, {}))
        pc.count += 1
        pc.slots[m.to_node] = pc.slots.get(m.to_node, 0) + 1
    nodes = {}
    for ni, name in enumerate(comp.node_names):
        nodes[name] = PlanNodeInfo({CPU: float(ctx.headroom_after[0, ni]), MEMORY: float(ctx.headroom_after[1, ni])},
                                   {CPU: float(ctx.risk_after[0, ni]), MEMORY: float(ctx.risk_after[1, ni])},
                                   bool(ctx.anchored[ni] or ctx.x_new[:, ni].any()))
    body = orjson.dumps({k: c.slots for k, c in classes.items()}, option=orjson.OPT_SORT_KEYS)
    plan_id = hashlib.sha1(body + str(now).encode()).hexdigest()[:12]
    policy = ctx.policy if ctx.policy in POLICIES else "binpack"
    notes = [f"kso reoptimize: target slots of {len(moves)} evicted pods", *ctx.notes]
    if ctx.policy not in POLICIES:
        notes.append(f"policy {ctx.policy}: risk moves only (recorded as {policy})")
    return PlacementPlan(plan_id, now, policy, ctx.status, ctx.objective, ctx.bound, math.nan, problem.u_star,
                         problem.eps, ctx.wall_s, dict(problem.input_ages), classes, nodes,
                         list(problem.baseline_pods), notes)
