"""The hard placement rules kube-scheduler enforces besides resource fit, for the optimizer and the
benchmarks: NodeUnschedulable, TaintToleration (NoSchedule / NoExecute), NodeAffinity (nodeSelector
and required nodeSelectorTerms). Each returns a reason a person can act on, or None when the pod may
go on the node. PreferNoSchedule taints and preferred affinity are scores, not rules, so not here."""

from __future__ import annotations

from kso.core.objects import NodeInfo, PodInfo, Taint, Toleration

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


# A toleration tolerates a taint when the effects match (empty effect = all), and either the operator
# is Exists (empty key = every key) or the keys and values are equal (v1 helper ToleratesTaint).
def tolerates(tol: Toleration, taint: Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.operator == "Exists":
        return not tol.key or tol.key == taint.key
    return tol.key == taint.key and tol.value == taint.value


def _expression_matches(node: NodeInfo, key: str, op: str, values: tuple[str, ...]) -> bool:
    if key.startswith("field:"):
        actual: str | None = node.name if key == "field:metadata.name" else None
    else:
        actual = node.labels.get(key)
    if op == "In":
        return actual is not None and actual in values
    if op == "NotIn":
        return actual is None or actual not in values
    if op == "Exists":
        return actual is not None
    if op == "DoesNotExist":
        return actual is None
    if op in ("Gt", "Lt") and actual is not None and len(values) == 1:
        try:
            a, b = int(actual), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def rule_violation(pod: PodInfo, node: NodeInfo) -> str | None:
    """Why kube-scheduler's filters would reject this pod on this node (resources aside), or None."""
    if node.unschedulable and not any(
        tolerates(t, Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")) for t in pod.tolerations
    ):
        return "node is unschedulable (cordoned)"
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(tolerates(t, taint) for t in pod.tolerations):
            return f"untolerated taint {taint.key}={taint.value}:{taint.effect}"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    if pod.required_terms and not any(
        all(_expression_matches(node, k, op, vals) for k, op, vals in term) for term in pod.required_terms
    ):
        return "required node affinity does not match"
    return None
