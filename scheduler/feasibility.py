"""Which nodes a pod may go on, as kube-scheduler's core filters decide it for the rules kso parses, and
Hightower's choice for ``--seed-compatible``.

The rules themselves are kso's (kso.core.placement.rule_violation, the resource columns of ClusterState); this
module turns them into kube-scheduler's per-node reason texts and its deduplicated FailedScheduling
message ("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector.").
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from kso.core.node_costs import DEFAULT_COST_KEY
from kso.core.objects import NodeInfo, PodInfo
from kso.core.placement import rule_violation
from kso.core.resources import CPU, PODS
from kso.core.views import NodeView

log = logging.getLogger("kso.scheduler")

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"


def kube_reason(violation: str) -> str:
    """kso.core.placement's explanation as the text kube-scheduler's plugin gives for the same rule."""
    if violation.startswith("node is unschedulable"):
        return REASON_UNSCHEDULABLE
    if violation.startswith("untolerated taint "):
        # "untolerated taint k=v:Effect" -> "node(s) had untolerated taint {k: v}"
        key_value = violation[len("untolerated taint "):].rsplit(":", 1)[0]
        key, _, value = key_value.partition("=")
        return f"node(s) had untolerated taint {{{key}: {value}}}"
    if violation.startswith(("nodeSelector ", "required node affinity")):
        return REASON_AFFINITY
    return violation


def rule_signature(pod: PodInfo) -> tuple[object, ...]:
    """What kso.core.placement reads of a pod: pods with equal signatures pass the same nodes."""
    return (pod.tolerations, tuple(sorted(pod.node_selector.items())), pod.required_terms)


def rule_reasons(pod: PodInfo, nodes: Sequence[NodeInfo | None]) -> dict[int, str]:
    """Index of each node the hard rules reject -> kube-scheduler's reason."""
    out: dict[int, str] = {}
    for i, node in enumerate(nodes):
        if node is None:
            out[i] = "node(s) not found"
            continue
        why = rule_violation(pod, node)
        if why is not None:
            out[i] = kube_reason(why)
    return out


# NodeResourcesFit: a node fails for each resource r the pod requests (> 0) with
# request_r > allocatable_r - requested_r; the pod count always counts (a pod requests one "pods").
def resource_reasons(pod: PodInfo, view: NodeView) -> dict[int, str]:
    """Index of each node without room for the pod's requests -> kube-scheduler's reason (first lacking resource)."""
    out: dict[int, str] = {}
    alloc, requested = view.alloc, view.requested
    for res, amount in pod.requests.items():
        if amount <= 0 and res != PODS:
            continue
        col = view.columns.get(res)
        reason = REASON_TOO_MANY_PODS if res == PODS else f"Insufficient {res}"
        if col is None:
            lacking = np.ones(len(view), dtype=bool)
        else:
            with np.errstate(invalid="ignore"):
                lacking = ~(alloc[:, col] - requested[:, col] >= amount)  # NaN allocatable lacks everything
        for i in np.flatnonzero(lacking).tolist():
            out.setdefault(i, reason)
    return out


def failed_message(total: int, reasons: dict[int, str]) -> str:
    """kube-scheduler's FitError text: reasons counted per distinct text, the "count reason" strings sorted
    bytewise (Go's sort.Strings over them, so "1 ..." comes before "2 ...")."""
    counts = Counter(reasons.values())
    parts = ", ".join(sorted(f"{n} {text}" for text, n in counts.items()))
    return f"0/{total} nodes are available: {parts}." if parts else f"0/{total} nodes are available."


# ---- Hightower's toy scheduler ------------------------------------------------------------------
def hightower_price(node: NodeInfo, cost_key: str = DEFAULT_COST_KEY) -> float | None:
    """The node's ``cost_key`` annotation (KSO_PLAN_COST_KEY; the seed's ``hightower.com/cost`` by default) as
    Go's strconv.ParseFloat(s, 32) reads it (a float32); None when absent. An unparsable price fails the whole
    pod in the seed; here it is logged and the node counts as unpriced."""
    raw = node.annotations.get(cost_key)
    if raw is None:
        return None
    try:
        value = float(np.float32(float(raw)))
    except (ValueError, OverflowError):
        value = math.nan
    if math.isnan(value):
        log.warning("node %s: %s=%r is not a number; treated as unpriced", node.name, cost_key, raw)
        return None
    return value


def hightower_fit(pod: PodInfo, view: NodeView) -> tuple[list[int], dict[int, str]]:
    """Seed predicate: free cpu (allocatable - requests of the node's pods) >= the pod's cpu request.
    Returns the fitting indices in view order and index -> the seed's failure line for the others."""
    col = view.columns[CPU]
    need = pod.requests.get(CPU, 0.0)
    free = view.alloc[:, col] - view.requested[:, col]
    fits: list[int] = []
    failures: dict[int, str] = {}
    for i, f in enumerate(free.tolist()):
        if f >= need:
            fits.append(i)
        else:
            failures[i] = f"fit failure on node ({view.names[i]}): Insufficient CPU"
    return fits, failures


def hightower_choice(nodes: Sequence[NodeInfo], cost_key: str = DEFAULT_COST_KEY) -> int:
    """Seed bestPrice: the lowest price among priced nodes, the first of equals; no priced node -> the first."""
    best, best_price = 0, None
    for i, node in enumerate(nodes):
        price = hightower_price(node, cost_key)
        if price is not None and (best_price is None or price < best_price):
            best, best_price = i, price
    return best
