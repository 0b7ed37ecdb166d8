"""The pod condition ``PodScheduled=False, reason=Unschedulable`` on a pod kso scheduler could place nowhere.

The cluster-autoscaler scales up for pending pods that carry exactly that condition (status False, reason
Unschedulable, no node, not being deleted); a pending pod without it is invisible to it. kube-scheduler writes it
in its failure handler beside the FailedScheduling event, and so does kso:

- a strategic merge patch of the pods/status subresource, the condition merged by its type: type, status
  ``False``, reason ``Unschedulable``, the failure message (the FailedScheduling event's text) and, when the
  condition is new or its status changes, ``lastTransitionTime`` now and ``lastProbeTime`` null;
- only when status, reason or message change (kube-scheduler compares with the pod's current condition and
  sends nothing when they are equal): a pod retried with the same message is not patched again;
- with the pod's uid in the patch: the API server refuses it (metadata.uid is immutable) when a pod of the same
  name replaced the one kso judged;
- nothing on bind: the Binding subresource itself sets ``PodScheduled=True`` (and clears reason and message).

``nominatedNodeName`` is not written: kso scheduler does not preempt, so it never nominates a node.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client

from kso.core.objects import PodInfo

log = logging.getLogger("kso.scheduler")

UNSCHEDULABLE = "Unschedulable"  # v1.PodReasonUnschedulable, the reason the cluster-autoscaler reads
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


class StatusSink(Protocol):
    def unschedulable(self, pod: PodInfo, message: str, transition: bool) -> None:
        """Mark the pod PodScheduled=False/Unschedulable with ``message``; ``transition``: the condition is new (or
        was not False) as far as the caller knows, so its lastTransitionTime is now."""
        ...


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unschedulable_patch(pod: PodInfo, message: str, transition: bool) -> dict[str, Any]:
    """The strategic merge patch of pods/status that marks ``pod`` unschedulable with ``message``."""
    condition: dict[str, Any] = {"type": "PodScheduled", "status": "False", "reason": UNSCHEDULABLE, "message": message}
    if transition:
        condition["lastProbeTime"] = None
        condition["lastTransitionTime"] = _now()
    return {"metadata": {"uid": pod.uid}, "status": {"conditions": [condition]}}


class ApiPodStatus:
    """Writes the condition through the official client (pods/status, strategic merge)."""

    def __init__(self, api_client: client.ApiClient, timeout_s: float = 10.0) -> None:
        self._core = client.CoreV1Api(api_client)
        self.timeout_s = timeout_s

    def unschedulable(self, pod: PodInfo, message: str, transition: bool) -> None:
        resp = self._core.patch_namespaced_pod_status(pod.name, pod.namespace, unschedulable_patch(pod, message, transition),
                                                      _content_type=STRATEGIC_MERGE, _preload_content=False,
                                                      _request_timeout=self.timeout_s)
        try:
            resp.data  # noqa: B018 - read the body, or the pooled connection carries it into the next request
        finally:
            resp.release_conn()


class LogStatus:
    """Offline: the condition goes to the log."""

    def unschedulable(self, pod: PodInfo, message: str, transition: bool) -> None:
        log.debug("PodScheduled=False/%s %s: %s", UNSCHEDULABLE, pod.key, message)
