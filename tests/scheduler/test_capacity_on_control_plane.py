"""The capacity signal of ``kso scheduler`` on the real control plane (kube-apiserver, kube-controller-manager and a
kube-scheduler of the default profile v1.36.2, etcd; no kubelet).

kso scheduler runs as deploy/scheduler-standalone/ runs it (``kso scheduler --name kso --identity NAME``, leader
election on the Lease kso-system/kso-standalone-scheduler) with a token of its ServiceAccount, whose RBAC is exactly
deploy/scheduler-standalone/rbac.yaml, capacity-rbac.yaml and the Role of deploy/capacity.yaml: the tests also
prove those rules are enough. A kube-scheduler of the default profile runs, as a cluster's own scheduler would; no
scheduler serves the placeholders. Every node is "hot" by its annotations, so the safe agent refuses the pod
everywhere; the form the cluster-autoscaler reads is the placeholder's condition PodScheduled=False, reason
Unschedulable, which kso writes. Only the replica holding the scheduler's Lease judges pods, so only it keeps
placeholders. The start-time checks (a Lease the RBAC does not grant, bad names) run here too.

The times measured are printed (pytest -s) and asserted against the aims: 2 minutes each, and the stated bound
after a kill (KSO_CAPACITY_LEASE_S + KSO_CAPACITY_INTERVAL_S, once another replica leads).
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from benchmarks.e2e import ExtenderProcess, delete_nodes, pod_manifest
from benchmarks.prometheus_text import metric_sum, parse_metrics
from kso.core.capacity import HOLDER
from tests.support.capacity_plane import (
    AIM_S,
    DEFAULT_PROFILE,
    NS,
    apply_deploy,
    capacity_appears,
    hot_nodes,
    kill,
    new_namespace,
    placeholders,
    service_account_kubeconfig,
    signal_for,
)
from tests.support.fixtures import started_control_plane, until

DEPLOY_FILES = ("namespace.yaml", "capacity.yaml", "scheduler-standalone/rbac.yaml",
                "scheduler-standalone/capacity-rbac.yaml")
ACCOUNT = ("kso-system", "kso-standalone-scheduler")
LEASE = "kso-system/kso-standalone-scheduler"  # deploy/scheduler-standalone/deployment.yaml
SCHEDULER = "kso"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """A control plane of this module's own (every node must be hot; the capacity objects are cluster-wide), with
    the garbage collector, deploy/'s objects, kube-scheduler's default profile for the placeholders, and kso
    scheduler's ServiceAccount kubeconfig."""
    with started_control_plane() as cp:
        cp.start_controller_manager()
        apply_deploy(cp.api_client(), DEPLOY_FILES)
        kubeconfig = service_account_kubeconfig(cp, tmp_path_factory.mktemp("sa") / "kubeconfig", ACCOUNT)
        cp.start_scheduler(DEFAULT_PROFILE, name="default-scheduler")
        yield cp, kubeconfig


def start_kso_scheduler(kubeconfig: Path, log: Path, identity: str, **env: str) -> ExtenderProcess:
    """``kso scheduler`` as deploy/scheduler-standalone/ starts it, its debug port (QoS table, /metrics, /healthz)
    on 127.0.0.1."""
    e = {**os.environ, "PYTHONUNBUFFERED": "1", "KUBECONFIG": str(kubeconfig), "LOG_LEVEL": "INFO",
         "KSO_SCHEDULER_LEASE": LEASE, "KSO_CAPACITY_SIGNAL": "true", "KSO_SAFE_MAX_HOLD_S": "inf", **env}
    e.pop("KSO_CLUSTER_SOURCE", None)
    root = Path(__file__).resolve().parents[2]
    e["PYTHONPATH"] = os.pathsep.join([str(root), *([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])])
    argv = [os.environ.get("PYTHON", "python3"), "-m", "kso.cli", "scheduler", "--name", SCHEDULER,
            "--identity", identity, "--debug-address"]
    return ExtenderProcess(argv, e, log, ready_path="/healthz", cwd=root).start()


def metrics(kso: ExtenderProcess) -> Any:
    with urllib.request.urlopen(f"{kso.url}/metrics", timeout=10) as resp:
        return parse_metrics(resp.read().decode())


def leading(kso: ExtenderProcess) -> bool:
    return metric_sum(metrics(kso), "kso_scheduler_leader") == 1


def capacity_leases(api: Any) -> set[str]:
    return {lease.metadata.name for lease in client.CoordinationV1Api(api).list_namespaced_lease(NS).items}


def test_the_signal_appears_when_every_node_is_hot_and_goes_when_capacity_appears(plane: tuple[Any, Path],
                                                                                   tmp_path: Path) -> None:
    """A pod kso scheduler refuses on every node gets an Unschedulable placeholder; a new node (what the autoscaler
    adds) takes the pod, and the placeholder is deleted (it is never bound). A stopped kso
    scheduler (SIGTERM) deletes its placeholders and its capacity Lease."""
    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "sched-capacity")
    nodes = hot_nodes(api, "sc")
    kso = start_kso_scheduler(kubeconfig, tmp_path / "kso.log", "sched-ca")
    try:
        t0 = time.monotonic()
        core.create_namespaced_pod(ns, pod_manifest("api", cpu="1", memory="1Gi", scheduler=SCHEDULER))
        [ph] = until(lambda: signal_for(core, f"{ns}/api"), AIM_S, "a placeholder kube-scheduler finds Unschedulable")
        appear = time.monotonic() - t0
        assert not core.read_namespaced_pod("api", ns).spec.node_name, "kso scheduler refused the pod on every node"
        assert ph.metadata.labels[HOLDER] == "sched-ca", "the identity is the one kso scheduler was started with"
        spec = ph.spec
        assert spec.priority == -10 and spec.preemption_policy == "Never"
        assert spec.scheduler_name == "kso-capacity-no-scheduler" and not spec.node_name, "no scheduler serves it"
        [term] = spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        [excluded] = term.match_expressions
        assert excluded.key == "kubernetes.io/hostname" and excluded.operator == "NotIn"
        assert set(nodes) <= set(excluded.values), "every node there is excluded"
        assert spec.containers[0].resources.requests == {"cpu": "1", "memory": str(2**30)}
        assert ph.metadata.owner_references[0].kind == "Lease"
        scrape = metrics(kso)
        assert metric_sum(scrape, "kso_capacity_placeholders") == 1 == metric_sum(scrape, "kso_capacity_refused_pods")
        assert metric_sum(scrape, "kso_capacity_hot_nodes") == len(nodes)
        nodes.append("sc-new")
        gone, deleted = capacity_appears(api, ns, "api", "sc-new", "sched-ca")
        print(f"\nkso scheduler, capacity appears: signal appeared {appear:.1f} s after the pod was created; no longer "
              f"unschedulable {gone:.1f} s after the node was added, deleted {deleted:.1f} s after (2-core machine, "
              f"shared)")
        # the signal again (a second refused pod), then a clean stop
        core.create_namespaced_pod(ns, pod_manifest("big", cpu="3500m", memory="1Gi", scheduler=SCHEDULER))
        until(lambda: signal_for(core, f"{ns}/big"), AIM_S, "a placeholder for the pod no node takes")
    finally:
        kso.stop()
        delete_nodes(api, nodes)
    assert not placeholders(core), "kso scheduler deletes its placeholders when it stops"
    assert "kso-capacity-sched-ca" not in capacity_leases(api), "and its capacity Lease"
    assert appear < AIM_S and gone < AIM_S and deleted < AIM_S


def test_only_the_leader_keeps_placeholders_and_a_killed_leader_leaves_nothing_past_the_bound(
        plane: tuple[Any, Path], tmp_path: Path) -> None:
    """Two replicas: the standby judges no pod and writes nothing. SIGKILL the leader (no clean-up): the standby
    takes the scheduler's Lease, shows the refused demand again under its own identity, and deletes the killed
    one's placeholders once its capacity Lease has expired (the bound: KSO_CAPACITY_LEASE_S +
    KSO_CAPACITY_INTERVAL_S after the kill)."""
    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "sched-killed")
    nodes = hot_nodes(api, "sk")
    lease_s, interval_s = 20.0, 10.0
    env = {"KSO_CAPACITY_LEASE_S": f"{lease_s:g}", "KSO_CAPACITY_INTERVAL_S": f"{interval_s:g}",
           "KSO_SCHEDULER_LEASE_DURATION_S": "6", "KSO_SCHEDULER_RENEW_DEADLINE_S": "4",
           "KSO_SCHEDULER_RETRY_PERIOD_S": "1"}
    a = start_kso_scheduler(kubeconfig, tmp_path / "a.log", "sched-a", **env)
    b = None
    try:
        until(lambda: leading(a), 60, "sched-a leads")
        b = start_kso_scheduler(kubeconfig, tmp_path / "b.log", "sched-b", **env)
        core.create_namespaced_pod(ns, pod_manifest("db", cpu="500m", memory="512Mi", scheduler=SCHEDULER))
        until(lambda: signal_for(core, f"{ns}/db"), AIM_S, "a placeholder")
        assert not leading(b)
        assert {p.metadata.labels[HOLDER] for p in placeholders(core)} == {"sched-a"}, "only the leader writes"
        assert "kso-capacity-sched-b" not in capacity_leases(api), "the standby has no capacity Lease"
        assert metric_sum(metrics(b), "kso_capacity_refused_pods") == 0, "the standby judged no pod"
        left = {p.metadata.name for p in placeholders(core, "sched-a")}
        kill(a.proc)
        t0 = time.monotonic()
        time.sleep(2)
        assert {p.metadata.name for p in placeholders(core, "sched-a")} == left, "SIGKILL cleans nothing up"
        until(lambda: not placeholders(core, "sched-a"), lease_s + interval_s + 30, "reaped after the Lease expired")
        reaped = time.monotonic() - t0
        assert "kso-capacity-sched-a" not in capacity_leases(api), "the expired Lease is deleted"
        until(lambda: {p.metadata.labels[HOLDER] for p in signal_for(core, f"{ns}/db")} == {"sched-b"}, AIM_S,
              "the new leader shows the refused demand")
        taken_over = time.monotonic() - t0
        assert not core.read_namespaced_pod("db", ns).spec.node_name
        print(f"\nkso scheduler killed: the killed leader's placeholders reaped {reaped:.1f} s after SIGKILL (bound "
              f"{lease_s + interval_s:g} s), the new leader's own shown {taken_over:.1f} s after (2-core machine, "
              f"shared)")
        assert reaped <= lease_s + interval_s + 15
    finally:
        a.stop()
        if b is not None:
            b.stop()
        delete_nodes(api, nodes)
    assert not placeholders(core), "the stopped leader deleted its own"


def _run_kso(kubeconfig: Path, *args: str, timeout: float = 60, **env: str) -> Any:
    import subprocess

    e = {**os.environ, "KUBECONFIG": str(kubeconfig), "KSO_CAPACITY_SIGNAL": "true", **env}
    e.pop("KSO_CLUSTER_SOURCE", None)
    root = Path(__file__).resolve().parents[2]
    e["PYTHONPATH"] = os.pathsep.join([str(root), *([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])])
    return subprocess.run([os.environ.get("PYTHON", "python3"), "-m", "kso.cli", *args], env=e, cwd=root,
                          capture_output=True, text=True, timeout=timeout)


def test_bad_names_and_a_lease_the_rbac_does_not_grant_fail_at_start(plane: tuple[Any, Path]) -> None:
    """kso scheduler as its ServiceAccount: the default KSO_SCHEDULER_LEASE (kube-system/kso-scheduler), which
    deploy/scheduler-standalone/rbac.yaml does not grant, is refused before anything runs (the API server's own
    authorizer is asked), as are `--name ""` and a capacity namespace that is not a DNS label: one line, exit 2,
    no traceback."""
    _, kubeconfig = plane
    cases = [
        (("scheduler", "--name", SCHEDULER), {}, "KSO_SCHEDULER_LEASE='kube-system/kso-scheduler': this identity may "
                                                 "not get, create, update that Lease"),
        (("scheduler", "--name", ""), {"KSO_SCHEDULER_LEASE": LEASE}, "--name '': empty"),
        (("scheduler", "--name", SCHEDULER), {"KSO_SCHEDULER_LEASE": LEASE, "KSO_CAPACITY_NAMESPACE": "Bad_NS"},
         "KSO_CAPACITY_NAMESPACE='Bad_NS' (environment): not an RFC 1123 DNS label"),
    ]
    for argv, env, said in cases:
        t0 = time.monotonic()
        done = _run_kso(kubeconfig, *argv, **env)
        assert done.returncode == 2, (argv, env, done.returncode, done.stderr[-2000:])
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
        print(f"\n{' '.join(argv)} {env}: exit 2 in {time.monotonic() - t0:.1f} s: {done.stderr.strip()[-300:]}")


def test_a_lease_refused_after_start_is_logged_once(plane: tuple[Any, Path], tmp_path: Path) -> None:
    """The Lease check passes at start, then the Role granting the Lease is removed (a real 403 from the API
    server's authorizer): kso scheduler says so on its log, once, instead of retrying silently."""
    from kubernetes.client import RbacAuthorizationV1Api

    cp, kubeconfig = plane
    rbac = RbacAuthorizationV1Api(cp.api_client())
    kso = start_kso_scheduler(kubeconfig, tmp_path / "kso.log", "kso-403", KSO_CAPACITY_SIGNAL="false")
    role = rbac.read_namespaced_role("kso-standalone-scheduler", "kso-system")
    try:
        until(lambda: "holds the lease" in (tmp_path / "kso.log").read_text(), AIM_S, "kso scheduler leads")
        rbac.delete_namespaced_role("kso-standalone-scheduler", "kso-system")
        said = "the API server refused to get the Lease kso-system/kso-standalone-scheduler (403)"
        until(lambda: said in (tmp_path / "kso.log").read_text(), AIM_S, "the refused renewal logged")
        time.sleep(6)  # more renewals (retry period 2 s) are refused meanwhile
        text = (tmp_path / "kso.log").read_text()
        assert text.count("the API server refused to get the Lease") == 1, text[-3000:]
    finally:
        kso.stop()
        body = client.ApiClient().sanitize_for_serialization(role)
        body["metadata"] = {"name": "kso-standalone-scheduler", "namespace": "kso-system"}
        rbac.create_namespaced_role("kso-system", body)
