"""Scheduled / FailedScheduling events on the pod (core/v1 Events, as ``kubectl describe pod`` shows them).

A FailedScheduling with the same message as the last one on that pod is not posted again: the existing
event's count and lastTimestamp go up instead (what client-go's event correlator does for kube-scheduler).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from kso.core.objects import PodInfo

log = logging.getLogger("kso.scheduler")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiEvents:
    def __init__(self, api_client: client.ApiClient, component: str, instance: str = "", timeout_s: float = 10.0) -> None:
        self._core = client.CoreV1Api(api_client)
        self.component = component
        self.instance = instance
        self.timeout_s = timeout_s
        self._last: dict[str, tuple[str, str, int]] = {}  # pod uid -> (message, event name, count)
        self._lock = threading.Lock()

    def _body(self, pod: PodInfo, kind: str, reason: str, message: str) -> dict[str, Any]:
        now = _now()
        return {
            "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                               "uid": pod.uid},
            "reason": reason, "message": message[:1024], "type": kind, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": self.component},
            "reportingComponent": self.component, "reportingInstance": self.instance,
        }

    def _create(self, pod: PodInfo, body: dict[str, Any]) -> None:
        resp = self._core.create_namespaced_event(pod.namespace, body, _preload_content=False,
                                                  _request_timeout=self.timeout_s)
        try:
            resp.data  # noqa: B018 - read the body, or the pooled connection carries it into the next request
        finally:
            resp.release_conn()

    def scheduled(self, pod: PodInfo, node: str, message: str) -> None:
        with self._lock:
            self._last.pop(pod.uid, None)
        self._create(pod, self._body(pod, "Normal", "Scheduled", message))

    def failed(self, pod: PodInfo, message: str) -> None:
        with self._lock:
            last = self._last.get(pod.uid)
        if last is not None and last[0] == message:
            count = last[2] + 1
            patch = {"count": count, "lastTimestamp": _now()}
            try:
                resp = self._core.patch_namespaced_event(last[1], pod.namespace, patch, _preload_content=False,
                                                         _request_timeout=self.timeout_s)
                try:
                    resp.data  # noqa: B018 - see _create
                finally:
                    resp.release_conn()
                with self._lock:
                    self._last[pod.uid] = (message, last[1], count)
                return
            except client.ApiException as exc:
                log.debug("event %s could not be updated (%s); posting a new one", last[1], exc.status)
        body = self._body(pod, "Warning", "FailedScheduling", message)
        self._create(pod, body)
        with self._lock:
            self._last[pod.uid] = (message, body["metadata"]["name"], 1)
            if len(self._last) > 10_000:
                self._last.pop(next(iter(self._last)))


class LogEvents:
    """Offline: events go to the log."""

    def scheduled(self, pod: PodInfo, node: str, message: str) -> None:
        log.info("Scheduled %s: %s", pod.key, message)

    def failed(self, pod: PodInfo, message: str) -> None:
        log.info("FailedScheduling %s: %s", pod.key, message)
