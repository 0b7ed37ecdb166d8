"""Helpers shared by the tests on the real control plane: pods and waiting (the nodes: tests/kso/conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client

from benchmarks.e2e import pod_manifest


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def bound_pod(core: client.CoreV1Api, ns: str, name: str, node: str | None, cpu: str, memory: str) -> str:
    pod = pod_manifest(name, cpu=cpu, memory=memory, scheduler="none")
    if node:
        pod["spec"]["nodeName"] = node
    return str(core.create_namespaced_pod(ns, pod).metadata.uid)
