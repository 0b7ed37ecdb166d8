"""deploy/: every manifest validated offline against the Kubernetes schemas (kubernetes-validate, strict:
unknown fields fail), the manifests cross-checked against each other (ServiceAccounts, roles, images,
ports, probes, labels, the kustomization), RBAC checked for what each component needs and nothing
more, and the KubeSchedulerConfiguration's extender checked against extender-protocol.md and against
kso's live app: captured kube-scheduler requests POSTed to urlPrefix + "/" + each configured verb."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import importlib
import json
import logging
import re
import shutil
import subprocess
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import orjson
import pytest
import yaml

from tests.support.fixtures import SHARED
from tests.support.layout import PRODUCT

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# The schema version the manifests are checked against: a version kubernetes-validate ships, matching
# the default kube-scheduler image (v1.36.x, the version the captured requests come from).
K8S_SCHEMA_VERSION = "1.36"
# Applied by hand, not listed in kustomization.yaml (README.md says why).
OPTIONAL = {"optional/servicemonitor.yaml", "optional/networkpolicy.yaml", "optional/capacity-node-marks.yaml"}
# Kinds kubernetes-validate has no schema for (CRDs); checked structurally below instead.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
# Roles the manifests bind to that Kubernetes itself creates.
BUILTIN_CLUSTER_ROLES = {"system:kube-scheduler", "system:volume-scheduler"}
BUILTIN_ROLES = {("kube-system", "extension-apiserver-authentication-reader")}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "FlowSchema"}

# k8s.io/kube-scheduler config/v1 types.go (KubeSchedulerConfiguration, KubeSchedulerProfile, Extender,
# ExtenderTLSConfig, ExtenderManagedResource) and component-base LeaderElectionConfiguration.
CONFIG_FIELDS = {"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection", "enableProfiling",
                 "enableContentionProfiling", "percentageOfNodesToScore", "percentageOfPlacementsToScore",
                 "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles", "extenders", "delayCacheUntilActive"}
LEADER_ELECTION_FIELDS = {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock", "resourceName",
                          "resourceNamespace"}
PROFILE_FIELDS = {"schedulerName", "percentageOfNodesToScore", "percentageOfPlacementsToScore", "plugins", "pluginConfig"}
EXTENDER_FIELDS = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
                   "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}
TLS_FIELDS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
MANAGED_RESOURCE_FIELDS = {"name", "ignoredByScheduler"}
VERB_FIELDS = {"filterVerb": "filter", "prioritizeVerb": "prioritize", "bindVerb": "bind", "preemptVerb": "preempt"}

# Settings another layer is adding right now; once their dataclass exists they are checked like the rest.
PENDING_SETTINGS = {"KSO_PLAN_FILE", "KSO_PLAN_POLICY", "KSO_PLAN_INTERVAL_S", "KSO_PLAN_MAX_AGE_S",
                    "KSO_SOLVER_TIME_LIMIT_S", "KSO_SOLVER_WORKERS", "KSO_SOLVER_GAP"}


# ---------------------------------------------------------------------------------------------- loading

@functools.cache
def _load(path: Path) -> list[dict[str, Any]]:
    """Parsed once per run; callers must not mutate (copy first)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _manifest_files() -> list[str]:
    # deploy/scheduler-standalone/ and deploy/shadow/ are optional sets of their own, checked by
    # tests/deploy/test_scheduler_standalone.py and tests/deploy/test_shadow_manifests.py
    return sorted(str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*.yaml")
                  if p.name != "kustomization.yaml" and p.relative_to(DEPLOY).parts[0] not in ("scheduler-standalone", "shadow"))


def _docs(include_optional: bool = False) -> list[dict[str, Any]]:
    return [d for f in _manifest_files() if include_optional or f not in OPTIONAL for d in _load(DEPLOY / f)]


def _one(kind: str, name: str, docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    found = [d for d in (docs if docs is not None else _docs(True)) if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected exactly one {kind}/{name}, found {len(found)}"
    return found[0]


def _kustomization() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())


def _deployment() -> dict[str, Any]:
    return _one("Deployment", "kso-scheduler")


def _cronjob() -> dict[str, Any]:
    return _one("CronJob", "kso-reoptimize")


def _container(pod_spec: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in pod_spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"container {name!r} missing"
    return found[0]


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [("Deployment/kso-scheduler", _deployment()["spec"]["template"]["spec"]),
            ("CronJob/kso-reoptimize", _cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"])]


def _flag(args: list[str], name: str) -> str:
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    raise AssertionError(f"{name} not in {args}")


def _admin_port() -> int:
    return int(_flag(_container(_deployment()["spec"]["template"]["spec"], "kso")["args"], "--admin-port"))


def _kso_port() -> int:
    return int(_flag(_container(_deployment()["spec"]["template"]["spec"], "kso")["args"], "--port"))


def _scheduler_config() -> dict[str, Any]:
    """The KubeSchedulerConfiguration the Deployment's kube-scheduler actually reads (--config path ->
    volume mount -> ConfigMap key)."""
    spec = _deployment()["spec"]["template"]["spec"]
    sched = _container(spec, "kube-scheduler")
    path = Path(_flag(sched["args"], "--config"))
    mount = next(m for m in sched["volumeMounts"] if Path(m["mountPath"]) == path.parent)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    cm = _one("ConfigMap", volume["configMap"]["name"])
    assert path.name in cm["data"], f"--config reads {path.name}, ConfigMap {cm['metadata']['name']} has {list(cm['data'])}"
    return yaml.safe_load(cm["data"][path.name])


def _extender() -> dict[str, Any]:
    extenders = _scheduler_config()["extenders"]
    assert len(extenders) == 1, "one extender (kso) expected"
    return extenders[0]


def _settings() -> dict[str, str]:
    return _one("ConfigMap", "kso-settings")["data"]


# ------------------------------------------------------------------------------------ schema validation

@pytest.mark.parametrize("name", _manifest_files())
def test_manifest_validates_against_kubernetes_schema_strict(name: str) -> None:
    docs = _load(DEPLOY / name)
    assert docs, f"{name} holds no object"
    for doc in docs:
        if (doc.get("apiVersion"), doc.get("kind")) in CRD_KINDS:
            continue  # no schema shipped for CRDs; test_servicemonitor_selects_the_metrics_service checks it
        # SchemaNotFoundError (a kind or apiVersion that does not exist) fails the test, as it should.
        assert kubernetes_validate.validate(doc, K8S_SCHEMA_VERSION, strict=True) == K8S_SCHEMA_VERSION


def test_strict_validation_rejects_unknown_and_mistyped_fields() -> None:
    """The validator really is strict: a misspelt field, a number where a string belongs, and an
    unknown kind each fail (so the test above cannot pass vacuously)."""
    dep = json.loads(json.dumps(_deployment()))
    _container(dep["spec"]["template"]["spec"], "kso")["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_SCHEMA_VERSION, strict=True)
    cm = json.loads(json.dumps(_one("ConfigMap", "kso-settings")))
    cm["data"]["SAFEUTILIZATION"] = 90
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(cm, K8S_SCHEMA_VERSION, strict=True)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate({**_cronjob(), "apiVersion": "batch/v1beta1"}, K8S_SCHEMA_VERSION, strict=True)


# ---------------------------------------------------------------------------------------- kustomization

def test_kustomization_lists_every_manifest() -> None:
    k = _kustomization()
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    listed = k["resources"]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    assert all((DEPLOY / f).is_file() for f in listed), "kustomization lists a missing file"
    assert set(listed) == set(_manifest_files()) - OPTIONAL
    assert not OPTIONAL & set(listed)
    # A `namespace:` transformer would move the kube-system RoleBinding into kso-system.
    assert "namespace" not in k


def test_every_namespaced_object_names_its_namespace() -> None:
    for doc in _docs(True):
        ns = doc["metadata"].get("namespace")
        if doc["kind"] in CLUSTER_SCOPED:
            assert ns is None, doc["metadata"]["name"]
        else:
            assert ns in ("kso-system", "kube-system", "kso-capacity"), (doc["kind"], doc["metadata"]["name"])
    assert {d["metadata"]["name"] for d in _docs() if d["kind"] == "Namespace"} == {"kso-system", "kso-capacity"}
    # kso-capacity holds the capacity signal's placeholders and Lease only (capacity.yaml)
    assert {d["kind"] for d in _docs() if d["metadata"].get("namespace") == "kso-capacity"} == {
        "ResourceQuota", "Role", "RoleBinding"}


def _kustomize_build() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: cannot render the kustomization")
    out = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_kustomize_render_is_valid_and_applies_images() -> None:
    rendered = _kustomize_build()
    key = lambda d: (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, rendered), key=str) == sorted(map(key, _docs()), key=str)
    for doc in rendered:
        kubernetes_validate.validate(doc, K8S_SCHEMA_VERSION, strict=True)
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kube-safe-optimizer"
    images = {i["name"]: i for i in _kustomization()["images"]}
    kso_image = f"{images['kso']['newName']}:{images['kso']['newTag']}"
    dep = _one("Deployment", "kso-scheduler", rendered)["spec"]["template"]["spec"]
    job = _one("CronJob", "kso-reoptimize", rendered)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert _container(dep, "kso")["image"] == kso_image
    assert _container(job, "reoptimize")["image"] == kso_image
    sched = images["registry.k8s.io/kube-scheduler"]
    assert _container(dep, "kube-scheduler")["image"] == f"registry.k8s.io/kube-scheduler:{sched['newTag']}"
    # The selector is left alone (includeSelectors: false): changing it would orphan running pods.
    assert "app.kubernetes.io/part-of" not in _one("Deployment", "kso-scheduler", rendered)["spec"]["selector"]["matchLabels"]


# -------------------------------------------------------------------------------------- images and pods

def test_sidecar_and_cronjob_run_the_same_kso_image() -> None:
    dep = _deployment()["spec"]["template"]["spec"]
    job = _cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    kso, reopt = _container(dep, "kso"), _container(job, "reoptimize")
    assert kso["image"] == reopt["image"]
    assert kso["envFrom"] == reopt["envFrom"] == [{"configMapRef": {"name": "kso-settings"}}]
    images = {i["name"] for i in _kustomization()["images"]}
    assert kso["image"].split(":")[0] in images
    sched_image = _container(dep, "kube-scheduler")["image"]
    assert re.fullmatch(r"registry\.k8s\.io/kube-scheduler:v1\.\d+\.\d+", sched_image), sched_image
    assert sched_image.split(":")[0] in images, "kube-scheduler version must be settable via kustomize images:"


@pytest.mark.parametrize("where", ["Deployment/kso-scheduler", "CronJob/kso-reoptimize"])
def test_pods_meet_restricted_pod_security_and_set_resources(where: str) -> None:
    spec = dict(_pod_specs())[where]
    pod_sc = spec.get("securityContext", {})
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    allowed_volumes = {"configMap", "emptyDir", "projected", "secret", "downwardAPI", "persistentVolumeClaim", "ephemeral", "csi"}
    for v in spec.get("volumes", []):
        assert set(v) - {"name"} <= allowed_volumes, v
    for c in spec["containers"]:
        sc = c.get("securityContext", {})
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, c["name"]
        assert sc.get("runAsUser", pod_sc.get("runAsUser")) not in (None, 0), f"{c['name']}: numeric non-root uid"
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
        assert seccomp.get("type") in ("RuntimeDefault", "Localhost"), c["name"]
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert not sc.get("privileged"), c["name"]
        assert "ALL" in sc.get("capabilities", {}).get("drop", []), c["name"]
        assert set(sc.get("capabilities", {}).get("add", [])) <= {"NET_BIND_SERVICE"}, c["name"]
        assert sc.get("readOnlyRootFilesystem") is True, c["name"]
        assert all("hostPort" not in p for p in c.get("ports", [])), c["name"]
        res = c["resources"]
        assert {"cpu", "memory"} <= set(res["requests"]) and "memory" in res["limits"], c["name"]
    assert "pod-security.kubernetes.io/enforce" in _one("Namespace", "kso-system")["metadata"]["labels"]


def test_kso_writes_only_to_mounted_volumes() -> None:
    """With a read-only root filesystem the plan file's directory must be a mounted volume."""
    plan_dir = Path(_settings()["KSO_PLAN_FILE"]).parent
    for _, spec in _pod_specs():
        for c in spec["containers"]:
            if c["image"] != _container(_deployment()["spec"]["template"]["spec"], "kso")["image"]:
                continue
            mounts = {Path(m["mountPath"]) for m in c["volumeMounts"] if not m.get("readOnly")}
            assert plan_dir in mounts, (c["name"], mounts)


def test_dockerfile_matches_the_pods() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [ln.strip() for ln in re.sub(r"\\\n", " ", text).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    froms = [ln.split()[1] for ln in lines if ln.upper().startswith("FROM ")]
    assert froms and froms[-1] == "python:3.11-slim"
    assert any("pip install ." in ln for ln in lines if ln.upper().startswith("RUN "))
    entry = [ln for ln in lines if ln.upper().startswith("ENTRYPOINT ")]
    assert entry and json.loads(entry[-1].split(None, 1)[1]) == ["kso"]
    user = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")]
    assert user, "the image must not run as root"
    uid, _, gid = user[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "numeric uid, so runAsNonRoot can be verified"
    for _, spec in _pod_specs():
        for c in spec["containers"]:
            if c["name"] == "kube-scheduler":
                continue
            assert c["securityContext"]["runAsUser"] == int(uid) and c["securityContext"]["runAsGroup"] == int(gid)


def test_dockerignore_keeps_what_pip_install_needs() -> None:
    patterns = [ln.strip() for ln in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "negations are not handled by this check"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = ["pyproject.toml", project["project"]["readme"]]
    needed += [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]

    def ignored(path: str) -> bool:
        return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path, p.removeprefix("**/")) for p in patterns)

    assert all((ROOT / n).exists() for n in needed), needed
    assert not [n for n in needed if ignored(n)]
    assert ignored(".git") and ignored("tests"), "the context should leave out .git and tests"


# ----------------------------------------------------------------------------- service accounts and RBAC

def _role_index() -> dict[tuple[str, str | None, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
            for d in _docs() if d["kind"] in ("Role", "ClusterRole")}


def _bindings() -> list[dict[str, Any]]:
    return [d for d in _docs() if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]


def test_service_accounts_and_roles_referenced_exist() -> None:
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in _docs() if d["kind"] == "ServiceAccount"}
    for workload, spec in ((_deployment(), _deployment()["spec"]["template"]["spec"]),
                           (_cronjob(), _cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"])):
        assert (workload["metadata"]["namespace"], spec["serviceAccountName"]) in accounts, workload["metadata"]["name"]
        assert spec.get("automountServiceAccountToken", True), "kso and kube-scheduler talk to the API server"
    roles = _role_index()
    for b in _bindings():
        ns = b["metadata"].get("namespace")
        for s in b["subjects"]:
            assert s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) in accounts, (b["metadata"]["name"], s)
        ref = b["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        if ref["kind"] == "ClusterRole":
            assert ("ClusterRole", None, ref["name"]) in roles or ref["name"] in BUILTIN_CLUSTER_ROLES, ref
        else:
            assert b["kind"] == "RoleBinding", "a ClusterRoleBinding can only refer to a ClusterRole"
            assert ("Role", ns, ref["name"]) in roles or (ns, ref["name"]) in BUILTIN_ROLES, ref
    # Every role of ours is bound to someone (no dead RBAC).
    referenced = {(b["roleRef"]["kind"], b["metadata"].get("namespace") if b["roleRef"]["kind"] == "Role" else None,
                   b["roleRef"]["name"]) for b in _bindings()}
    assert set(roles) <= referenced, set(roles) - referenced


Grant = tuple[str | None, dict[str, Any]]  # (namespace the rule applies in, None = cluster-wide; rule)


def _grants(account: str, namespace: str = "kso-system") -> list[Grant]:
    """Rules of our own roles bound to a ServiceAccount (built-in roles are not expanded)."""
    roles = _role_index()
    out: list[Grant] = []
    for b in _bindings():
        if not any(s["name"] == account and s["namespace"] == namespace for s in b["subjects"]):
            continue
        ns = b["metadata"].get("namespace")
        ref = b["roleRef"]
        role = roles.get((ref["kind"], ns if ref["kind"] == "Role" else None, ref["name"]))
        scope = None if b["kind"] == "ClusterRoleBinding" else ns
        out += [(scope, rule) for rule in (role or {}).get("rules", [])]
    return out


def _allowed(grants: list[Grant], group: str, resource: str, verb: str, namespace: str | None = None,
             name: str | None = None) -> bool:
    """RBAC's decision for one request: namespace None = cluster-scoped or all namespaces."""
    for scope, rule in grants:
        if scope is not None and scope != namespace:
            continue
        if group not in rule["apiGroups"] or resource not in rule["resources"] or verb not in rule["verbs"]:
            continue
        names = rule.get("resourceNames")
        if names and name not in names:
            continue
        return True
    return False


def _lease() -> tuple[str, str]:
    le = _scheduler_config()["leaderElection"]
    return le["resourceNamespace"], le["resourceName"]


# What each ServiceAccount must be able to do, from our own roles: (apiGroup, resource, verb, namespace or
# None for cluster-wide, object name or None). "team-a"/"web-0" stand for any namespace and pod.
PLAN = ("kso-system", "kso-plan")
SCHEDULER_POD_NEEDS = [
    *[("", r, v, None, None) for r in ("nodes", "pods") for v in ("get", "list", "watch")],
    # Both kube-scheduler's DefaultBinder and kso's ApiBinder post to pods/<name>/binding.
    ("", "pods/binding", "create", "team-a", "web-0"),
    *[(g, "events", v, "team-a", None) for g in ("", "events.k8s.io") for v in ("create", "patch")],
    *[("", "configmaps", v, *PLAN) for v in ("get", "list", "watch")],
    # the capacity signal (kso/core/capacity.py): its placeholders and its own Lease, in kso-capacity only
    *[("", "pods", v, "kso-capacity", None) for v in ("list", "create", "delete")],
    ("", "pods/status", "patch", "kso-capacity", None),  # PodScheduled=False/Unschedulable: no scheduler serves them
    *[("coordination.k8s.io", "leases", v, "kso-capacity", None) for v in ("list", "create", "patch", "delete")],
    # + the leader-election lease, named in the scheduler configuration (test below)
]
REOPTIMIZE_NEEDS = [
    *[(g, r, v, None, None) for g, r in (("", "pods"), ("", "nodes"), ("policy", "poddisruptionbudgets"),
                                         ("apps", "replicasets"), ("apps", "statefulsets")) for v in ("get", "list")],
    ("", "pods/eviction", "create", "team-a", "web-0"),
    *[(g, "events", v, "team-a", None) for g in ("", "events.k8s.io") for v in ("create", "patch")],
    *[("", "configmaps", v, *PLAN) for v in ("get", "update", "patch")],
    ("", "configmaps", "create", "kso-system", None),
]


def _granted(grants: list[Grant]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for _, rule in grants for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def _check_least_privilege(grants: list[Grant], needs: list[tuple[str, str, str, str | None, str | None]]) -> None:
    for group, resource, verb, ns, name in needs:
        assert _allowed(grants, group, resource, verb, ns, name), (group, resource, verb, ns, name)
    extra = _granted(grants) - {n[:3] for n in needs}
    assert not extra, f"granted but not needed: {sorted(extra)}"


def test_rbac_scheduler_pod_gets_what_it_needs_and_no_more() -> None:
    g = _grants(_deployment()["spec"]["template"]["spec"]["serviceAccountName"])
    lease_ns, lease_name = _lease()
    lease = [("coordination.k8s.io", "leases", "create", lease_ns, None),
             *[("coordination.k8s.io", "leases", v, lease_ns, lease_name) for v in ("get", "update")]]
    _check_least_privilege(g, SCHEDULER_POD_NEEDS + lease)
    # Names and namespaces are limited where RBAC allows it.
    assert not _allowed(g, "coordination.k8s.io", "leases", "update", lease_ns, "some-other-lease")
    assert not _allowed(g, "coordination.k8s.io", "leases", "create", "team-a")
    assert not _allowed(g, "", "configmaps", "get", "kso-system", "kso-settings")
    assert not _allowed(g, "", "configmaps", "get", "team-a", "kso-plan")
    # pods are created and deleted in kso-capacity only; Nodes are never written
    for verb in ("create", "delete"):
        assert not _allowed(g, "", "pods", verb, "team-a") and not _allowed(g, "", "pods", verb, "kso-system")
    assert not any(_allowed(g, "", "nodes", v) for v in ("update", "patch", "create", "delete"))
    assert not _allowed(g, "coordination.k8s.io", "leases", "delete", "kso-system", lease_name)


def test_rbac_covers_the_binding_request_kso_actually_sends() -> None:
    """kso's binder (kso.core.binder.ApiBinder, the real kubernetes client) binds a pod against a recording HTTP
    server on 127.0.0.1; the RBAC resource of the URL it POSTs to must be granted to the scheduler pod
    ("bindings" and "pods/binding" are different RBAC names for the same operation)."""
    from kubernetes import client

    from kso.core.binder import ApiBinder, SyncBinder

    paths: list[str] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            paths.append(urlparse(self.path).path)
            body = b'{"kind":"Status","apiVersion":"v1","status":"Success","code":201}'
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{server.server_address[1]}"
        SyncBinder(ApiBinder(client.ApiClient(configuration=cfg), timeout_s=5)).bind("team-a", "web-0", "uid-1", "node-1")
    finally:
        server.shutdown()
        server.server_close()
    [path] = paths
    m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(\w+)(?:/([^/]+)/(\w+))?", path)
    assert m, path
    namespace, resource, name, sub = m.groups()
    resource = f"{resource}/{sub}" if sub else resource
    g = _grants(_deployment()["spec"]["template"]["spec"]["serviceAccountName"])
    assert _allowed(g, "", resource, "create", namespace, name), (path, resource)


def test_rbac_reoptimize_job_gets_what_it_needs_and_no_more() -> None:
    g = _grants(_cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"])
    _check_least_privilege(g, REOPTIMIZE_NEEDS)
    # Evictions only (no delete), no other ConfigMap, no ConfigMaps outside kso-system.
    assert not _allowed(g, "", "pods", "delete", "team-a", "web-0")
    for other in ("kso-settings", "kso-scheduler-config"):
        assert not _allowed(g, "", "configmaps", "update", "kso-system", other)
    assert not _allowed(g, "", "configmaps", "create", "team-a")
    assert not _allowed(g, "", "configmaps", "update", "team-a", "kso-plan")


def test_rbac_has_no_wildcards_or_escalation_verbs() -> None:
    for (kind, _, name), role in _role_index().items():
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"{kind}/{name}: wildcard in {key}"
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), f"{kind}/{name}"
            assert "secrets" not in rule["resources"], f"{kind}/{name}"


# ----------------------------------------------------------------------- the KubeSchedulerConfiguration

def _duration_s(text: str) -> float:
    """A Go time.Duration string (metav1.Duration's JSON form), e.g. "2s", "1m30s", "500ms"."""
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a Go duration: {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


def test_scheduler_configuration_uses_known_fields_only() -> None:
    cfg = _scheduler_config()
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1" and cfg["kind"] == "KubeSchedulerConfiguration"
    assert set(cfg) <= CONFIG_FIELDS, set(cfg) - CONFIG_FIELDS
    assert set(cfg["leaderElection"]) <= LEADER_ELECTION_FIELDS
    for p in cfg["profiles"]:
        assert set(p) <= PROFILE_FIELDS, set(p) - PROFILE_FIELDS
    for ext in cfg["extenders"]:
        assert set(ext) <= EXTENDER_FIELDS, set(ext) - EXTENDER_FIELDS
        assert set(ext.get("tlsConfig") or {}) <= TLS_FIELDS
        for r in ext.get("managedResources") or []:
            assert set(r) <= MANAGED_RESOURCE_FIELDS


def test_extender_field_names_match_extender_protocol_doc() -> None:
    doc = SHARED / "docs" / "extender-protocol.md"
    if not doc.exists():
        pytest.skip(f"{doc} not present")
    section = doc.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0].split("The legacy Policy", 1)[0]
    names = {re.match(r"[A-Za-z]+", t).group(0) for t in re.findall(r"`([^`]+)`", section)  # type: ignore[union-attr]
             if re.match(r"[a-z][A-Za-z]+", t)}
    assert EXTENDER_FIELDS <= names, EXTENDER_FIELDS - names
    assert "enableHttps" not in _extender(), "enableHttps is the legacy Policy spelling; v1 is enableHTTPS"


def test_extender_settings_follow_the_protocol() -> None:
    ext = _extender()
    assert {f: ext.get(f) for f in VERB_FIELDS} == VERB_FIELDS, "filter, prioritize, bind and preempt verbs"
    assert ext["nodeCacheCapable"] is True
    assert ext["ignorable"] is True, "kso must never block scheduling"
    assert isinstance(ext["weight"], int) and ext["weight"] >= 1, "weight must be positive when prioritizing"
    assert ext["enableHTTPS"] is False and "tlsConfig" not in ext
    assert 0 < _duration_s(ext["httpTimeout"]) <= 5, "beyond the 5 s default a hung sidecar stalls every cycle longer"
    assert float(_settings()["KSO_HTTP_TIMEOUT_S"]) == _duration_s(ext["httpTimeout"]), \
        "kso's bind deadline must be the httpTimeout kube-scheduler waits"
    assert "managedResources" not in ext, "managedResources would hide every pod without those resources from kso"
    assert sum(1 for e in _scheduler_config()["extenders"] if e.get("bindVerb")) == 1, "only one extender may bind"


def test_extender_url_points_at_the_sidecar() -> None:
    url = urlparse(_extender()["urlPrefix"])
    assert url.scheme == "http"
    assert url.hostname in ("127.0.0.1", "localhost", "::1"), "the sidecar is in the same pod"
    assert url.port == _kso_port(), "urlPrefix port must equal the sidecar's --port"
    assert url.path.rstrip("/") == _settings().get("KSO_URL_PREFIX", "").rstrip("/")
    dep = _deployment()["spec"]["template"]["spec"]
    kso = _container(dep, "kso")
    # The scheduler-facing port (with /bind) stays on the pod's loopback; only the admin port is exposed,
    # on the pod IP, for the kubelet's probes and Prometheus.
    assert _flag(kso["args"], "--host") in ("127.0.0.1", "::1")
    assert _flag(kso["args"], "--admin-host") in ("0.0.0.0", "::")
    assert [p["containerPort"] for p in kso["ports"]] == [_admin_port()] and _admin_port() != _kso_port()


def test_scheduler_profile_and_leader_election() -> None:
    cfg = _scheduler_config()
    names = [p["schedulerName"] for p in cfg["profiles"]]
    assert names == ["kso-scheduler"], "one opt-in profile; a default-scheduler profile would fight the cluster's scheduler"
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True and le.get("resourceLock", "leases") == "leases"
    assert (le["resourceNamespace"], le["resourceName"]) != ("kube-system", "kube-scheduler")
    assert le["resourceNamespace"] == _deployment()["metadata"]["namespace"]
    assert "kubeconfig" not in cfg.get("clientConnection", {}), "in a pod: in-cluster config from the ServiceAccount"


# ------------------------------------------------------------------------------------- the live kso app

@contextmanager
def _live_app(env: dict[str, str], admin: bool = False) -> Iterator[Any]:
    """kso's FastAPI app configured by the kso-settings ConfigMap (+ env), in-process; with ``admin`` the
    admin port's app instead of the scheduler-facing one."""
    from fastapi.testclient import TestClient

    from extender.app import create_admin_app, create_app
    from extender.config import load_config
    from extender.server import build
    from kso.core.stats import AnnotationStats

    config = load_config({**_settings(), **env})
    running = build(config, stats=AnnotationStats())  # no Prometheus refresh thread in a test
    try:
        with TestClient(create_admin_app(running.extender) if admin else create_app(running.extender)) as client:
            yield client
    finally:
        running.close()


def test_extender_answers_captured_requests_at_the_configured_urls(fixtures_dir: Path, tmp_path: Path) -> None:
    """The real check: every captured kube-scheduler 1.36 request (nodeCacheCapable mode, as configured)
    is POSTed to urlPrefix's path + "/" + the configured verb of the app built from kso-settings, over a
    node cache holding the fixture's nodes; each answer must be a 200 that kube-scheduler accepts."""
    ext = _extender()
    assert ext["nodeCacheCapable"] is True
    prefix = urlparse(ext["urlPrefix"]).path.rstrip("/")
    routes = {VERB_FIELDS[f]: f"{prefix}/{ext[f]}" for f in VERB_FIELDS if ext.get(f)}
    env = {"KSO_CLUSTER_SOURCE": "SNAPSHOT", "KSO_SNAPSHOT": str(fixtures_dir / "nodes.json"),
           "KSO_PLAN_FILE": str(tmp_path / "plan.json")}
    seen = dict.fromkeys(routes, 0)
    with _live_app(env) as client:
        for req in sorted((fixtures_dir / "node-cache").glob("*.request.json")):
            verb = req.name.split("-", 1)[1].split(".")[0]
            body = orjson.loads(req.read_bytes())
            r = client.post(routes[verb], content=req.read_bytes(), headers={"Content-Type": "application/json"})
            assert r.status_code == 200, (req.name, routes[verb], r.status_code, r.text[:300])
            reply = r.json()
            seen[verb] += 1
            if verb == "filter":
                sent = body["NodeNames"]
                assert reply["Error"] == "" and isinstance(reply["NodeNames"], list), req.name
                failed = set(reply.get("FailedNodes") or {}) | set(reply.get("FailedAndUnresolvableNodes") or {})
                assert set(reply["NodeNames"]) <= set(sent) and set(reply["NodeNames"]) | failed == set(sent), req.name
            elif verb == "prioritize":
                assert [h["Host"] for h in reply] == body["NodeNames"], req.name
                assert all(type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in reply), reply
            elif verb == "bind":
                assert reply == {"Error": ""}, (req.name, reply)
            else:
                candidates = body.get("NodeNameToMetaVictims") or body.get("NodeNameToVictims") or {}
                assert set(reply["NodeNameToMetaVictims"]) <= set(candidates), req.name
        assert client.post(f"{prefix}/no-such-verb", json={}).status_code == 404
    assert all(seen.values()), f"no captured request for some configured verb: {seen}"


def test_probes_and_metrics_hit_routes_that_exist() -> None:
    dep = _deployment()["spec"]["template"]["spec"]
    kso = _container(dep, "kso")
    port_names = {p["name"]: p["containerPort"] for p in kso["ports"]}
    probes = [kso[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")]
    assert {p["path"] for p in probes} == {"/healthz", "/readyz"}
    assert kso["readinessProbe"]["httpGet"]["path"] == "/readyz", "ready = node cache synced"
    assert kso["livenessProbe"]["httpGet"]["path"] == "/healthz", "liveness must not depend on the API server"
    svc = _one("Service", "kso-metrics")
    ann = svc["metadata"]["annotations"]
    with _live_app({"KSO_CLUSTER_SOURCE": "DEMO"}, admin=True) as client:  # the admin port's app
        for p in probes:
            assert port_names.get(p["port"], p["port"]) == _admin_port()
            assert p.get("scheme", "HTTP") == "HTTP"
            assert client.get(p["path"]).status_code == 200, p
        assert client.get("/no-such-probe").status_code == 404
        metrics = client.get(ann["prometheus.io/path"])
        assert metrics.status_code == 200 and "# TYPE" in metrics.text
        assert client.post("/filter", json={}).status_code in (404, 405), "the admin port serves no scheduler verb"
    assert int(ann["prometheus.io/port"]) == _admin_port() and ann["prometheus.io/scrape"] == "true"


def test_metrics_service_selects_the_sidecar() -> None:
    svc = _one("Service", "kso-metrics")
    pod_labels = _deployment()["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    kso_ports = {p["name"]: p["containerPort"] for p in _container(_deployment()["spec"]["template"]["spec"], "kso")["ports"]}
    [port] = svc["spec"]["ports"]
    assert kso_ports[port["targetPort"]] == _admin_port()
    pdb = _one("PodDisruptionBudget", "kso-scheduler")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["minAvailable"] < _deployment()["spec"]["replicas"], "a PDB at full size would block every drain"
    assert _deployment()["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_optional_servicemonitor_and_networkpolicy_match() -> None:
    svc = _one("Service", "kso-metrics")
    sm = _one("ServiceMonitor", "kso-metrics")
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    assert {e["path"] for e in sm["spec"]["endpoints"]} == {svc["metadata"]["annotations"]["prometheus.io/path"]}
    np_ = _one("NetworkPolicy", "kso-scheduler-ingress")
    assert np_["spec"]["podSelector"]["matchLabels"].items() <= _deployment()["spec"]["template"]["metadata"]["labels"].items()
    assert [p["port"] for rule in np_["spec"]["ingress"] for p in rule["ports"]] == [_admin_port()]


# ----------------------------------------------------------------------------- settings and the commands

def _setting_classes() -> list[type]:
    """Every settings dataclass in kso's layers (fields declared with setting("ENV", ...)), found by
    import, so settings added later are checked without editing this test."""
    found: list[type] = []
    for pkg in (*PRODUCT, "shadow"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name.startswith("test_") or "setting(" not in path.read_text(errors="ignore"):
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            try:
                module = importlib.import_module(name)
            except Exception:  # a module another layer is still writing; its settings stay "pending"
                continue
            candidates = [o for o in vars(module).values() if isinstance(o, type)]
            candidates += [n for o in list(candidates) for n in vars(o).values() if isinstance(n, type)]
            for cls in candidates:
                if dataclasses.is_dataclass(cls) and any(f.metadata.get("env") for f in dataclasses.fields(cls)):
                    if cls not in found:
                        found.append(cls)
    return found


def test_settings_configmap_names_real_settings_with_valid_values(caplog: pytest.LogCaptureFixture) -> None:
    from kso.core.settings import load_settings

    data = _settings()
    assert all(isinstance(v, str) for v in data.values())
    classes = _setting_classes()
    known = {f.metadata["env"] for c in classes for f in dataclasses.fields(c) if f.metadata.get("env")}
    assert {"KSO_AGENTS", "SAFEUTILIZATION", "POLICY_OBJECTIVE", "KSO_PROMETHEUS_URL", "KSO_FORECAST_REFRESH"} <= known
    unknown = set(data) - known - PENDING_SETTINGS
    assert not unknown, f"kso-settings names settings kso does not read (typo?): {sorted(unknown)}"
    assert not {"HTTP_PORT", "KSO_HOST"} & set(data), "the Deployment's args own the listen address"
    with caplog.at_level(logging.WARNING, logger="kso.core.settings"):
        for cls in classes:
            load_settings(cls, data)
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str | None:
    from kso.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return out.out if exc.value.code == 0 else None


def _flags(args: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in args if a.startswith("--")}


def test_the_sidecar_command_line_is_one_kso_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    args = _container(_deployment()["spec"]["template"]["spec"], "kso")["args"]
    text = _help([args[0], "--help"], capsys)
    assert text is not None, f"kso has no {args[0]!r} subcommand"
    assert all(f in text for f in _flags(args)), (_flags(args), text)


def test_the_cronjob_command_line_is_one_kso_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    job = _cronjob()
    spec = job["spec"]
    assert spec["schedule"] == "*/30 * * * *" and spec["concurrencyPolicy"] == "Forbid"
    assert spec["jobTemplate"]["spec"]["backoffLimit"] == 0, "a failed run is not retried in a loop"
    args = _container(spec["jobTemplate"]["spec"]["template"]["spec"], "reoptimize")["args"]
    assert args[0] == "reoptimize" and "--execute" not in args, "dry-run by default"
    text = _help(["reoptimize", "--help"], capsys)
    if text is None:
        pytest.skip("`kso reoptimize` is not in this checkout yet")
    assert all(f in text for f in _flags(args) | {"--execute"}), (_flags(args), text)


# --------------------------------------------------------------------------------- the capacity signal

# The cluster-autoscaler's default --expendable-pods-priority-cutoff (its FAQ, "How does Cluster Autoscaler work
# with Pod Priority and Preemption?"): pods with a priority BELOW it never trigger a scale-up.
CA_EXPENDABLE_CUTOFF = -10


def test_capacity_manifests_match_what_kso_writes() -> None:
    """capacity.yaml's PriorityClass, namespace and quota are the ones kso's defaults and kso-settings name, the
    priority makes the autoscaler act yet lets every pod without a class (0) preempt a placeholder, and a placeholder
    kso writes is a valid Pod meeting the namespace's "restricted" Pod Security."""
    from kso.core.capacity import CapacitySettings, Owner, PlaceholderSpec, placeholder_manifest

    defaults = CapacitySettings()
    data = _settings()
    assert data["KSO_CAPACITY_SIGNAL"] == "true"
    assert data.get("KSO_CAPACITY_NAMESPACE", defaults.namespace) == defaults.namespace
    pc = _one("PriorityClass", defaults.priority_class)
    assert CA_EXPENDABLE_CUTOFF <= pc["value"] < 0
    assert pc["preemptionPolicy"] == "Never" and pc["globalDefault"] is False
    ns = _one("Namespace", defaults.namespace)["metadata"]["labels"]
    assert ns["pod-security.kubernetes.io/enforce"] == "restricted"
    quota = _one("ResourceQuota", "kso-capacity-placeholders")
    assert quota["metadata"]["namespace"] == defaults.namespace
    assert int(quota["spec"]["hard"]["pods"]) >= 2 * defaults.max_placeholders
    assert {"requests.cpu", "requests.memory"} <= set(quota["spec"]["hard"])
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": [defaults.priority_class]}]
    # the admission policy admits exactly what kso's defaults write, in kso's namespace only
    policy = _one("ValidatingAdmissionPolicy", "kso-capacity-placeholders")["spec"]
    values = {v["name"]: v["expression"] for v in policy["variables"]}
    assert values["image"] == repr(defaults.image) and values["priorityClass"] == repr(defaults.priority_class)
    assert values["schedulerName"] == repr(defaults.scheduler_name)
    ns_only = {"matchLabels": {"kubernetes.io/metadata.name": defaults.namespace}}
    assert policy["matchConstraints"]["namespaceSelector"] == ns_only and policy["failurePolicy"] == "Fail"
    rules = {r for rule in policy["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert {"pods", "bindings", "pods/binding"} <= rules, "both ways of binding a pod are refused"
    vapb = _one("ValidatingAdmissionPolicyBinding", "kso-capacity-placeholders")["spec"]
    assert vapb["policyName"] == "kso-capacity-placeholders" and vapb["validationActions"] == ["Deny"]
    assert vapb["matchResources"]["namespaceSelector"] == ns_only
    binding = _one("RoleBinding", "kso-capacity-signal")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": _deployment()["spec"]["template"]["spec"][
        "serviceAccountName"], "namespace": "kso-system"}]
    spec = PlaceholderSpec("uid-1", "team-a/web-0", (("cpu", 250.0), ("memory", 2.0**30), ("pods", 1.0)), ("n1", "n2"),
                           (("pool", "a"),), (("dedicated", "Equal", "web", "NoSchedule"),),
                           ((("zone", "In", ("a",)), ("field:metadata.name", "NotIn", ("n9",))),))
    pod = placeholder_manifest(spec, defaults, Owner("kso-a", "kso-capacity-kso-a", "uid-lease"))
    assert kubernetes_validate.validate(pod, K8S_SCHEMA_VERSION, strict=True) == K8S_SCHEMA_VERSION
    sc_pod = pod["spec"]["securityContext"]
    [c] = pod["spec"]["containers"]
    sc = c["securityContext"]
    assert sc_pod["seccompProfile"]["type"] == "RuntimeDefault" and sc["runAsNonRoot"] is True and sc["runAsUser"] > 0
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "limits" not in c["resources"] and c["resources"]["requests"] == {"cpu": "250m", "memory": str(2**30)}
    assert pod["spec"]["schedulerName"] == defaults.scheduler_name and "nodeName" not in pod["spec"]
