"""deploy/scheduler-standalone/: strict schema validation, restricted pod security, no exposed port, a command
line kso accepts, and the RBAC proven sufficient on the real control plane: kso scheduler, running as the
manifests' ServiceAccount (impersonated), takes its Lease, binds a pod and posts its event, and marks a pod it
cannot place PodScheduled=False/Unschedulable."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kso.cli import main as kso_main
from scheduler.cli import start

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "scheduler-standalone"
SA = ("kso-system", "kso-standalone-scheduler")


@functools.cache
def _docs() -> list[dict[str, Any]]:
    return [d for f in sorted(FOLDER.glob("*.yaml")) if f.name != "kustomization.yaml"
            for d in yaml.safe_load_all(f.read_text()) if d]


def _deploy_docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "deploy" / name).read_text()) if d]


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    [doc] = [d for d in _docs() if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def _container() -> dict[str, Any]:
    [c] = _one("Deployment")["spec"]["template"]["spec"]["containers"]
    return c


def test_manifests_validate_strictly_and_are_all_listed() -> None:
    for doc in _docs():
        kubernetes_validate.validate(doc, "1.36", strict=True)
    k = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    assert set(k["resources"]) == {f.name for f in FOLDER.glob("*.yaml")} - {"kustomization.yaml"}
    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", str(FOLDER)], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr


def test_pod_is_restricted_and_exposes_no_port() -> None:
    spec = _one("Deployment")["spec"]["template"]["spec"]
    c = _container()
    assert spec["serviceAccountName"] == SA[1] and spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] != 0 and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] and sc["capabilities"]["drop"] == ["ALL"]
    assert "ports" not in c, "the debug port stays inside the pod"
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    assert "KSO_SCHEDULER_DEBUG_ADDRESS" not in env  # default 127.0.0.1:10000
    assert env["KSO_SCHEDULER_LEASE"] == "/".join(SA)
    assert all("127.0.0.1:10000" in " ".join(p["exec"]["command"]) for p in (c["startupProbe"], c["livenessProbe"]))


def test_the_capacity_signal_gets_the_extenders_role_in_its_namespace_only() -> None:
    """kso scheduler's ServiceAccount gets exactly ../capacity.yaml's Role (placeholders and capacity Leases), bound
    in kso-capacity: no pod may be written anywhere else, and no Node at all."""
    binding = _one("RoleBinding", "kso-standalone-capacity-signal")
    assert binding["metadata"]["namespace"] == "kso-capacity"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA[1], "namespace": SA[0]}]
    [role] = [d for d in _deploy_docs("capacity.yaml") if d["kind"] == "Role"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert role["metadata"]["namespace"] == "kso-capacity"
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert granted == {("", "pods", v) for v in ("list", "create", "delete")} | {("", "pods/status", "patch")} | {
        ("coordination.k8s.io", "leases", v) for v in ("list", "create", "patch", "delete")}
    cluster_role = _one("ClusterRole")
    assert not any(v in rule["verbs"] for rule in cluster_role["rules"] for v in ("create", "delete", "update", "patch")
                   if set(rule["resources"]) & {"pods", "nodes"}), "pods are written in kso-capacity only"


def test_command_line_is_one_kso_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.replace("$(POD_NAME)", "pod-0") for a in _container()["args"]]
    with pytest.raises(SystemExit) as exc:
        kso_main([*args, "--help"])
    assert exc.value.code == 0 and "--seed-compatible" in capsys.readouterr().out


def _apply(api: client.ApiClient, doc: dict[str, Any]) -> None:
    from kubernetes.utils import create_from_dict

    try:
        create_from_dict(api, doc)
    except Exception as exc:  # already there from an earlier run in this session
        if "AlreadyExists" not in str(exc) and "409" not in str(exc):
            raise


def test_rbac_is_enough_on_the_real_api_server(control_plane: Any, kube_namespace: str) -> None:
    admin = control_plane.api_client()
    core = client.CoreV1Api(admin)
    try:
        core.create_namespace({"metadata": {"name": SA[0]}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    # capacity-rbac.yaml binds the Role of ../capacity.yaml, in its namespace (applied first, as the README says)
    for doc in [*_deploy_docs("capacity.yaml"), *_docs()]:
        if doc["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            _apply(admin, doc)
    as_sa = control_plane.api_client()
    as_sa.set_default_header("Impersonate-User", f"system:serviceaccount:{SA[0]}:{SA[1]}")
    with pytest.raises(ApiException) as denied:  # the impersonation works: something not granted is refused
        client.CoreV1Api(as_sa).list_namespaced_secret(SA[0])
    assert denied.value.status == 403
    tag = os.urandom(3).hex()
    node = {"metadata": {"name": f"standalone-{tag}", "labels": {"kso-test": tag}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}
    core.create_node(node)
    env = {"KSO_PLAN_POLICY": "NONE", "KSO_FORECAST_SOURCE": "NONE", "KSO_SCHEDULER_LEASE": "/".join(SA),
           "KSO_SCHEDULER_LEASE_DURATION_S": "4", "KSO_SCHEDULER_RENEW_DEADLINE_S": "3", "KSO_SCHEDULER_RETRY_PERIOD_S": "1"}
    running = start([f"kso-{tag}"], env=env, api_client=as_sa, debug_address="", identity="standalone",
                    on_lost=lambda: None, sync_timeout_s=20)
    try:
        pod = {"metadata": {"name": "p"}, "spec": {"schedulerName": f"kso-{tag}", "nodeSelector": {"kso-test": tag},
                                                   "containers": [{"name": "c", "image": "busybox"}]}}
        core.create_namespaced_pod(kube_namespace, pod)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not core.read_namespaced_pod("p", kube_namespace).spec.node_name:
            time.sleep(0.2)
        assert core.read_namespaced_pod("p", kube_namespace).spec.node_name == f"standalone-{tag}"
        lease = client.CoordinationV1Api(admin).read_namespaced_lease(SA[1], SA[0])
        assert lease.spec.holder_identity == "standalone"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(e.reason == "Scheduled" for e in core.list_namespaced_event(kube_namespace).items):
                break
            time.sleep(0.2)
        assert any(e.reason == "Scheduled" for e in core.list_namespaced_event(kube_namespace).items)
        assert running.watcher.stats()["errors"] == 0  # list/watch of nodes and pods allowed
        # a pod that fits nowhere gets the condition the cluster-autoscaler reads (patch on pods/status granted)
        too_big = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "64"}}}
        core.create_namespaced_pod(kube_namespace, {**pod, "metadata": {"name": "big"},
                                                    "spec": {**pod["spec"], "containers": [too_big]}})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not core.read_namespaced_pod("big", kube_namespace).status.conditions:
            time.sleep(0.2)
        [cond] = core.read_namespaced_pod("big", kube_namespace).status.conditions
        assert (cond.type, cond.status, cond.reason) == ("PodScheduled", "False", "Unschedulable")
        assert running.scheduler.metrics.registry.get_sample_value("kso_scheduler_pod_condition_patches_total",
                                                                   {"result": "error"}) is None
        # it bound through pods/<name>/binding: the namespace's bindings collection is not granted
        core.create_namespaced_pod(kube_namespace, {**pod, "metadata": {"name": "q"}, "spec": {**pod["spec"],
                                                                                             "schedulerName": "nobody"}})
        binding = client.V1Binding(metadata=client.V1ObjectMeta(name="q"),
                                   target=client.V1ObjectReference(kind="Node", name=f"standalone-{tag}"))
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(as_sa).create_namespaced_binding(kube_namespace, binding, _preload_content=False)
        assert refused.value.status == 403
    finally:
        running.close()
        core.delete_node(f"standalone-{tag}")
