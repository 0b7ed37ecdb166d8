"""PodDisruptionBudgets for ``kso reoptimize``: read them (policy/v1), match their selectors to the movable
pods, and say how many evictions each allows now (``status.disruptionsAllowed``, as the disruption controller
computed it). The migration planner moves at most that many of each budget's pods
(optimizer.reoptimize.migration, ``MoveLimits.budgets``), so the plan is one the Eviction API accepts.

Rules, as the Eviction API applies them:
* A budget selects pods in its own namespace; an empty selector selects every pod there, a missing one none.
* A budget whose status the disruption controller has not computed for its current generation allows
  nothing (the API server refuses evictions under it until then).
* A pod under more than one budget cannot be evicted at all (the API server answers 500); such pods are
  not movable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kso.core.cluster_source import InputError, RawCluster, list_raw
from kso.core.objects import PodInfo

MULTIPLE_BUDGETS = "under more than one PodDisruptionBudget"


@dataclass(frozen=True, slots=True)
class DisruptionLimit:
    """One budget as the planner sees it: at most ``allowed`` evictions among ``pods`` (uids)."""

    name: str  # namespace/name
    allowed: int
    pods: frozenset[str]


@dataclass(frozen=True, slots=True)
class Budget:
    namespace: str
    name: str
    selector: dict[str, Any] | None  # None: selects no pod
    allowed: int  # disruptionsAllowed, 0 until the disruption controller has observed this generation


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions: In, NotIn, Exists, DoesNotExist)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False  # an operator the API server would have refused: select nothing rather than guess
    return True


def budget_from_k8s(raw: dict[str, Any]) -> Budget:
    meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    observed = status.get("observedGeneration")
    allowed = status.get("disruptionsAllowed")
    current = isinstance(observed, int) and observed >= int(meta.get("generation") or 0)
    return Budget(str(meta.get("namespace", "")), str(meta.get("name", "")), spec.get("selector"),
                  max(int(allowed), 0) if current and isinstance(allowed, int) else 0)


def read_budgets(api_client: Any) -> list[Budget]:
    """Every PodDisruptionBudget of the cluster; InputError when they cannot be listed (planning without them
    would choose evictions the API server refuses)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from kso.core.kube import api_message

    policy = client.PolicyV1Api(api_client)
    try:
        items = list_raw(policy.list_pod_disruption_budget_for_all_namespaces)
    except ApiException as exc:
        if exc.status == 404:  # policy/v1 not served: no budget the Eviction API could enforce either
            return []
        raise InputError(f"cannot list PodDisruptionBudgets (policy/v1): HTTP {exc.status}: {api_message(exc)}; "
                         "the plan must stay within them") from None
    except Exception as exc:  # noqa: BLE001 - connection errors say the same to the user
        raise InputError(f"cannot list PodDisruptionBudgets (policy/v1): {type(exc).__name__}: {exc}") from None
    return [budget_from_k8s(raw) for raw in items]


def disruption_limits(budgets: Iterable[Budget], cluster: RawCluster,
                      movable: list[PodInfo]) -> tuple[list[DisruptionLimit], list[PodInfo], int]:
    """Per budget, the movable pods it covers and how many of them may go; the movable pods that stay
    movable (not under two budgets or more) and how many were dropped for that."""
    by_ns: dict[str, list[Budget]] = {}
    for b in budgets:
        by_ns.setdefault(b.namespace, []).append(b)
    covered: dict[tuple[str, str], list[str]] = {}
    for pod in movable:
        raw = cluster.raw_pods.get((pod.namespace, pod.name)) or {}
        labels = (raw.get("metadata") or {}).get("labels") or {}
        for b in by_ns.get(pod.namespace, ()):
            if selector_matches(b.selector, labels):
                covered.setdefault((b.namespace, b.name), []).append(pod.uid)
    counts: dict[str, int] = {}
    for uids in covered.values():
        for uid in uids:
            counts[uid] = counts.get(uid, 0) + 1
    kept = [p for p in movable if counts.get(p.uid, 0) <= 1]
    allowed = {(b.namespace, b.name): b.allowed for b in budgets}
    limits = [DisruptionLimit(f"{ns}/{name}", allowed[(ns, name)], frozenset(u for u in uids if counts[u] == 1))
              for (ns, name), uids in sorted(covered.items())]
    return [lim for lim in limits if lim.pods], kept, len(movable) - len(kept)
