"""Helpers shared by the scheduler's tests."""

from __future__ import annotations

import math
from typing import Any

from kso.core.objects import PodInfo
from scheduler.qos import (
    PodClock,
)
from tests.support.fixtures import make_pod

T0 = 1_800_000_000.0


def clock(name: str, controller: str, *, slo: float | None = None, created: float = T0, scheduled: float = math.nan,
          ready: float = math.nan, namespace: str = "default", priority: int = 0) -> PodClock:
    return PodClock(f"uid-{namespace}-{name}", namespace, name, controller, slo, created, scheduled, ready, priority)


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def scheduled(self, pod: PodInfo, node: str, message: str) -> None:
        self.events.append(("Scheduled", pod.name, message))

    def failed(self, pod: PodInfo, message: str) -> None:
        self.events.append(("FailedScheduling", pod.name, message))


def kso_pod(name: str, cpu: str, controller: str, slo: str) -> dict[str, Any]:
    pod = make_pod(name, cpu=cpu)
    pod["spec"]["schedulerName"] = "kso"
    pod["metadata"]["annotations"] = {"controller": controller, "slo": slo}
    return pod
