"""kso scheduler marks a pod it cannot place PodScheduled=False/Unschedulable on the real control plane (what the
cluster-autoscaler scales up for): with kso's FailedScheduling message, patched again only when the message
changes, PodScheduled=True once bound (the Binding's doing), never on a pod of another scheduler, and a refused
patch (no RBAC on pods/status) is logged and does not stop scheduling."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from scheduler.cli import RunningScheduler, start
from tests.scheduler.test_cli_on_control_plane import QUIET_ENV, _node, _pod, _scheduler
from tests.scheduler.test_cli_on_control_plane import nodes as nodes  # noqa: PLC0414 - the fixture, shared
from tests.support.fixtures import until

ROOT = Path(__file__).resolve().parents[2]
# quick retries: the same message comes back several times within a second
FAST = {"KSO_SCHEDULER_BACKOFF_S": "0.05", "KSO_SCHEDULER_BACKOFF_MAX_S": "0.1", "KSO_SCHEDULER_FLUSH_S": "0.1"}


def _scheduled(core: client.CoreV1Api, ns: str, name: str) -> Any:
    """The pod's PodScheduled condition as the API has it (None: no such condition)."""
    pod = core.read_namespaced_pod(name, ns)
    return next((c for c in pod.status.conditions or () if c.type == "PodScheduled"), None)


def _patches(running: RunningScheduler, result: str) -> float:
    value = running.scheduler.metrics.registry.get_sample_value("kso_scheduler_pod_condition_patches_total",
                                                                {"result": result})
    return value or 0.0


def _attempts(running: RunningScheduler) -> float:
    value = running.scheduler.metrics.registry.get_sample_value("kso_scheduler_schedule_attempts_total",
                                                                {"result": "unschedulable"})
    return value or 0.0


def _failed_messages(core: client.CoreV1Api, ns: str, pod: str) -> list[tuple[str, int]]:
    return [(e.message, e.count) for e in core.list_namespaced_event(ns).items
            if e.reason == "FailedScheduling" and e.involved_object.name == pod]


def test_a_pod_that_fits_nowhere_is_marked_unschedulable_once_per_message_until_bound(
        control_plane: Any, kube_namespace: str, nodes: Any) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    ns, tag = kube_namespace, os.urandom(3).hex()
    name, sel = f"kso-us-{tag}", {"kso-test": tag}
    nodes([_node(f"us-{tag}-small", "2", "1", sel)])
    sched = _scheduler(control_plane, name, FAST)
    try:
        core.create_namespaced_pod(ns, _pod("big", ns, name, "4", selector=sel))
        # a pod of another scheduler, just as unplaceable: kso never touches it
        core.create_namespaced_pod(ns, _pod("theirs", ns, "someone-else", "4", selector=sel))
        cond = until(lambda: _scheduled(core, ns, "big"), 30, "PodScheduled on the pod kso could not place")
        assert (cond.status, cond.reason) == ("False", "Unschedulable")
        # kso's message, the FailedScheduling event's text
        [(event_message, _)] = until(lambda: _failed_messages(core, ns, "big"), 10, "the FailedScheduling event")
        assert cond.message == event_message and "Insufficient cpu" in cond.message
        assert cond.last_transition_time is not None and cond.last_probe_time is None
        first_transition = cond.last_transition_time

        # retries with the same message: more attempts and event counts, no second patch
        start = _attempts(sched)
        until(lambda: _attempts(sched) >= start + 5, 30, "five more unschedulable attempts")
        assert sched.scheduler.drain(10)
        assert _patches(sched, "patched") == 1 and _patches(sched, "error") == 0
        assert max(count for _, count in _failed_messages(core, ns, "big")) >= 3

        # a new message (one more node that is too small): patched once more, the transition time kept
        nodes([_node(f"us-{tag}-tiny", "1", "1", sel)])
        until(lambda: _scheduled(core, ns, "big").message != event_message, 30, "the condition's new message")
        cond = _scheduled(core, ns, "big")
        assert (cond.status, cond.reason) == ("False", "Unschedulable")
        assert cond.last_transition_time == first_transition
        start = _attempts(sched)
        until(lambda: _attempts(sched) >= start + 3, 30, "three more unschedulable attempts")
        assert sched.scheduler.drain(10)
        assert _patches(sched, "patched") == 2

        # room appears: bound, and the API shows PodScheduled=True (set by the Binding, not by kso)
        nodes([_node(f"us-{tag}-big", "8", "1", sel)])
        until(lambda: core.read_namespaced_pod("big", ns).spec.node_name, 30, "big bound once room appeared")
        cond = _scheduled(core, ns, "big")
        assert cond.status == "True" and not cond.reason and not cond.message
        assert sched.scheduler.drain(10)
        assert _patches(sched, "patched") == 2
        assert _scheduled(core, ns, "theirs") is None
        assert not core.read_namespaced_pod("theirs", ns).spec.node_name
    finally:
        sched.close()


def test_a_refused_status_patch_is_logged_and_scheduling_goes_on(control_plane: Any, kube_namespace: str, nodes: Any,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """As a user with deploy/scheduler-standalone's ClusterRole but for its pods/status rule: the patch gets a 403,
    which is logged (with what to grant) and counted, the pod's next attempts send no patch for a while, and the next
    pod is still bound."""
    admin = control_plane.api_client()
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    ns, tag = kube_namespace, os.urandom(3).hex()
    name, sel, user = f"kso-403-{tag}", {"kso-test": tag}, f"kso-no-status-{tag}"
    [role] = [d for d in yaml.safe_load_all((ROOT / "deploy" / "scheduler-standalone" / "rbac.yaml").read_text())
              if d and d["kind"] == "ClusterRole"]
    rules = [r for r in role["rules"] if "pods/status" not in r["resources"]]
    assert len(rules) == len(role["rules"]) - 1
    rbac.create_cluster_role({"metadata": {"name": user}, "rules": rules})
    rbac.create_cluster_role_binding({"metadata": {"name": user},
                                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                  "name": user},
                                      "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    as_user = control_plane.api_client()
    as_user.set_default_header("Impersonate-User", user)
    nodes([_node(f"f-{tag}", "2", "1", sel)])
    try:
        with caplog.at_level(logging.WARNING, logger="kso.scheduler"):
            # RBAC is read from a cache the binding reaches within moments: wait until it answers as expected
            until(lambda: _can_list_pods(as_user), 10, "the impersonated user to be allowed its cache")
            sched = start([name], env={**QUIET_ENV, **FAST}, api_client=as_user, debug_address="", leader_elect=False,
                          sync_timeout_s=30)
            try:
                core.create_namespaced_pod(ns, _pod("big", ns, name, "4", selector=sel))
                until(lambda: _patches(sched, "error") >= 1, 30, "a refused condition patch")
                refused = [r.getMessage() for r in caplog.records if "PodScheduled=False not written" in r.getMessage()]
                assert refused and "403" in refused[0] and "pods/status" in refused[0]
                core.create_namespaced_pod(ns, _pod("small", ns, name, "1", selector=sel))
                assert until(lambda: core.read_namespaced_pod("small", ns).spec.node_name, 30,
                             "small bound after the refused patch") == f"f-{tag}"
                # big's later attempts send no patch for a while (one refused request, not one per attempt)
                until(lambda: _patches(sched, "dropped") >= 1, 30, "a condition patch held back after the 403")
                assert _patches(sched, "patched") == 0 and _scheduled(core, ns, "big") is None
                assert _patches(sched, "error") == 1
                # warned once
                assert len([r for r in caplog.records if "PodScheduled=False not written" in r.getMessage()]) == 1
            finally:
                sched.close()
    finally:
        rbac.delete_cluster_role_binding(user)
        rbac.delete_cluster_role(user)


def _can_list_pods(api: client.ApiClient) -> bool:
    try:
        client.CoreV1Api(api).list_pod_for_all_namespaces(limit=1)
    except client.ApiException:
        return False
    return True
