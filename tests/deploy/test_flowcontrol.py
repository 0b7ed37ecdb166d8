"""deploy/flowcontrol.yaml on the real kube-apiserver: a Binding posted with the kso-scheduler ServiceAccount's token
(kso's bindVerb, or kube-scheduler's own binder in the same pod) is classified by its FlowSchema at workload-high,
where the default scheduler's Bindings go; its other requests stay in the built-in service-accounts flow.

The FlowSchema and the ServiceAccount are created for this test and deleted after it (the session's control plane
dry-runs every deploy/ object elsewhere: they must not be there already); the account's rights are a Role in the
test's namespace, not deploy/'s RBAC, which tests/deploy/test_manifests.py checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from benchmarks.capacity_scale import service_account_kubeconfig
from benchmarks.e2e import create_pods, pod_manifest
from kso.core.kube import load_api_client

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FLOW_SCHEMA = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL = "X-Kubernetes-PF-PriorityLevel-UID"
HTTP_CONFLICT = 409


def test_kso_schedulers_bindings_go_at_workload_high(control_plane: Any, kube_namespace: str, tmp_path: Path) -> None:
    admin = control_plane.api_client()
    core, flow, rbac = client.CoreV1Api(admin), client.FlowcontrolApiserverV1Api(admin), client.RbacAuthorizationV1Api(admin)
    [schema] = list(yaml.safe_load_all((DEPLOY / "flowcontrol.yaml").read_text()))
    subject = schema["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    ns, account = subject["namespace"], subject["name"]
    try:
        core.create_namespace({"metadata": {"name": ns}})
    except ApiException as exc:
        if exc.status != HTTP_CONFLICT:
            raise
    core.create_namespaced_service_account(ns, {"metadata": {"name": account}})
    ours = flow.create_flow_schema(schema).metadata.uid
    try:
        rbac.create_namespaced_role(kube_namespace, {"metadata": {"name": "binder"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}]})
        rbac.create_namespaced_role_binding(kube_namespace, {
            "metadata": {"name": "binder"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}]})
        high = flow.read_priority_level_configuration("workload-high").metadata.uid
        service_accounts = flow.read_flow_schema("service-accounts").metadata.uid
        create_pods(admin, kube_namespace, [pod_manifest("p", scheduler="none")])
        kso = client.CoreV1Api(load_api_client(str(service_account_kubeconfig(control_plane, tmp_path / "kc", (ns, account)))))
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": kube_namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "fc-n1"}}
        resp = kso.create_namespaced_pod_binding("p", kube_namespace, body, _preload_content=False)
        assert resp.status == 201  # noqa: PLR2004
        assert (resp.headers.get(FLOW_SCHEMA), resp.headers.get(PRIORITY_LEVEL)) == (ours, high)
        read = kso.read_namespaced_pod("p", kube_namespace, _preload_content=False)
        assert read.status == 200 and read.headers.get(FLOW_SCHEMA) == service_accounts  # noqa: PLR2004
        assert core.read_namespaced_pod("p", kube_namespace).spec.node_name == "fc-n1"
    finally:
        flow.delete_flow_schema(schema["metadata"]["name"])
        core.delete_namespaced_service_account(account, ns)
