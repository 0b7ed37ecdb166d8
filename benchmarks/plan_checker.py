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
  * the safe bound, every risk the plan reports recomputed from the plan file and the objects alone (the
    file's riskModel, see optimizer/plan/placement_plan.py): each node's load before the plan from what its
    loadSource says: kube-safe-scheduler's annotations or the bound pods' requests (read from the objects
    here and compared with the plan's), or a forecast the objects do not hold (taken as the plan states
    it, and counted); capacity = allocatable; the planned pods' usage means and variances from each
    class's usage model (a model "from requests" must be its requests, or where it requests nothing the
    plan's best-effort prior, which must be kube-scheduler's default requests); the after mean and std,
    the risk before and after P(Beta > U*) of the moment-matched Beta must match the plan's within 1e-4
    (the after risk <= eps on every node given pods), and so must the plan's maxRisk (given pods, and
    the nodes already over eps that it gives nothing).
A ``kso reoptimize`` plan is checked against the cluster while it is followed: the pods its classes list
evicted and their replacements pending (its loads "before" are those of that cluster).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils import parse_quantity
from scipy.stats import beta as beta_dist

from kso.core.resources import MIB

RISK_TOLERANCE = 1e-4
MOMENT_TOLERANCE = 1e-6  # of capacity, for the load means and spreads the plan states
# What a plan counts a pod that requests nothing at (kube-scheduler's default requests), per resource.
ZERO_REQUEST_PRIOR = {"cpu": 100.0, "memory": 200.0 * MIB}
# Node loads the objects hold (the rest are the plan's word: a forecast, or a load its caller gave).
OBJECT_LOAD_SOURCES = ("annotations", "requests")


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
    risks_recomputed: int = 0
    loads_stated: int = 0  # node-resources whose load before the plan is a forecast (taken as the plan states it)
    problems: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def fail(self, kind: str, text: str) -> None:
        self.problems[kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{kind}: {text}")

    @property
    def ok(self) -> bool:
        return not self.problems


def _quantities(items: dict[str, Any] | None) -> dict[str, float]:
    return {r: float(parse_quantity(q)) * (1000.0 if r == "cpu" else 1.0) for r, q in (items or {}).items()}


def _requests(pod: dict[str, Any]) -> dict[str, float]:
    """The pod's requests as kube-scheduler counts them (PodRequests): containers summed, with restartable
    (sidecar) init containers, at least each other init container plus the sidecars started before it, plus
    the pod overhead; a limit without a request stands for it (API defaulting). cpu in millicores, memory in
    bytes, plus one "pods"."""
    def one(c: dict[str, Any]) -> dict[str, float]:
        res = c.get("resources") or {}
        return {**_quantities(res.get("limits")), **_quantities(res.get("requests"))}

    def add(into: dict[str, float], more: dict[str, float]) -> None:
        for r, v in more.items():
            into[r] = into.get(r, 0.0) + v

    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        add(total, one(c))
    sidecars: dict[str, float] = {}
    init_max: dict[str, float] = {}
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            add(total, one(c))
            add(sidecars, one(c))
            at_start = dict(sidecars)
        else:
            at_start = one(c)
            add(at_start, sidecars)
        for r, v in at_start.items():
            init_max[r] = max(init_max.get(r, 0.0), v)
    for r, v in init_max.items():
        total[r] = max(total.get(r, 0.0), v)
    add(total, _quantities(spec.get("overhead")))
    total["pods"] = 1.0
    return total


def _allocatable(node: dict[str, Any]) -> dict[str, float]:
    status = node.get("status") or {}
    return _quantities(status.get("allocatable") or status.get("capacity") or {})


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


def _load_before(node: dict[str, Any], held: dict[str, float], r: str) -> tuple[float, float, str]:
    """(mean, std, source) of the node's load before the plan as the objects give it: allocatable - the
    mean-free annotation (memory in MiB), std the std-free one ("annotations"), else the bound pods'
    requests with no spread ("requests")."""
    ann = (node.get("metadata") or {}).get("annotations") or {}
    scale = MIB if r == "memory" else 1.0
    try:
        free = float(ann[f"mean-free-{r}"]) * scale
    except (KeyError, ValueError):
        free = math.nan
    if not math.isfinite(free):
        return held.get(r, 0.0), 0.0, "requests"
    try:
        std = float(ann.get(f"std-free-{r}", "0")) * scale
    except ValueError:
        std = 0.0
    return max(_allocatable(node).get(r, 0.0) - free, 0.0), std if math.isfinite(std) else 0.0, "annotations"


def _rules_of(pod: dict[str, Any]) -> str:
    """What of a pod's spec why_not reads (nodeSelector, affinity, tolerations), as text."""
    spec = pod.get("spec") or {}
    return json.dumps([spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")], sort_keys=True)


def check_plan(cluster: dict[str, Any], plan: dict[str, Any]) -> CheckReport:
    items = cluster.get("items") or []
    nodes = {o["metadata"]["name"]: o for o in items if o.get("kind") == "Node"}
    pods = [o for o in items if o.get("kind") == "Pod" and (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    key = {id(p): f"{p['metadata'].get('namespace') or 'default'}/{p['metadata']['name']}" for p in pods}
    by_key = {key[id(p)]: p for p in pods}
    pending = {key[id(p)] for p in pods if not (p.get("spec") or {}).get("nodeName")}
    held: dict[str, dict[str, float]] = {n: {} for n in nodes}  # bound pods' requests summed per node
    for p in pods:
        on = held.get((p.get("spec") or {}).get("nodeName"))
        if on is not None:
            for r, v in _requests(p).items():
                on[r] = on.get(r, 0.0) + v
    report = CheckReport(nodes=len(nodes), pods_pending=len(pending))
    planned, added = _check_classes(plan, nodes, by_key, key, pending, report)
    _check_nodes(plan, nodes, held, planned, added, report)
    return report


def _check_classes(plan: dict[str, Any], nodes: dict[str, Any], by_key: dict[str, Any], key: dict[int, str],
                   pending: set[str], report: CheckReport) -> tuple[dict[str, dict[str, float]], dict[str, list[float]]]:
    """Exactly-once, class homogeneity, usage models and rules; (requests, usage moments) added per node."""
    seen: Counter[str] = Counter()
    prior = (plan.get("riskModel") or {}).get("bestEffortPrior") or {}
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
        distinct = list({_rules_of(sp): sp for sp in specs if sp is not None}.values())
        reqs = _requests(specs[0])
        if any(_requests(s) != reqs for s in specs[1:]):
            report.fail("class-requests", f"{ckey}: pods with different requests")
        usage = c.get("usage") or {}
        if not all(isinstance((usage.get(k) or {}).get(r), (int, float)) for k in ("mean", "std") for r in ("cpu", "memory")):
            report.fail("usage", f"{ckey}: no usage model (mean and std of cpu and memory): its risk cannot be recomputed")
            continue
        for r in ("cpu", "memory"):
            if usage.get("source") in ("request", "request+prior"):
                want = reqs.get(r, 0.0) or prior.get(r, math.nan)
                if not abs(usage["mean"][r] - want) <= 1e-6 * max(want, 1.0) or usage["std"][r] != 0:
                    report.fail("usage", f"{ckey}: {r} usage {usage['mean'][r]} +- {usage['std'][r]} is neither its "
                                "request nor the best-effort prior (no spread)")
        for node_name, k in c["slots"].items():
            node = nodes.get(node_name)
            if node is None:
                report.fail("unknown-node", f"{ckey}: slot on {node_name}")
                continue
            report.placements_checked += len(specs)
            for s in distinct:  # every pod's rules, each distinct set of them once per node
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


def _check_risk_model(plan: dict[str, Any], report: CheckReport) -> bool:
    """The plan states the model its risks follow: the rule's inputs and kube-scheduler's default requests
    as the best-effort prior. False when it does not (nothing can be recomputed)."""
    model = plan.get("riskModel")
    if not isinstance(model, dict):
        report.fail("risk-model", "the plan states no riskModel: its risks cannot be recomputed from the file")
        return False
    prior = model.get("bestEffortPrior") or {}
    for r, want in ZERO_REQUEST_PRIOR.items():
        if prior.get(r) != want:
            report.fail("risk-model", f"best-effort prior {r} = {prior.get(r)!r}, kube-scheduler's default is {want:g}")
    return True


def _close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= MOMENT_TOLERANCE * max(scale, 1.0)


def _check_risk(report: CheckReport, name: str, what: str, stated: Any, recomputed: float) -> None:
    if not isinstance(stated, (int, float)):
        report.fail("risk-missing", f"{name}: {what} risk not stated")
        return
    diff = abs(recomputed - stated)
    report.risks_recomputed += 1
    report.max_risk_difference = max(report.max_risk_difference, diff)
    if diff > RISK_TOLERANCE:
        report.fail("risk-mismatch", f"{name}: {what} risk {stated:.6f}, recomputed {recomputed:.6f}")


def _node_load(report: CheckReport, name: str, node: dict[str, Any], info: dict[str, Any],
               held: dict[str, float], r: str, cap: float) -> tuple[float, float] | None:
    """(mean, std) before the plan: from the objects where the plan says they hold it (and compared with
    the plan's), else the plan's own (a forecast); None when the plan does not say enough."""
    source = (info.get("loadSource") or {}).get(r)
    stated = info.get("before") or {}
    mean_s, std_s = (stated.get("mean") or {}).get(r), (stated.get("std") or {}).get(r)
    if source is None or not isinstance(mean_s, (int, float)) or not isinstance(std_s, (int, float)):
        report.fail("load-before", f"{name}: {r} load before the plan or its source not stated")
        return None
    if source not in OBJECT_LOAD_SOURCES:
        report.loads_stated += 1
        return float(mean_s), float(std_s)
    mean0, std0, actual = _load_before(node, held, r)
    if actual != source:
        report.fail("load-source", f"{name}: {r} load from {source}, but the objects give {actual}")
    if not (_close(mean_s, mean0, cap) and _close(std_s, std0, cap)):
        report.fail("load-before", f"{name}: {r} before {mean_s:g} +- {std_s:g}, expected {mean0:g} +- {std0:g}")
    return mean0, std0


def _check_nodes(plan: dict[str, Any], nodes: dict[str, Any], held: dict[str, dict[str, float]],
                 planned: dict[str, dict[str, float]], added: dict[str, list[float]], report: CheckReport) -> None:
    """Capacity, the load before the plan, every risk the plan states recomputed, and its stated maxima."""
    u_star, eps = float(plan["uStar"]), float(plan["eps"])
    given = {n for n, req in planned.items() if req}
    report.nodes_given_pods = len(given)
    modelled = _check_risk_model(plan, report)
    worst_over, over_nodes = 0.0, []
    for name, node in nodes.items():
        info = plan["nodes"].get(name)
        alloc = _allocatable(node)
        for r, v in planned[name].items():
            on = held[name].get(r, 0.0)
            if on + v > alloc.get(r, 0.0) + 1e-6:
                report.fail("capacity", f"{name}: {r} {on + v:g} > allocatable {alloc.get(r, 0.0):g}")
        if info is None:
            if name in given:
                report.fail("unknown-node", f"{name} given pods but not in the plan's nodes")
            continue
        if not modelled:
            continue
        node_risk = 0.0
        for i, r in enumerate(("cpu", "memory")):
            cap = alloc.get(r, 0.0)
            stated_cap = (info.get("capacity") or {}).get(r)
            if stated_cap is None or not _close(stated_cap, cap, cap):
                report.fail("capacity-stated", f"{name}: {r} capacity {stated_cap!r}, allocatable {cap:g}")
            load = _node_load(report, name, node, info, held[name], r, cap)
            if load is None:
                continue
            mean0, std0 = load
            _check_risk(report, name, f"{r} before", ((info.get("before") or {}).get("risk") or {}).get(r),
                        beta_risk(mean0, std0 ** 2, cap, u_star))
            mean1, var1 = mean0 + added[name][2 * i], std0 ** 2 + added[name][2 * i + 1]
            after = info.get("after") or {}
            mean_s, std_s = (after.get("mean") or {}).get(r), (after.get("std") or {}).get(r)
            if not (isinstance(mean_s, (int, float)) and isinstance(std_s, (int, float))
                    and _close(mean_s, mean1, cap) and _close(std_s, math.sqrt(var1), cap)):
                report.fail("load-after", f"{name}: {r} after {mean_s!r} +- {std_s!r}, recomputed {mean1:g} +- "
                            f"{math.sqrt(var1):g}")
            risk = beta_risk(mean1, var1, cap, u_star)
            _check_risk(report, name, r, info["risk"].get(r), risk)
            node_risk = max(node_risk, risk)
            if name in given:
                report.max_risk_given = max(report.max_risk_given, risk)
                if risk > eps + RISK_TOLERANCE:
                    report.fail("safe-bound", f"{name}: {r} risk {risk:.4f} > eps {eps}")
        if name not in given and node_risk > eps + 1e-9:
            worst_over = max(worst_over, node_risk)
            over_nodes.append(name)
    stated = plan.get("maxRisk") or {}
    for what, mine in (("givenPods", report.max_risk_given), ("alreadyOver", worst_over)):
        if not isinstance(stated.get(what), (int, float)) or abs(stated[what] - mine) > RISK_TOLERANCE:
            report.fail("max-risk", f"plan says {what} {stated.get(what)!r}, recomputed {mine:.6f}")
    if modelled and sorted(stated.get("nodesAlreadyOver") or []) != sorted(over_nodes):
        report.fail("max-risk", f"plan lists {len(stated.get('nodesAlreadyOver') or [])} nodes already over eps, "
                    f"recomputed {len(over_nodes)}")
