"""The capacity signal of ``kso extender`` on the real control plane (kube-apiserver, kube-scheduler and
kube-controller-manager v1.36.2, etcd; no kubelet).

kso runs as README says, but as the deploy/ ServiceAccount (a token of kso-system/kso-scheduler with exactly the
RBAC of deploy/namespace.yaml, scheduler-rbac.yaml, extender-rbac.yaml and capacity.yaml), so the tests also prove
those rules are enough and that kso cannot create pods elsewhere. kube-scheduler runs deploy/'s configuration
(profile kso-scheduler, kso as extender) and a second kube-scheduler runs the default profile, which schedules the
placeholders as a cluster's own scheduler would. kso's settings are the product defaults (interval 10 s, hot at
least 60 s, exit at 0.8 eps) except the Lease in the kill test. Every node is "hot" by its annotations (cpu ~97%
used against U* 90%), so kso refuses the pod everywhere; the form the cluster-autoscaler reads is kube-scheduler's
own verdict on the placeholder: PodScheduled=False, reason Unschedulable.

The times measured (creation -> signal, change -> signal gone, kill -> clean) are printed (pytest -s) and asserted
against the aims: 2 minutes each, and the stated bound after a kill.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from benchmarks.e2e import ExtenderProcess, delete_nodes, pod_manifest, scheduler_config
from benchmarks.prometheus_text import metric_sum, parse_metrics
from kso.core.capacity import CapacityReconciler, CapacitySettings, PlaceholderSpec
from kso.core.kube import load_api_client
from tests.support.capacity_plane import (
    AIM_S,
    COOL,
    DEFAULT_PROFILE,
    NS,
    apply_deploy,
    capacity_appears,
    hot_nodes,
    kill,
    new_namespace,
    placeholders,
    service_account_kubeconfig,
    set_annotations,
    signal_for,
)
from tests.support.fixtures import started_control_plane, until

DEPLOY_FILES = ("namespace.yaml", "capacity.yaml", "scheduler-rbac.yaml", "extender-rbac.yaml")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """A control plane of this module's own (the capacity objects are cluster-wide: PriorityClass, namespace), with
    the garbage collector, deploy/'s objects, and kso's ServiceAccount kubeconfig."""
    with started_control_plane() as cp:
        cp.start_controller_manager()
        apply_deploy(cp.api_client(), DEPLOY_FILES)
        kubeconfig = service_account_kubeconfig(cp, tmp_path_factory.mktemp("sa") / "kubeconfig")
        yield cp, kubeconfig


def start_kso(kubeconfig: Path, log: Path, **env: str) -> ExtenderProcess:
    e = {**os.environ, "PYTHONUNBUFFERED": "1", "KUBECONFIG": str(kubeconfig), "LOG_LEVEL": "INFO",
         "KSO_HOST": "127.0.0.1", "KSO_CAPACITY_SIGNAL": "true", "KSO_SAFE_MAX_HOLD_S": "inf", **env}
    e.pop("KSO_CLUSTER_SOURCE", None)
    root = Path(__file__).resolve().parents[2]
    e["PYTHONPATH"] = os.pathsep.join([str(root), *([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])])
    return ExtenderProcess([os.environ.get("PYTHON", "python3"), "-m", "kso.cli", "extender", "--port"], e, log,
                           cwd=root).start()


@pytest.fixture
def schedulers(plane: tuple[Any, Path]) -> Iterator[Any]:
    """``point(kso_url)``: (re)start kube-scheduler with deploy/'s configuration and kso at ``kso_url``, and a
    kube-scheduler of the default profile (the cluster's own, for the placeholders)."""
    cp, _ = plane
    running: list[Any] = []

    def point(kso_url: str) -> None:
        while running:
            cp.stop_component(running.pop())
        running.append(cp.start_scheduler(scheduler_config(kso_url, bind=True), name="kso-scheduler"))
        running.append(cp.start_scheduler(DEFAULT_PROFILE, name="default-scheduler"))

    yield point
    while running:
        cp.stop_component(running.pop())


def test_the_signal_appears_when_every_node_is_hot_and_goes_when_load_falls(
        plane: tuple[Any, Path], schedulers: Any, tmp_path: Path) -> None:
    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "load-falls")
    nodes = hot_nodes(api, "lf")
    kso = start_kso(kubeconfig, tmp_path / "kso.log", KSO_CAPACITY_IDENTITY="kso-lf")
    try:
        schedulers(kso.url)
        t0 = time.monotonic()
        core.create_namespaced_pod(ns, pod_manifest("web", cpu="500m", memory="512Mi"))
        [ph] = until(lambda: signal_for(core, f"{ns}/web"), AIM_S, "a placeholder kube-scheduler finds Unschedulable")
        appear = time.monotonic() - t0
        pod = core.read_namespaced_pod("web", ns)
        assert not pod.spec.node_name, "kso refused the pod on every node"
        spec = ph.spec
        assert spec.priority == -10 and spec.preemption_policy == "Never"
        [term] = spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        assert sorted(v for f in term.match_fields for v in f.values) == sorted(nodes)
        assert spec.containers[0].resources.requests == {"cpu": "500m", "memory": str(512 * 2**20)}
        assert ph.metadata.owner_references[0].kind == "Lease"
        scrape = parse_metrics(kso.get("/metrics"))
        assert metric_sum(scrape, "kso_capacity_placeholders") == 1 == metric_sum(scrape, "kso_capacity_refused_pods")
        assert metric_sum(scrape, "kso_capacity_hot_nodes") == len(nodes)
        assert metric_sum(scrape, "kso_capacity_placeholder_writes_total", action="created") == 1
        t1 = time.monotonic()
        set_annotations(core, nodes, COOL)
        until(lambda: not placeholders(core, "kso-lf"), AIM_S, "the placeholder deleted after load fell")
        gone = time.monotonic() - t1
        print(f"\nload falls: signal appeared {appear:.1f} s after the pod was created, gone {gone:.1f} s after the "
              f"load fell (2-core machine, shared)")
        until(lambda: core.read_namespaced_pod("web", ns).spec.node_name, AIM_S, "the pod bound once load fell")
    finally:
        kso.stop()
        delete_nodes(api, nodes)
    assert not placeholders(core), "kso deletes its placeholders when it stops"
    assert appear < AIM_S and gone < AIM_S


def test_the_signal_goes_when_load_falls_while_the_pod_still_waits(plane: tuple[Any, Path], schedulers: Any,
                                                                    tmp_path: Path) -> None:
    """kso's own judgement, not the pod's bind, removes the signal: kube-scheduler (kso's profile) stops after the
    placeholder appears, so the refused pod stays pending, and the load falls. The nodes cool once their risk is
    below 0.8 eps and they have not been above eps for KSO_CAPACITY_MIN_HOT_S (60 s): the placeholder goes then."""
    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "still-waits")
    nodes = hot_nodes(api, "sw")
    kso = start_kso(kubeconfig, tmp_path / "kso.log", KSO_CAPACITY_IDENTITY="kso-sw")
    try:
        schedulers(kso.url)
        core.create_namespaced_pod(ns, pod_manifest("batch", cpu="500m", memory="512Mi"))
        until(lambda: signal_for(core, f"{ns}/batch"), AIM_S, "a placeholder kube-scheduler finds Unschedulable")
        for comp in [c for c in cp.components if c.name.startswith("kso-scheduler")]:
            cp.stop_component(comp)
        t1 = time.monotonic()
        set_annotations(core, nodes, COOL)
        time.sleep(30)
        assert placeholders(core, "kso-sw"), "hysteresis: a node cools no sooner than 60 s after it was last hot"
        until(lambda: not placeholders(core, "kso-sw"), AIM_S, "the placeholder deleted once the nodes cooled")
        gone = time.monotonic() - t1
        assert not core.read_namespaced_pod("batch", ns).spec.node_name, "the pod still waits"
        print(f"\nload falls, pod still pending: signal gone {gone:.1f} s after the load fell (hysteresis 60 s; "
              f"2-core machine, shared)")
    finally:
        kso.stop()
        delete_nodes(api, nodes)
    assert gone < AIM_S


def test_the_signal_goes_when_capacity_appears(plane: tuple[Any, Path], schedulers: Any, tmp_path: Path) -> None:
    """A new node (what the autoscaler adds): the placeholder is no longer unschedulable (kube-scheduler places it
    there), the refused pod lands there too, and the placeholder is deleted."""
    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "capacity-appears")
    nodes = hot_nodes(api, "ca")
    kso = start_kso(kubeconfig, tmp_path / "kso.log", KSO_CAPACITY_IDENTITY="kso-ca")
    try:
        schedulers(kso.url)
        t0 = time.monotonic()
        core.create_namespaced_pod(ns, pod_manifest("api", cpu="1", memory="1Gi"))
        until(lambda: signal_for(core, f"{ns}/api"), AIM_S, "a placeholder kube-scheduler finds Unschedulable")
        appear = time.monotonic() - t0
        nodes.append("ca-new")
        gone, deleted = capacity_appears(api, ns, "api", "ca-new", "kso-ca")
        print(f"\ncapacity appears: signal appeared {appear:.1f} s after the pod was created; no longer unschedulable "
              f"{gone:.1f} s after the node was added, deleted {deleted:.1f} s after (2-core machine, shared)")
    finally:
        kso.stop()
        delete_nodes(api, nodes)
    assert appear < AIM_S and gone < AIM_S and deleted < AIM_S


def test_a_killed_kso_leaves_nothing_past_the_bound(plane: tuple[Any, Path], schedulers: Any, tmp_path: Path) -> None:
    """SIGKILL (no clean-up): its placeholders stay until (1) another running kso deletes them once the killed one's
    Lease has expired (the bound: KSO_CAPACITY_LEASE_S + KSO_CAPACITY_INTERVAL_S), or (2) a kso started with the
    killed one's identity (a restarted container: the pod's name) deletes them when it starts."""
    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "killed")
    nodes = hot_nodes(api, "kill")
    lease_s, interval_s = 20.0, 10.0
    env = {"KSO_CAPACITY_LEASE_S": f"{lease_s:g}", "KSO_CAPACITY_INTERVAL_S": f"{interval_s:g}"}
    other = start_kso(kubeconfig, tmp_path / "other.log", KSO_CAPACITY_IDENTITY="kso-other", **env)
    kso = start_kso(kubeconfig, tmp_path / "a.log", KSO_CAPACITY_IDENTITY="kso-a", **env)
    try:
        schedulers(kso.url)
        core.create_namespaced_pod(ns, pod_manifest("db", cpu="500m", memory="512Mi"))
        until(lambda: signal_for(core, f"{ns}/db"), AIM_S, "a placeholder")
        # (1) killed; the other kso (kube-scheduler does not call it: no refusals of its own) reaps
        kill(kso.proc)
        t0 = time.monotonic()
        time.sleep(2)
        assert placeholders(core, "kso-a"), "SIGKILL cleans nothing up"
        until(lambda: not placeholders(core, "kso-a"), lease_s + interval_s + 30, "reaped after the Lease expired")
        reaped = time.monotonic() - t0
        leases = client.CoordinationV1Api(api).list_namespaced_lease(NS).items
        assert "kso-capacity-kso-a" not in {lease.metadata.name for lease in leases}, "the expired Lease is deleted"
        # (2) the placeholder again, then a kill and a restart with the same identity
        kso = start_kso(kubeconfig, tmp_path / "a2.log", KSO_CAPACITY_IDENTITY="kso-a", **env)
        schedulers(kso.url)
        until(lambda: signal_for(core, f"{ns}/db"), AIM_S, "a placeholder again")
        left = {p.metadata.name for p in placeholders(core, "kso-a")}
        kill(kso.proc)
        t1 = time.monotonic()
        kso = start_kso(kubeconfig, tmp_path / "a3.log", KSO_CAPACITY_IDENTITY="kso-a", **env)
        until(lambda: not left & {p.metadata.name for p in placeholders(core, "kso-a")}, 60,
              "the killed kso's placeholders deleted by its restart")
        restarted = time.monotonic() - t1
        print(f"\nkilled kso: reaped by another kso {reaped:.1f} s after SIGKILL (bound {lease_s + interval_s:g} s); "
              f"deleted by a restarted kso {restarted:.1f} s after SIGKILL, its start included (2-core machine, shared)")
        assert reaped <= lease_s + interval_s + 15
    finally:
        kso.stop()
        other.stop()
        delete_nodes(api, nodes)


def test_deleting_a_lease_lets_the_garbage_collector_delete_its_placeholders(plane: tuple[Any, Path]) -> None:
    """The owner reference: kube-controller-manager's garbage collector deletes the placeholders of a deleted Lease
    (as when the namespace or kso's objects are removed with kso down)."""
    cp, kubeconfig = plane
    rec = CapacityReconciler(load_api_client(str(kubeconfig)), CapacitySettings(enabled=True, identity="kso-gc"))
    core = client.CoreV1Api(cp.api_client())
    spec = PlaceholderSpec("uid-gc", "team-a/gc-0", (("cpu", 100.0), ("memory", 2.0**27)), ("nowhere",))
    assert rec.apply([spec]).created == [spec.name()]
    assert placeholders(core, "kso-gc")[0].metadata.owner_references[0].uid == rec.owner.lease_uid
    t0 = time.monotonic()
    client.CoordinationV1Api(cp.api_client()).delete_namespaced_lease(rec.owner.lease_name, NS)
    until(lambda: not placeholders(core, "kso-gc"), AIM_S, "the garbage collector deleted the Lease's placeholder")
    print(f"\nLease deleted: its placeholder collected {time.monotonic() - t0:.1f} s later")


def test_kso_may_write_pods_only_in_its_capacity_namespace(plane: tuple[Any, Path]) -> None:
    """deploy/'s RBAC: the ServiceAccount creates and deletes placeholders in kso-capacity, nowhere else."""
    cp, kubeconfig = plane
    core = client.CoreV1Api(load_api_client(str(kubeconfig)))
    body = pod_manifest("probe", scheduler="default-scheduler")
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("default", body)
    assert exc.value.status == 403
    with pytest.raises(ApiException) as exc:
        core.patch_node("any", {"metadata": {"labels": {"x": "y"}}})
    assert exc.value.status == 403
