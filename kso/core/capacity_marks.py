"""The capacity signal's node marks (kso.core.capacity has the placeholders).

Node marks (``KSO_CAPACITY_KEEP_NODES``, off by default; decisions.capacity decides which nodes): the autoscaler's
scale-down reads requests, so it removes a node whose pods fit elsewhere by requests even when kso would refuse them
there, and the drained pods then order a node back through their placeholders. kso annotates the nodes it needs
``cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`` (the autoscaler skips such a node in its scale-down
eligibility check, whatever its utilisation) together with its own ``kso.io/scale-down-disabled-by: <identity>``. It
removes only the annotations it set: a node whose scale-down-disabled annotation someone else set is left alone, and
a removal is a patch conditioned on the resourceVersion kso read. It removes all of its marks when it stops (and
when it starts, as for placeholders), and any kso removes the marks of an identity whose Lease expired in every
namespace (each install keeps its Leases in its own KSO_CAPACITY_NAMESPACE: a mark is another install's while its
Lease is current there); the marks of a killed kso stay while no kso with the signal and marks runs (nothing else
expires them: they keep those nodes from scale-down until taken off by hand). Needs ``patch`` on nodes and ``list``
on leases cluster-wide (deploy/optional/capacity-node-marks.yaml; without the latter no other kso's mark is taken
off).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kso.core.capacity import HOLDER, MARKED_BY, SCALE_DOWN_DISABLED, CapacityReconciler, log
from kso.core.capacity_names import lease_seconds
from kso.core.logs import FirstWarnings


@dataclass
class MarkResult:
    marked: list[str] = field(default_factory=list)
    unmarked: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    not_ours: list[str] = field(default_factory=list)  # wanted, but someone else's scale-down-disabled is there
    failed: list[str] = field(default_factory=list)


class NodeMarker:
    """Puts ``SCALE_DOWN_DISABLED: "true"`` (with ``MARKED_BY``: this kso) on the nodes asked for and takes this kso's
    marks off the others (``apply``); never touches a mark it did not set. Every write is a JSON merge patch
    conditioned on the node's resourceVersion as listed (a node changed meanwhile: a 409, tried again next round)."""

    # Each call's longest wait, seconds: a hung connection must not hold the signal's round (and so its stop, which
    # takes the marks off) for ever.
    REQUEST_TIMEOUT_S = 10.0

    def __init__(self, api_client: Any, identity: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.identity = identity
        self.marked: set[str] = set()  # this kso's marks, as of the last apply / clear
        self._refused = FirstWarnings(log)  # a refused patch, by HTTP status

    def nodes(self) -> list[Any]:
        """Every Node, from the API server's cache (resourceVersion 0: no quorum read), for one round's reap and
        apply."""
        return list(self.core.list_node(resource_version="0", _request_timeout=self.REQUEST_TIMEOUT_S).items)

    def _patch(self, node: Any, annotations: dict[str, str | None]) -> bool:
        from kubernetes.client.exceptions import ApiException

        body = {"metadata": {"resourceVersion": node.metadata.resource_version, "annotations": annotations}}
        try:
            self.core.patch_node(node.metadata.name, body, _content_type="application/merge-patch+json",
                                 _request_timeout=self.REQUEST_TIMEOUT_S)
            return True
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or changed since listed: the next round looks again
                hint = (" (marks need patch on nodes: deploy/optional/capacity-node-marks.yaml)"
                        if exc.status == 403 else "")
                self._refused.log(exc.status, "capacity: cannot patch node %s%s: %s %s", node.metadata.name, hint,
                                  exc.status, _message(exc))
            return False

    def _unmark(self, node: Any) -> bool:
        """Take this kso's mark off: its MARKED_BY, and SCALE_DOWN_DISABLED while it still says "true"."""
        ann = node.metadata.annotations or {}
        return self._patch(node, {MARKED_BY: None, **({SCALE_DOWN_DISABLED: None}
                                                       if ann.get(SCALE_DOWN_DISABLED) == "true" else {})})

    def apply(self, wanted: Iterable[str], nodes: list[Any] | None = None) -> MarkResult:
        """Mark the ``wanted`` nodes and unmark this kso's others, among ``nodes`` (default: listed now)."""
        wanted = set(wanted)
        result = MarkResult()
        for node in self.nodes() if nodes is None else nodes:
            name = node.metadata.name
            ann = node.metadata.annotations or {}
            ours = ann.get(MARKED_BY) == self.identity
            if name in wanted:
                if ours:
                    result.kept.append(name)
                elif SCALE_DOWN_DISABLED in ann or MARKED_BY in ann:  # someone else's (another kso's included)
                    result.not_ours.append(name)
                elif self._patch(node, {SCALE_DOWN_DISABLED: "true", MARKED_BY: self.identity}):
                    result.marked.append(name)
                else:
                    result.failed.append(name)
            elif ours:
                (result.unmarked if self._unmark(node) else result.failed).append(name)
        self.marked = set(result.kept) | set(result.marked) | {n for n in result.failed if n not in wanted}
        if result.marked or result.unmarked:
            log.info("capacity: nodes marked scale-down-disabled %d, unmarked %d, kept %d", len(result.marked),
                     len(result.unmarked), len(result.kept))
        return result

    def _unmark_where(self, gone: Any, nodes: list[Any] | None = None) -> list[str]:
        done = []
        for node in self.nodes() if nodes is None else nodes:
            by = (node.metadata.annotations or {}).get(MARKED_BY)
            if by is not None and gone(by) and self._unmark(node):
                done.append(node.metadata.name)
        return done

    def clear(self) -> list[str]:
        """Take every mark of this kso off (on start and on stop); returns the nodes unmarked."""
        done = self._unmark_where(lambda by: by == self.identity)
        self.marked.clear()
        return done

    def reap(self, live: set[str], nodes: list[Any] | None = None) -> list[str]:
        """Take off the marks of every kso whose identity is not in ``live`` (gone: its Lease expired), among
        ``nodes`` (default: listed now)."""
        done = self._unmark_where(lambda by: by not in live, nodes)
        if done:
            log.info("capacity: took the scale-down-disabled marks of gone kso instances off %d nodes", len(done))
        return done


def live_holders_everywhere(reconciler: CapacityReconciler) -> set[str] | None:
    """The identities whose capacity Lease is current in any namespace: every install's kso (each install keeps
    its Leases in its own KSO_CAPACITY_NAMESPACE). None when this kso may not list Leases cluster-wide
    (deploy/optional/capacity-node-marks.yaml grants it): then no other kso's mark may be judged gone."""
    from kubernetes.client.exceptions import ApiException

    try:
        leases = reconciler.coord.list_lease_for_all_namespaces(label_selector=reconciler.ALL_LEASES,
                                                                _request_timeout=10).items
    except ApiException as exc:
        reconciler.refused.log(("leases-everywhere", exc.status), "capacity: cannot list capacity Leases in every "
                               "namespace (%s %s; deploy/optional/capacity-node-marks.yaml grants it): the node "
                               "marks of other kso instances are left alone", exc.status, _message(exc))
        return None
    now = reconciler.clock()
    live = {reconciler.owner.identity}
    for lease in leases:
        renewed = lease_seconds(lease.spec.renew_time) or lease_seconds(lease.metadata.creation_timestamp) or 0.0
        if now - renewed <= float(lease.spec.lease_duration_seconds or reconciler.settings.lease_s):
            live.add((lease.metadata.labels or {}).get(HOLDER, ""))
    return live


def _message(exc: Any) -> str:
    from kso.core.kube import api_message  # (kubernetes imported only where kso talks to an API server)

    return api_message(exc)
