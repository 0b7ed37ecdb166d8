"""An independent checker of plan files: given the cluster as the API server lists it (v1 objects) and a
plan file (``kso.io/placement-plan/v1``), say every way the plan breaks a rule.

Independent on purpose: no kso or optimizer code is imported. Quantities are parsed with the kubernetes
client's ``parse_quantity``, rules are read from the pod and node specs here, and the overload risk is
recomputed with ``scipy.stats.beta``. What is checked:
  * exactly once: every pending pod is in exactly one class, no bound pod is; count = pods listed =
    slots + unplaced;
  * rules, for every pod of a class on every node the class has a slot on: not cordoned, Ready, taints
    (NoSchedule, NoExecute) tolerated, nodeSelector, required node affinity (ORed terms of ANDed
    matchExpressions In/NotIn/Exists/DoesNotExist/Gt/Lt and matchFields metadata.name);
  * capacity: bound pods' requests plus the planned pods' requests within allocatable, every resource;
  * the safe bound: each node's load before the plan (kube-safe-scheduler's annotations, else the bound
    pods' requests), plus the planned pods' usage means and variances, gives the risk
    P(Beta > U*) of the moment-matched Beta; it must match the plan's within 1e-4, and be <= eps on every
    node given pods; the plan's "given pods" maximum must be that maximum.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils import parse_quantity
from scipy.stats import beta as beta_dist

from kso.core.resources import MIB

RISK_TOLERANCE = 1e-4
# What a plan counts a pod that requests nothing at (kube-scheduler's default requests), per resource.
ZERO_REQUEST_PRIOR = {"cpu": 100.0, "memory": 200.0 * MIB}


@dataclass
class CheckReport:
    nodes: int = 0
    pods_pending: int = 0
    pods_planned: int = 0
    pods_unplaced: int = 0
    placements_checked: int = 0
    nodes_given_pods: int = 0
    max_risk_given: float = 0.0
    max_risk_difference: float = 0.0
    problems: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def fail(self, kind: str, text: str) -> None:
        self.problems[kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{kind}: {text}")

    @property
    def ok(self) -> bool:
        return not self.problems


def _requests(pod: dict[str, Any]) -> dict[str, float]:
    """Containers' requests summed (max with each init container), cpu in millicores, memory in bytes,
    plus one "pods"."""
    def one(c: dict[str, Any]) -> dict[str, float]:
        out = {}
        for r, q in ((c.get("resources") or {}).get("requests") or {}).items():
            v = float(parse_quantity(q))
            out[r] = v * 1000.0 if r == "cpu" else v
        return out

    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for r, v in one(c).items():
            total[r] = total.get(r, 0.0) + v
    for c in spec.get("initContainers") or []:
        for r, v in one(c).items():
            total[r] = max(total.get(r, 0.0), v)
    total["pods"] = 1.0
    return total


def _allocatable(node: dict[str, Any]) -> dict[str, float]:
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    return {r: float(parse_quantity(q)) * (1000.0 if r == "cpu" else 1.0) for r, q in alloc.items()}


def _ready(node: dict[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return all(c.get("status") == "True" for c in conds if c.get("type") == "Ready")


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _requirement(actual: str | None, op: str, values: list[str]) -> bool:
    if op == "In":
        return actual is not None and actual in values
    if op == "NotIn":
        return actual is None or actual not in values
    if op == "Exists":
        return actual is not None
    if op == "DoesNotExist":
        return actual is None
    if op in ("Gt", "Lt"):
        try:
            a, b = int(actual or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return a > b if op == "Gt" else a < b
    return False


def why_not(pod: dict[str, Any], node: dict[str, Any]) -> str | None:
    """Why kube-scheduler's filters reject ``pod`` on ``node`` (resources aside), or None."""
    spec, nspec = pod.get("spec") or {}, node.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    name = (node.get("metadata") or {}).get("name")
    tolerations = spec.get("tolerations") or []
    if not _ready(node):
        return "node not Ready"
    if nspec.get("unschedulable") and not _tolerated(
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}, tolerations):
        return "node cordoned"
    for taint in nspec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(taint, tolerations):
            return f"taint {taint.get('key')} not tolerated"
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return f"nodeSelector {k}={v}"
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if terms:
        def term_ok(term: dict[str, Any]) -> bool:
            exprs = [(labels.get(e["key"]), e["operator"], e.get("values") or []) for e in term.get("matchExpressions") or []]
            exprs += [(name if f["key"] == "metadata.name" else None, f["operator"], f.get("values") or [])
                      for f in term.get("matchFields") or []]
            return bool(exprs) and all(_requirement(a, op, vals) for a, op, vals in exprs)

        if not any(term_ok(t) for t in terms):
            return "required node affinity"
    return None


# The safe rule: with mu = mean / cap, sigma = std / cap (clipped to [0, 1]) and the Beta of that mean and
# variance, alpha = mu t, beta = (1 - mu) t, t = mu (1 - mu) / sigma^2 - 1, risk = P(X > U*) = beta.sf(U*).
# Degenerate cases as kube-safe-scheduler defines them: mu = 0 -> 0; sigma = 0 -> 1 if mu > U* else 0;
# sigma^2 >= mu (1 - mu) (no Beta with those moments) -> 1.
def beta_risk(mean: float, var: float, cap: float, u_star: float) -> float:
    if cap <= 0:
        return 1.0
    mu = min(max(mean / cap, 0.0), 1.0)
    sigma = min(max(math.sqrt(max(var, 0.0)) / cap, 0.0), 1.0)
    if mu == 0:
        return 0.0
    if sigma == 0:
        return 1.0 if mu > u_star else 0.0
    if sigma * sigma >= mu * (1 - mu):
        return 1.0
    t = mu * (1 - mu) / (sigma * sigma) - 1
    return float(beta_dist.sf(u_star, mu * t, (1 - mu) * t))


def _load_before(node: dict[str, Any], bound: list[dict[str, Any]], r: str) -> tuple[float, float]:
    """(mean, std) of the node's load before the plan: cap - mean-free annotation (memory in MiB), else
    the bound pods' requests with no spread."""
    ann = (node.get("metadata") or {}).get("annotations") or {}
    scale = MIB if r == "memory" else 1.0
    try:
        free = float(ann[f"mean-free-{r}"]) * scale
        std = float(ann.get(f"std-free-{r}", "0")) * scale
        return max(_allocatable(node).get(r, 0.0) - free, 0.0), std
    except (KeyError, ValueError):
        return sum(_requests(p).get(r, 0.0) for p in bound), 0.0


def check_plan(cluster: dict[str, Any], plan: dict[str, Any]) -> CheckReport:
    items = cluster.get("items") or []
    nodes = {o["metadata"]["name"]: o for o in items if o.get("kind") == "Node"}
    pods = [o for o in items if o.get("kind") == "Pod" and (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    key = {id(p): f"{p['metadata'].get('namespace') or 'default'}/{p['metadata']['name']}" for p in pods}
    by_key = {key[id(p)]: p for p in pods}
    pending = {key[id(p)] for p in pods if not (p.get("spec") or {}).get("nodeName")}
    bound_on: dict[str, list[dict[str, Any]]] = {n: [] for n in nodes}
    for p in pods:
        if (p.get("spec") or {}).get("nodeName") in bound_on:
            bound_on[p["spec"]["nodeName"]].append(p)
    report = CheckReport(nodes=len(nodes), pods_pending=len(pending))
    planned, added = _check_classes(plan, nodes, by_key, key, pending, report)
    _check_nodes(plan, nodes, bound_on, planned, added, report)
    return report


def _check_classes(plan: dict[str, Any], nodes: dict[str, Any], by_key: dict[str, Any], key: dict[int, str],
                   pending: set[str], report: CheckReport) -> tuple[dict[str, dict[str, float]], dict[str, list[float]]]:
    """Exactly-once, class homogeneity, usage models and rules; (requests, usage moments) added per node."""
    seen: Counter[str] = Counter()
    planned: dict[str, dict[str, float]] = {n: {} for n in nodes}
    added: dict[str, list[float]] = {n: [0.0, 0.0, 0.0, 0.0] for n in nodes}  # cpu mean, cpu var, mem mean, mem var
    for ckey, c in plan["classes"].items():
        members = c.get("pods")
        if members is None or len(members) != c["count"]:
            report.fail("class-pods", f"{ckey}: lists {None if members is None else len(members)} pods, count {c['count']}")
            continue
        if sum(c["slots"].values()) + c["unplaced"] != c["count"]:
            report.fail("counts", f"{ckey}: slots + unplaced != count")
        seen.update(members)
        report.pods_planned += sum(c["slots"].values())
        report.pods_unplaced += c["unplaced"]
        specs = [by_key.get(m) for m in members]
        if any(s is None for s in specs):
            report.fail("unknown-pod", f"{ckey}: names pods the cluster does not have")
            continue
        reqs = _requests(specs[0])
        if any(_requests(s) != reqs for s in specs[1:]):
            report.fail("class-requests", f"{ckey}: pods with different requests")
        usage = c.get("usage") or {}
        for r in ("cpu", "memory"):
            if usage.get("source") in ("request", "request+prior"):
                want = reqs.get(r, 0.0) or ZERO_REQUEST_PRIOR[r]
                if abs(usage["mean"][r] - want) > 1e-6 * max(want, 1.0):
                    report.fail("usage", f"{ckey}: {r} usage {usage['mean'][r]} is neither its request nor the prior")
        for node_name, k in c["slots"].items():
            node = nodes.get(node_name)
            if node is None:
                report.fail("unknown-node", f"{ckey}: slot on {node_name}")
                continue
            for s in specs:
                report.placements_checked += 1
                why = why_not(s, node)
                if why:
                    report.fail("rule", f"{key[id(s)]} on {node_name}: {why}")
                    break
            for r, v in reqs.items():
                planned[node_name][r] = planned[node_name].get(r, 0.0) + k * v
            for i, r in enumerate(("cpu", "memory")):
                added[node_name][2 * i] += k * usage["mean"][r]
                added[node_name][2 * i + 1] += k * usage["std"][r] ** 2
    for m, n in seen.items():
        if n > 1:
            report.fail("exactly-once", f"{m} is in {n} classes")
        if m not in pending:
            report.fail("exactly-once", f"{m} is not a pending pod")
    for m in pending - set(seen):
        report.fail("exactly-once", f"pending pod {m} is in no class")
    return planned, added


def _check_nodes(plan: dict[str, Any], nodes: dict[str, Any], bound_on: dict[str, list[dict[str, Any]]],
                 planned: dict[str, dict[str, float]], added: dict[str, list[float]], report: CheckReport) -> None:
    """Capacity, the load before the plan, the recomputed Beta risk and the plan's stated maximum."""
    u_star, eps = float(plan["uStar"]), float(plan["eps"])
    given = {n for n, req in planned.items() if req}
    report.nodes_given_pods = len(given)
    for name, node in nodes.items():
        info = plan["nodes"].get(name)
        alloc = _allocatable(node)
        for r, v in planned[name].items():
            held = sum(_requests(p).get(r, 0.0) for p in bound_on[name])
            if held + v > alloc.get(r, 0.0) + 1e-6:
                report.fail("capacity", f"{name}: {r} {held + v:g} > allocatable {alloc.get(r, 0.0):g}")
        if info is None:
            if name in given:
                report.fail("unknown-node", f"{name} given pods but not in the plan's nodes")
            continue
        for i, r in enumerate(("cpu", "memory")):
            mean0, std0 = _load_before(node, bound_on[name], r)
            before = (info.get("before") or {}).get("mean", {}).get(r)
            if before is not None and abs(before - mean0) > 1e-6 * max(alloc.get(r, 1.0), 1.0):
                report.fail("load-before", f"{name}: {r} mean before {before:g}, expected {mean0:g}")
            risk = beta_risk(mean0 + added[name][2 * i], std0 ** 2 + added[name][2 * i + 1], alloc.get(r, 0.0), u_star)
            diff = abs(risk - info["risk"][r])
            report.max_risk_difference = max(report.max_risk_difference, diff)
            if diff > RISK_TOLERANCE:
                report.fail("risk-mismatch", f"{name}: {r} risk {info['risk'][r]:.6f}, recomputed {risk:.6f}")
            if name in given:
                report.max_risk_given = max(report.max_risk_given, risk)
                if risk > eps + RISK_TOLERANCE:
                    report.fail("safe-bound", f"{name}: {r} risk {risk:.4f} > eps {eps}")
    stated = (plan.get("maxRisk") or {}).get("givenPods")
    if stated is not None and abs(stated - report.max_risk_given) > RISK_TOLERANCE:
        report.fail("max-risk", f"plan says {stated:.6f} on nodes given pods, recomputed {report.max_risk_given:.6f}")
