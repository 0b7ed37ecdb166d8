"""PlacementPlan: the optimizer's answer, as the extender reads it.

For each class, target nodes with counts (slots); for each node, the safe headroom left and its risk;
the policy, objective, solver bound and gap, the inputs' ages, an id and the creation time. Written
atomically (temp file + rename; optionally a ConfigMap), so a restarted extender answers at once, and
validated whole on load: a corrupt or partial plan is rejected, never half-loaded.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kso.resources import CPU, MEMORY
from optimizer.compiled import POLICIES, Compiled, SolveResult
from optimizer.problem import PlacementProblem

PLAN_FORMAT = "kso.io/placement-plan/v1"


class PlanError(ValueError):
    """A plan that cannot be used; the message says what is wrong with it."""


@dataclass(slots=True)
class PlanClass:
    requests: dict[str, float]
    count: int
    unplaced: int
    slots: dict[str, int]  # node -> pods of this class planned there


@dataclass(slots=True)
class PlanNodeInfo:
    headroom: dict[str, float]  # mean load (canonical units) the node can still take under its safe bound
    risk: dict[str, float]  # P(util > U*) after the plan, exact (Beta) rule
    used: bool


@dataclass
class PlacementPlan:
    plan_id: str
    created_at: float
    policy: str
    status: str
    objective: float
    bound: float
    gap: float
    u_star: float
    eps: float
    solve_s: float
    input_ages: dict[str, float]
    classes: dict[str, PlanClass]
    nodes: dict[str, PlanNodeInfo]
    baseline_pods: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def age_s(self, now: float | None = None) -> float:
        return max((time.time() if now is None else now) - self.created_at, 0.0)

    def summary(self) -> dict[str, Any]:
        planned = sum(sum(c.slots.values()) for c in self.classes.values())
        return {"plan_id": self.plan_id, "policy": self.policy, "status": self.status, "classes": len(self.classes),
                "pods_planned": planned, "pods_unplaced": sum(c.unplaced for c in self.classes.values()),
                "nodes_used": sum(n.used for n in self.nodes.values()), "nodes": len(self.nodes),
                "gap": self.gap, "solve_s": round(self.solve_s, 2), "max_risk": max(
                    (max(n.risk.values(), default=0.0) for n in self.nodes.values()), default=0.0)}

    # ---- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return v if math.isfinite(v) else None

        return {
            "format": PLAN_FORMAT, "planId": self.plan_id, "createdAt": self.created_at, "policy": self.policy,
            "status": self.status, "objective": num(self.objective), "bound": num(self.bound), "gap": num(self.gap),
            "uStar": self.u_star, "eps": self.eps, "solveSeconds": self.solve_s,
            "inputAges": {k: num(v) for k, v in self.input_ages.items()},
            "classes": {k: {"requests": c.requests, "count": c.count, "unplaced": c.unplaced, "slots": c.slots}
                        for k, c in self.classes.items()},
            "nodes": {k: {"headroom": n.headroom, "risk": n.risk, "used": n.used} for k, n in self.nodes.items()},
            "baselinePods": self.baseline_pods, "notes": self.notes,
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes | str, where: str = "plan") -> PlacementPlan:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise PlanError(f"{where}: not valid JSON ({exc})") from None
        return cls.from_dict(doc, where)

    @classmethod
    def from_dict(cls, doc: Any, where: str = "plan") -> PlacementPlan:
        if not isinstance(doc, dict):
            raise PlanError(f"{where}: must be a JSON object")
        if doc.get("format") != PLAN_FORMAT:
            raise PlanError(f"{where}: format must be {PLAN_FORMAT!r}, got {doc.get('format')!r}")

        def need(d: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
            if key not in d:
                raise PlanError(f"{where}: {what}{key} is missing")
            v = d[key]
            if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
                raise PlanError(f"{where}: {what}{key} has the wrong type ({type(v).__name__})")
            return v

        def number(v: Any, what: str, allow_none: bool = False) -> float:
            if v is None and allow_none:
                return math.nan
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise PlanError(f"{where}: {what} must be a finite number, got {v!r}")
            return float(v)

        def count(v: Any, what: str) -> int:
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise PlanError(f"{where}: {what} must be a non-negative integer, got {v!r}")
            return v

        policy = need(doc, "policy", str, "")
        if policy not in POLICIES:
            raise PlanError(f"{where}: unknown policy {policy!r}")
        nodes: dict[str, PlanNodeInfo] = {}
        for name, n in need(doc, "nodes", dict, "").items():
            if not isinstance(n, dict):
                raise PlanError(f"{where}: nodes.{name} must be an object")
            nodes[name] = PlanNodeInfo({r: number(v, f"nodes.{name}.headroom.{r}") for r, v in
                                        need(n, "headroom", dict, f"nodes.{name}.").items()},
                                       {r: number(v, f"nodes.{name}.risk.{r}") for r, v in
                                        need(n, "risk", dict, f"nodes.{name}.").items()},
                                       bool(need(n, "used", bool, f"nodes.{name}.")))
        classes: dict[str, PlanClass] = {}
        for key, c in need(doc, "classes", dict, "").items():
            if not isinstance(c, dict):
                raise PlanError(f"{where}: classes.{key} must be an object")
            slots = {}
            for node, k in need(c, "slots", dict, f"classes.{key}.").items():
                if node not in nodes:
                    raise PlanError(f"{where}: classes.{key}.slots names node {node!r} that the plan does not list")
                slots[node] = count(k, f"classes.{key}.slots.{node}")
            requests = {r: number(v, f"classes.{key}.requests.{r}") for r, v in need(c, "requests", dict,
                                                                                      f"classes.{key}.").items()}
            classes[key] = PlanClass(requests, count(need(c, "count", int, f"classes.{key}."), f"classes.{key}.count"),
                                     count(need(c, "unplaced", int, f"classes.{key}."), f"classes.{key}.unplaced"), slots)
            if sum(slots.values()) + classes[key].unplaced != classes[key].count:
                raise PlanError(f"{where}: classes.{key}: slots + unplaced != count")
        created = number(need(doc, "createdAt", (int, float), ""), "createdAt")
        baseline = need(doc, "baselinePods", list, "")
        if not all(isinstance(u, str) for u in baseline):
            raise PlanError(f"{where}: baselinePods must be strings")
        ages = need(doc, "inputAges", dict, "")
        return cls(
            plan_id=need(doc, "planId", str, ""), created_at=created, policy=policy, status=need(doc, "status", str, ""),
            objective=number(doc.get("objective"), "objective", True), bound=number(doc.get("bound"), "bound", True),
            gap=number(doc.get("gap"), "gap", True), u_star=number(need(doc, "uStar", (int, float), ""), "uStar"),
            eps=number(need(doc, "eps", (int, float), ""), "eps"),
            solve_s=number(need(doc, "solveSeconds", (int, float), ""), "solveSeconds"),
            input_ages={k: number(v, f"inputAges.{k}", True) for k, v in ages.items()},
            classes=classes, nodes=nodes, baseline_pods=baseline,
            notes=[str(n) for n in doc.get("notes", []) if isinstance(n, str)],
        )


def plan_from_result(problem: PlacementProblem, comp: Compiled, result: SolveResult, policy: str,
                     now: float | None = None) -> PlacementPlan:
    now = time.time() if now is None else now
    classes = {}
    for ci, wc in enumerate(problem.classes):
        slots = {comp.node_names[ni]: int(result.x[ci, ni]) for ni in range(comp.n_nodes) if result.x[ci, ni] > 0}
        classes[wc.key] = PlanClass(dict(wc.requests), int(wc.count), int(result.unplaced[ci]), slots)
    nodes = {}
    used = result.x.sum(axis=0) > 0
    for ni, name in enumerate(comp.node_names):
        nodes[name] = PlanNodeInfo({CPU: float(result.headroom[0, ni]), MEMORY: float(result.headroom[1, ni])},
                                   {CPU: float(result.risk[0, ni]), MEMORY: float(result.risk[1, ni])},
                                   bool(used[ni] or comp.has_pods[ni]))
    body = orjson.dumps({k: c.slots for k, c in classes.items()}, option=orjson.OPT_SORT_KEYS)
    plan_id = hashlib.sha1(body + str(now).encode()).hexdigest()[:12]
    return PlacementPlan(plan_id, now, policy, result.status, result.objective, result.bound, result.gap,
                         problem.u_star, problem.eps, result.wall_s, dict(problem.input_ages), classes, nodes,
                         list(problem.baseline_pods), list(result.notes))


def write_plan(plan: PlacementPlan, path: str | Path) -> None:
    """Write atomically: a temp file in the same folder, fsync, then rename over the old plan."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".plan-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(plan.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_plan(path: str | Path, max_age_s: float | None = None, now: float | None = None) -> PlacementPlan:
    """Read and validate a plan file; PlanError says why it cannot be used (missing, corrupt, stale)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PlanError(f"{path}: no plan file") from None
    except OSError as exc:
        raise PlanError(f"{path}: cannot read ({exc.strerror})") from None
    plan = PlacementPlan.from_json(raw, str(path))
    if max_age_s is not None and plan.age_s(now) > max_age_s:
        raise PlanError(f"{path}: plan {plan.plan_id} is {plan.age_s(now):.0f} s old, over the {max_age_s:.0f} s limit")
    return plan
