"""PlacementPlan: the optimizer's answer, as the extender reads it, and as a person (or an independent
checker) can verify it without the cluster in front of them.

For each class, target nodes with counts (slots), its pods (namespace/name), placement rules and usage
model; for each node, its mean load, spread, risk and safe headroom before and after the plan; the
policy, objective, lower bound (CP-SAT's, or for decomposed plans the LP relaxation's) and gap, the
largest risk on nodes given pods and on nodes already over their bound, the inputs' ages, an id and the
creation time. Written
atomically (temp file + rename; optionally a ConfigMap), so a restarted extender answers at once, and
validated whole on load: a corrupt or partial plan is rejected, never half-loaded.

Every risk the file reports can be recomputed from the file and the cluster's objects alone (units: cpu
millicores, memory bytes; r = cpu, memory):
    classes.<key>.usage      {"mean": {r}, "std": {r}, "source"}: one pod's usage; source "history" (its
                             running siblings' measured usage), "request" (its requests), "request+prior"
                             (riskModel.bestEffortPrior[r] where it requests nothing of r)
    nodes.<n>.capacity       {r}: the allocatable the risk is judged against
    nodes.<n>.loadSource     {r}: where before.mean/std come from (optimizer.plan.problem.LOAD_SOURCES):
                             "annotations" (allocatable - mean-free-*, std-free-*; memory annotations in MiB)
                             and "requests" (the bound pods' requests, std 0) follow from the objects;
                             "forecast" and "given" are stated here and taken as stated
    nodes.<n>.before         {"mean", "std", "risk", "headroom"} per r, before the plan
    nodes.<n>.after          {"mean", "std"} per r:  after.mean = before.mean + sum_c slots_c,n usage_c.mean,
                             after.std^2 = before.std^2 + sum_c slots_c,n usage_c.std^2 (pods independent)
    nodes.<n>.risk           {r}: riskModel.rule on after;  before.risk the same on before
    maxRisk                  largest risk over the nodes given pods, and over the nodes already over eps
                             that the plan gives nothing (listed)
    riskModel                the rule, uStar / eps and the best-effort prior, as written by RISK_MODEL
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

import numpy as np
import orjson

from kso.core.objects import PodInfo
from kso.core.resources import CPU, MEMORY
from optimizer.plan.compiled import POLICIES, Compiled, SolveResult, evaluate
from optimizer.plan.problem import BEST_EFFORT_PRIOR, LOAD_RESOURCES, LOAD_SOURCES, PlacementProblem

# (risk, headroom, mean, var), each (load resource, node), as optimizer.plan.compiled.evaluate returns them
Evaluation = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]

PLAN_FORMAT = "kso.io/placement-plan/v1"
# The risk every node reports, stated in the file so that a reader needs no kso code to recompute it.
RISK_MODEL = {
    "rule": "risk = P(X > uStar), X ~ Beta moment-matched to mean = after.mean / capacity and std = after.std / "
            "capacity (both clipped to [0, 1]); mean 0 -> 0; std 0 -> 1 if mean > uStar else 0; std^2 >= "
            "mean (1 - mean) -> 1",
    "after": "after.mean = before.mean + sum over classes of slots x usage.mean; after.std^2 = before.std^2 + "
             "sum over classes of slots x usage.std^2",
    "units": {CPU: "millicores", MEMORY: "bytes"},
    "bestEffortPrior": dict(BEST_EFFORT_PRIOR),
    "loadSources": list(LOAD_SOURCES),
}


class PlanError(ValueError):
    """A plan that cannot be used; the message says what is wrong with it."""


@dataclass(slots=True)
class PlanClass:
    requests: dict[str, float]
    count: int
    unplaced: int
    slots: dict[str, int]  # node -> pods of this class planned there
    # What a reader needs to check the class: "pods" (namespace/name), "rules" (nodeSelector,
    # requiredTerms, tolerations), "usage" (mean, std per resource, source). Optional on load.
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class PlanNodeInfo:
    headroom: dict[str, float]  # mean load (canonical units) the node can still take under its safe bound
    risk: dict[str, float]  # P(util > U*) after the plan, exact (Beta) rule
    used: bool
    # "mean", "std", "risk", "headroom" per resource before the plan and "mean", "std" after (canonical
    # units); optional on load.
    before: dict[str, dict[str, float]] = field(default_factory=dict)
    after: dict[str, dict[str, float]] = field(default_factory=dict)
    capacity: dict[str, float] = field(default_factory=dict)  # allocatable the risk is judged against
    load_source: dict[str, str] = field(default_factory=dict)  # per resource, one of LOAD_SOURCES


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

    def risk_split(self) -> dict[str, Any]:
        """The largest risk on nodes the plan gives pods (must be <= eps), apart from the nodes already over
        their bound before the plan that it gives nothing (the cluster's state, not the plan's doing)."""
        given = {n for c in self.classes.values() for n, k in c.slots.items() if k > 0}
        over = sorted(n for n, info in self.nodes.items() if n not in given
                      and max(info.risk.values(), default=0.0) > self.eps + 1e-9)
        return {"givenPods": max((max(self.nodes[n].risk.values(), default=0.0) for n in given), default=0.0),
                "alreadyOver": max((max(self.nodes[n].risk.values(), default=0.0) for n in over), default=0.0),
                "nodesAlreadyOver": over}

    def summary(self) -> dict[str, Any]:
        planned = sum(sum(c.slots.values()) for c in self.classes.values())
        split = self.risk_split()
        return {"plan_id": self.plan_id, "policy": self.policy, "status": self.status, "classes": len(self.classes),
                "pods_planned": planned, "pods_unplaced": sum(c.unplaced for c in self.classes.values()),
                "nodes_used": sum(n.used for n in self.nodes.values()), "nodes": len(self.nodes),
                "bound": self.bound, "gap": self.gap, "solve_s": round(self.solve_s, 2),
                "max_risk_given_pods": split["givenPods"], "max_risk_already_over": split["alreadyOver"],
                "nodes_already_over": len(split["nodesAlreadyOver"])}

    # ---- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return v if math.isfinite(v) else None

        return {
            "format": PLAN_FORMAT, "planId": self.plan_id, "createdAt": self.created_at, "policy": self.policy,
            "status": self.status, "objective": num(self.objective), "bound": num(self.bound), "gap": num(self.gap),
            "uStar": self.u_star, "eps": self.eps, "solveSeconds": self.solve_s,
            "inputAges": {k: num(v) for k, v in self.input_ages.items()},
            "maxRisk": self.risk_split(),
            "classes": {k: {"requests": c.requests, "count": c.count, "unplaced": c.unplaced, "slots": c.slots,
                            **c.detail} for k, c in self.classes.items()},
            "nodes": {k: {"headroom": n.headroom, "risk": n.risk, "used": n.used,
                          **({"before": n.before, "after": n.after} if n.before else {}),
                          **({"capacity": n.capacity, "loadSource": n.load_source} if n.capacity else {})}
                      for k, n in self.nodes.items()},
            "riskModel": RISK_MODEL, "baselinePods": self.baseline_pods, "notes": self.notes,
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
        r = _PlanReader(where)
        policy = r.need(doc, "policy", str, "")
        if policy not in POLICIES:
            raise PlanError(f"{where}: unknown policy {policy!r}")
        nodes = {name: r.node(name, n) for name, n in r.need(doc, "nodes", dict, "").items()}
        classes = {key: r.plan_class(key, c, nodes) for key, c in r.need(doc, "classes", dict, "").items()}
        created = r.number(r.need(doc, "createdAt", (int, float), ""), "createdAt")
        baseline = r.need(doc, "baselinePods", list, "")
        if not all(isinstance(u, str) for u in baseline):
            raise PlanError(f"{where}: baselinePods must be strings")
        ages = r.need(doc, "inputAges", dict, "")
        return cls(
            plan_id=r.need(doc, "planId", str, ""), created_at=created, policy=policy, status=r.need(doc, "status", str, ""),
            objective=r.number(doc.get("objective"), "objective", True), bound=r.number(doc.get("bound"), "bound", True),
            gap=r.number(doc.get("gap"), "gap", True), u_star=r.number(r.need(doc, "uStar", (int, float), ""), "uStar"),
            eps=r.number(r.need(doc, "eps", (int, float), ""), "eps"),
            solve_s=r.number(r.need(doc, "solveSeconds", (int, float), ""), "solveSeconds"),
            input_ages={k: r.number(v, f"inputAges.{k}", True) for k, v in ages.items()},
            classes=classes, nodes=nodes, baseline_pods=baseline,
            notes=[str(n) for n in doc.get("notes", []) if isinstance(n, str)],
        )


class _PlanReader:
    """Checked reads of a plan document's parts; each error names ``where`` and the field."""

    def __init__(self, where: str) -> None:
        self.where = where

    def need(self, d: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
        if key not in d:
            raise PlanError(f"{self.where}: {what}{key} is missing")
        v = d[key]
        if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
            raise PlanError(f"{self.where}: {what}{key} has the wrong type ({type(v).__name__})")
        return v

    def number(self, v: Any, what: str, allow_none: bool = False) -> float:
        if v is None and allow_none:
            return math.nan
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise PlanError(f"{self.where}: {what} must be a finite number, got {v!r}")
        return float(v)

    def count(self, v: Any, what: str) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise PlanError(f"{self.where}: {what} must be a non-negative integer, got {v!r}")
        return v

    def node(self, name: str, n: Any) -> PlanNodeInfo:
        if not isinstance(n, dict):
            raise PlanError(f"{self.where}: nodes.{name} must be an object")
        moments = {}
        for when in ("before", "after"):
            part = n.get(when, {})
            if not isinstance(part, dict) or not all(isinstance(v, dict) for v in part.values()):
                raise PlanError(f"{self.where}: nodes.{name}.{when} must be an object of objects")
            moments[when] = {k: {r: self.number(v, f"nodes.{name}.{when}.{k}.{r}") for r, v in d.items()}
                             for k, d in part.items()}
        capacity = n.get("capacity", {})
        sources = n.get("loadSource", {})
        if not isinstance(capacity, dict) or not isinstance(sources, dict):
            raise PlanError(f"{self.where}: nodes.{name}.capacity and loadSource must be objects")
        for r, v in sources.items():
            if v not in LOAD_SOURCES:
                raise PlanError(f"{self.where}: nodes.{name}.loadSource.{r} must be one of {', '.join(LOAD_SOURCES)}, "
                                f"got {v!r}")
        return PlanNodeInfo({r: self.number(v, f"nodes.{name}.headroom.{r}") for r, v in
                             self.need(n, "headroom", dict, f"nodes.{name}.").items()},
                            {r: self.number(v, f"nodes.{name}.risk.{r}") for r, v in
                             self.need(n, "risk", dict, f"nodes.{name}.").items()},
                            bool(self.need(n, "used", bool, f"nodes.{name}.")), moments["before"], moments["after"],
                            {r: self.number(v, f"nodes.{name}.capacity.{r}") for r, v in capacity.items()},
                            dict(sources))

    def plan_class(self, key: str, c: Any, nodes: dict[str, PlanNodeInfo]) -> PlanClass:
        if not isinstance(c, dict):
            raise PlanError(f"{self.where}: classes.{key} must be an object")
        slots = {}
        for node, k in self.need(c, "slots", dict, f"classes.{key}.").items():
            if node not in nodes:
                raise PlanError(f"{self.where}: classes.{key}.slots names node {node!r} that the plan does not list")
            slots[node] = self.count(k, f"classes.{key}.slots.{node}")
        requests = {r: self.number(v, f"classes.{key}.requests.{r}") for r, v in self.need(c, "requests", dict,
                                                                                            f"classes.{key}.").items()}
        detail = {k: c[k] for k in ("pods", "rules", "usage") if k in c}
        out = PlanClass(requests, self.count(self.need(c, "count", int, f"classes.{key}."), f"classes.{key}.count"),
                        self.count(self.need(c, "unplaced", int, f"classes.{key}."), f"classes.{key}.unplaced"), slots,
                        detail)
        if sum(slots.values()) + out.unplaced != out.count:
            raise PlanError(f"{self.where}: classes.{key}: slots + unplaced != count")
        pods = detail.get("pods")
        if pods is not None and (not isinstance(pods, list) or not all(isinstance(p, str) for p in pods)
                                 or len(pods) != out.count):
            raise PlanError(f"{self.where}: classes.{key}.pods must list count pod names")
        return out


def class_rules(pod: PodInfo | None) -> dict[str, Any]:
    """A class's placement rules as the pod spec says them (matchFields keys are prefixed "field:")."""
    if pod is None:
        return {}
    return {"nodeSelector": dict(pod.node_selector),
            "requiredTerms": [[{"key": k, "operator": op, "values": list(vals)} for k, op, vals in term]
                              for term in pod.required_terms],
            "tolerations": [{"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
                            for t in pod.tolerations]}


def plan_from_result(problem: PlacementProblem, comp: Compiled, result: SolveResult, policy: str,
                     now: float | None = None) -> PlacementPlan:
    now = time.time() if now is None else now
    classes = {}
    for ci, wc in enumerate(problem.classes):
        slots = {comp.node_names[ni]: int(result.x[ci, ni]) for ni in range(comp.n_nodes) if result.x[ci, ni] > 0}
        usage = {"mean": dict(wc.usage.mean), "std": dict(wc.usage.std), "source": wc.usage.source}
        detail = {"pods": list(wc.pods), "rules": class_rules(wc.example), "usage": usage} if len(wc.pods) == wc.count else {
            "rules": class_rules(wc.example), "usage": usage}
        classes[wc.key] = PlanClass(dict(wc.requests), int(wc.count), int(result.unplaced[ci]), slots, detail)
    before = evaluate(comp, np.zeros_like(result.x), problem.u_star)
    _, _, mean1, var1 = evaluate(comp, result.x, problem.u_star)
    used = (result.x.sum(axis=0) > 0) | comp.has_pods
    # compile_problem counts the bound pods' requests where a node has no finite load
    sources = [{r: load[r].source if r in load and math.isfinite(load[r].mean) else "requests" for r in LOAD_RESOURCES}
               for load in (n.load for n in problem.nodes)]
    nodes = plan_nodes(comp, before, (result.risk, result.headroom, mean1, var1), used, sources)
    body = orjson.dumps({k: c.slots for k, c in classes.items()}, option=orjson.OPT_SORT_KEYS)
    plan_id = hashlib.sha1(body + str(now).encode()).hexdigest()[:12]
    return PlacementPlan(plan_id, now, policy, result.status, result.objective, result.bound, result.gap,
                         problem.u_star, problem.eps, result.wall_s, dict(problem.input_ages), classes, nodes,
                         list(problem.baseline_pods), list(result.notes))


def plan_nodes(comp: Compiled, before: Evaluation, after: Evaluation, used: np.ndarray,
               sources: list[dict[str, str]]) -> dict[str, PlanNodeInfo]:
    """Each node's part of the plan file from the (risk, headroom, mean, var) of its load before and after
    the plan (as optimizer.plan.compiled.evaluate gives them), whether it is in use, and per node and load
    resource where the load before comes from (one of LOAD_SOURCES)."""
    risk0, headroom0, mean0, var0 = before
    risk1, headroom1, mean1, var1 = after
    std0, std1 = np.sqrt(np.maximum(var0, 0.0)), np.sqrt(np.maximum(var1, 0.0))
    nodes = {}
    for ni, name in enumerate(comp.node_names):
        def at(a: np.ndarray, ni: int = ni) -> dict[str, float]:
            return {r: float(a[i, ni]) for i, r in enumerate(LOAD_RESOURCES)}

        nodes[name] = PlanNodeInfo(at(headroom1), at(risk1), bool(used[ni]),
                                   {"mean": at(mean0), "std": at(std0), "risk": at(risk0), "headroom": at(headroom0)},
                                   {"mean": at(mean1), "std": at(std1)}, at(comp.cap), dict(sources[ni]))
    return nodes


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
