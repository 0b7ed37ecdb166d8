"""deploy/ against the real kube-apiserver and kube-scheduler v1.36.2 (benchmarks.controlplane), test 5.

Every manifest in deploy/ (and deploy/optional/) is created with a server-side dry run and strict field
validation, so an unknown or misspelt field is a 400 from the real API server, not a silent drop. The
namespaces are created for real first (a dry-run namespace does not exist for the objects in it). Kinds a
bare API server does not serve are skipped by name: Kustomization (a kustomize file, never sent to the API)
and ServiceMonitor (the Prometheus operator's CRD). The KubeSchedulerConfiguration in
deploy/scheduler-config.yaml is then run by the real kube-scheduler (strict decoding: it exits on an
unknown field) with only its client connection pointed at the test cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from benchmarks.e2e import deploy_scheduler_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NOT_SERVED = {"Kustomization", "ServiceMonitor"}


def deploy_objects() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted([*DEPLOY.glob("*.yaml"), *DEPLOY.glob("optional/*.yaml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") and doc["kind"] not in NOT_SERVED:
                out.append((str(path.relative_to(DEPLOY)), doc))
    return out


def test_every_deploy_manifest_passes_strict_server_side_dry_run(control_plane: Any) -> None:
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    dyn = DynamicClient(api)
    objects = deploy_objects()
    assert len(objects) >= 10, [f for f, _ in objects]
    namespaces = {o["metadata"]["name"] for _, o in objects if o["kind"] == "Namespace"}
    namespaces |= {o["metadata"].get("namespace") for _, o in objects if o["metadata"].get("namespace")}
    for ns in sorted(namespaces):
        try:
            core.create_namespace({"metadata": {"name": ns}})
        except ApiException as exc:
            if exc.status != 409:
                raise
    checked, problems = 0, []
    for fname, obj in objects:
        if obj["kind"] == "Namespace":
            continue
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            resource.create(body=obj, namespace=obj["metadata"].get("namespace"),
                            query_params=[("dryRun", "All"), ("fieldValidation", "Strict")])
            checked += 1
        except Exception as exc:  # noqa: BLE001 - collect every manifest's problem, then fail once
            problems.append(f"{fname} {obj['kind']}/{obj['metadata'].get('name')}: {getattr(exc, 'body', exc)}")
    assert not problems, "\n".join(problems)
    assert checked >= 10


def test_strict_dry_run_rejects_an_unknown_field(control_plane: Any, kube_namespace: str) -> None:
    """The check above can fail: a misspelt field is refused by the same call."""
    dyn = DynamicClient(control_plane.api_client())
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}, "dta": {}}
    with pytest.raises(Exception, match="unknown field"):
        dyn.resources.get(api_version="v1", kind="ConfigMap").create(
            body=cm, namespace=kube_namespace, query_params=[("dryRun", "All"), ("fieldValidation", "Strict")])


def test_deploy_scheduler_configuration_runs_in_the_real_kube_scheduler(control_plane: Any) -> None:
    cfg = deploy_scheduler_config()
    core = client.CoreV1Api(control_plane.api_client())
    lease_ns = cfg.get("leaderElection", {}).get("resourceNamespace", "kube-system")
    try:
        core.create_namespace({"metadata": {"name": lease_ns}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    sched = control_plane.start_scheduler(cfg, name="deploy-config", keep_leader_election=True)
    try:
        log = sched.log.read_text(errors="replace")
        assert sched.alive(), log[-2000:]
        assert "strict decoding error" not in log and "unknown field" not in log
    finally:
        control_plane.stop_component(sched)
    bad = {**cfg, "profiles": [{**cfg["profiles"][0], "schedulerNmae": "typo"}]}
    with pytest.raises(Exception, match="exited|not ready"):
        control_plane.start_scheduler(bad, name="deploy-config-typo", timeout=30)
