"""kso's ApiBinder authenticates as kso's loaded client does (kso.core.kube.load_api_client), on the
real kube-apiserver v1.36.2 with RBAC: a service account's token in-cluster (the paths a pod has, moved to files
of the test), and a kubeconfig whose exec plugin the binder re-runs, off its event loop, when the token nears its
expiry. (Client certificates: every other binder test, through the control plane's admin kubeconfig.)"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.config import incluster_config

from benchmarks.e2e import pod_manifest
from kso.core.binder import ApiBinder, BindError
from kso.core.kube import load_api_client

NODE = "auth-n1"  # a Binding does not need its node to exist: none is created


def binder_token(control_plane: Any, ns: str) -> str:
    """A token of service account ``kso`` in ``ns``, allowed to bind pods (and read them) in ``ns`` only."""
    api = control_plane.api_client()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "kso"}})
    rbac.create_namespaced_role(ns, {"metadata": {"name": "binder"}, "rules": [
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "binder"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
        "subjects": [{"kind": "ServiceAccount", "name": "kso", "namespace": ns}]})
    request = core.create_namespaced_service_account_token("kso", ns, {"spec": {"expirationSeconds": 3600}})
    return str(request.status.token)


def ca_bytes(control_plane: Any) -> bytes:
    kubeconfig = yaml.safe_load(control_plane.kubeconfig_yaml())
    return base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])


def bind_once(binder: ApiBinder, ns: str, name: str) -> None:
    async def run() -> None:
        try:
            await binder.bind(ns, name, "", NODE)
        finally:
            await binder.aclose()

    asyncio.run(run())


def test_in_cluster_service_account_token(control_plane: Any, kube_namespace: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ns = kube_namespace
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text(binder_token(control_plane, ns))
    ca.write_bytes(ca_bytes(control_plane))
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    host, _, port = control_plane.url.removeprefix("https://").rpartition(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    api = load_api_client()  # in-cluster, as in kso's pod
    assert api.configuration.refresh_api_key_hook is not None  # the loader re-reads the rotated token file
    admin = client.CoreV1Api(control_plane.api_client())
    admin.create_namespaced_pod(ns, pod_manifest("sa-pod", scheduler="none"))
    bind_once(ApiBinder(api), ns, "sa-pod")
    assert admin.read_namespaced_pod("sa-pod", ns).spec.node_name == NODE
    # The token is the service account's, not an admin's: another namespace is forbidden.
    with pytest.raises(BindError, match="HTTP 403: .*forbidden"):
        bind_once(ApiBinder(api), "default", "not-ours")


EXEC_PLUGIN = """
import datetime, json, sys
from pathlib import Path
token_file, runs = Path(sys.argv[1]), Path(sys.argv[2])
with runs.open("a") as f:
    f.write("run\\n")
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=60)
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": token_file.read_text().strip(),
                             "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
"""


def test_kubeconfig_exec_plugin_token_is_refreshed(control_plane: Any, kube_namespace: str, tmp_path: Path) -> None:
    """The plugin's tokens expire within the loader's 5-minute margin, so each refresh (at most once a second,
    on a worker thread) runs it again. It gave a useless token when kso loaded the kubeconfig and a good one
    since: the bind goes through only if the binder's refresh ran the plugin again and used its token."""
    ns = kube_namespace
    token, runs, plugin = tmp_path / "token", tmp_path / "runs", tmp_path / "plugin.py"
    plugin.write_text(EXEC_PLUGIN)
    token.write_text("not-a-valid-token")
    kubeconfig = yaml.safe_load(control_plane.kubeconfig_yaml())
    kubeconfig["users"] = [{"name": "admin", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(plugin), str(token), str(runs)], "interactiveMode": "Never"}}}]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    os.chmod(path, 0o600)
    api = load_api_client(str(path))
    assert runs.read_text().count("run") == 1
    token.write_text(binder_token(control_plane, ns))
    admin = client.CoreV1Api(control_plane.api_client())
    admin.create_namespaced_pod(ns, pod_manifest("exec-pod", scheduler="none"))
    bind_once(ApiBinder(api), ns, "exec-pod")
    assert runs.read_text().count("run") == 2
    assert admin.read_namespaced_pod("exec-pod", ns).spec.node_name == NODE
