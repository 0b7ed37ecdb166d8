"""deploy/shadow/: strict schema validation, restricted pod security, read-only RBAC (get, list and watch of nodes and
pods, nothing else), a command line kso accepts, and that RBAC proven enough and no more on the real control plane:
kso shadow, running as the manifests' ServiceAccount (impersonated), syncs its cache and judges a bind another
scheduler made, and that ServiceAccount may not bind, evict or write anything."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kso.cli import main as kso_main
from shadow.run import start
from tests.support.fixtures import make_running, until

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "shadow"
SA = ("kso-system", "kso-shadow")


@functools.cache
def _docs() -> list[dict[str, Any]]:
    return [d for f in sorted(FOLDER.glob("*.yaml")) if f.name != "kustomization.yaml"
            for d in yaml.safe_load_all(f.read_text()) if d]


def _one(kind: str) -> dict[str, Any]:
    [doc] = [d for d in _docs() if d["kind"] == kind]
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


def test_rbac_reads_nodes_and_pods_and_nothing_else() -> None:
    rules = _one("ClusterRole")["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]}]
    assert not [d for d in _docs() if d["kind"] in ("Role", "RoleBinding")]
    binding = _one("ClusterRoleBinding")
    assert binding["roleRef"]["name"] == _one("ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA[1], "namespace": SA[0]}]


def test_pod_is_restricted_single_and_serves_its_metrics() -> None:
    deployment = _one("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    c = _container()
    assert deployment["spec"]["replicas"] == 1  # two shadows would count each bind twice
    assert spec["serviceAccountName"] == SA[1] and spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] != 0 and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] and sc["capabilities"]["drop"] == ["ALL"]
    [port] = c["ports"]
    args = c["args"]
    assert args[args.index("--address") + 1] == f"0.0.0.0:{port['containerPort']}"
    report = Path(args[args.index("--report") + 1])
    assert any(report.is_relative_to(m["mountPath"]) for m in c["volumeMounts"])  # writable: the root is read-only
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    [svc_port] = _one("Service")["spec"]["ports"]
    assert svc_port["targetPort"] == port["name"]


def test_command_line_is_one_kso_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        kso_main([*_container()["args"], "--help"])
    assert exc.value.code == 0 and "--report" in capsys.readouterr().out


def _apply(api: client.ApiClient, doc: dict[str, Any]) -> None:
    from kubernetes.utils import create_from_dict

    try:
        create_from_dict(api, doc)
    except Exception as exc:  # already there from an earlier run in this session
        if "AlreadyExists" not in str(exc) and "409" not in str(exc):
            raise


def test_rbac_is_enough_and_read_only_on_the_real_api_server(control_plane: Any, kube_namespace: str,
                                                             tmp_path: Path) -> None:
    admin = control_plane.api_client()
    core = client.CoreV1Api(admin)
    try:
        core.create_namespace({"metadata": {"name": SA[0]}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    for doc in _docs():
        if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            _apply(admin, doc)
    as_sa = control_plane.api_client()
    as_sa.set_default_header("Impersonate-User", f"system:serviceaccount:{SA[0]}:{SA[1]}")
    tag = os.urandom(3).hex()
    name = f"shadow-rbac-{tag}"
    core.create_node({"metadata": {"name": name, "labels": {"kso-test": tag}},
                      "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                                 "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
    env = {"KSO_FORECAST_SOURCE": "NONE", "KSO_SHADOW_ADDRESS": "", "KSO_SHADOW_REPORT": str(tmp_path / "r.md")}
    running = start(env, api_client=as_sa, sync_timeout_s=20)
    try:
        assert running.watcher.synced
        pod = {"metadata": {"name": "p"}, "spec": {"schedulerName": "another-scheduler", "nodeSelector": {"kso-test": tag},
                                                   "containers": [{"name": "c", "image": "busybox"}]}}
        core.create_namespaced_pod(kube_namespace, pod)
        until(lambda: running.shadow.state.pending_pod(namespace=kube_namespace, name="p"), 10, "the pod seen pending")
        make_running(core, kube_namespace, "p", name)  # the other scheduler binds it (as admin)
        assert running.shadow.wait_judged(1, 20)
        # judged; kso agrees (the only node the pod may go on), so nothing changed
        assert running.shadow.tally.judged == 1 and not running.shadow.changed
        assert running.watcher.stats()["errors"] == 0  # list and watch of nodes and pods allowed
        sa = client.CoreV1Api(as_sa)
        core.create_namespaced_pod(kube_namespace, {**pod, "metadata": {"name": "q"}})
        for call in (lambda: sa.create_namespaced_pod_binding("q", kube_namespace, {
                         "metadata": {"name": "q"}, "target": {"kind": "Node", "name": name}}),
                     lambda: sa.create_namespaced_event(kube_namespace, {"metadata": {"name": "e"},
                                                                        "involvedObject": {"name": "q"}}),
                     lambda: sa.patch_node(name, {"metadata": {"labels": {"x": "y"}}}),
                     lambda: sa.delete_namespaced_pod("q", kube_namespace),
                     lambda: sa.list_namespaced_secret(kube_namespace)):
            with pytest.raises(ApiException) as refused:
                call()
            assert refused.value.status == 403
    finally:
        running.close()
        for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
            core.delete_namespaced_pod(p.metadata.name, p.metadata.namespace, grace_period_seconds=0)
        core.delete_node(name)
