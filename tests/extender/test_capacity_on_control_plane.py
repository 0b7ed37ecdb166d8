"""The capacity signal of ``kso extender`` on the real control plane (kube-apiserver, kube-scheduler and
kube-controller-manager v1.36.2, etcd; no kubelet).

kso runs as README says, but as the deploy/ ServiceAccount (a token of kso-system/kso-scheduler with exactly the
RBAC of deploy/namespace.yaml, scheduler-rbac.yaml, extender-rbac.yaml and capacity.yaml), so the tests also prove
those rules are enough and that kso cannot create pods elsewhere. kube-scheduler runs deploy/'s configuration
(profile kso-scheduler, kso as extender) and a second kube-scheduler runs the default profile, as a cluster's own
scheduler would: no scheduler serves the placeholders, and it must never bind one. kso's settings are the product
defaults (interval 10 s, hot at least 60 s, exit at 0.8 eps) except the Lease in the kill test. Every node is
"hot" by its annotations (cpu ~97% used against U* 90%), so kso refuses the pod everywhere; the form the
cluster-autoscaler reads is the placeholder's condition PodScheduled=False, reason Unschedulable, which kso writes.

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

from benchmarks.e2e import ExtenderProcess, create_nodes, delete_nodes, node_manifest, pod_manifest, scheduler_config
from benchmarks.prometheus_text import metric_sum, parse_metrics
from kso.core.capacity import CapacityReconciler, CapacitySettings, PlaceholderSpec
from kso.core.kube import load_api_client
from tests.support.capacity_plane import (
    AIM_S,
    COOL,
    DEFAULT_PROFILE,
    HOT,
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
    from benchmarks.controlplane import CONTROLLERS

    with started_control_plane() as cp:
        # capacity.yaml's quota is enforced too, and PersistentVolumeClaims are bound
        cp.start_controller_manager(f"{CONTROLLERS},resourcequota,persistentvolume-binder")
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
        [excluded] = term.match_expressions
        assert excluded.key == "kubernetes.io/hostname" and excluded.operator == "NotIn"
        assert set(nodes) <= set(excluded.values), "every node there is, the hot ones included, is excluded"
        assert not spec.node_name and spec.scheduler_name == "kso-capacity-no-scheduler"
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


def _bound_pod(name: str, node: str, labels: dict[str, str] | None = None, host_port: int = 0) -> dict[str, Any]:
    """A pod already running on ``node`` (spec.nodeName: no scheduler involved), what kube-scheduler filters on."""
    body = pod_manifest(name, cpu="10m", memory="16Mi", labels=labels)
    body["spec"]["nodeName"] = node
    if host_port:
        body["spec"]["containers"][0]["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    return body


def _refused_pods() -> dict[str, dict[str, Any]]:
    """A pod for each reason kube-scheduler removes nodes that kso's placeholder does not copy, and the resources
    that need limits: hostPort (nb-0 holds the port), required anti-affinity to its own kind (nb-1 holds one), topology
    spread (nb-2 holds one, maxSkew 1), an extended resource, hugepages, and a claim on a volume only nb-1 reaches
    (``_volume_on``)."""
    port = pod_manifest("hostport", cpu="200m", memory="128Mi")
    port["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    anti = pod_manifest("spread-1", cpu="200m", memory="128Mi", labels={"app": "spread"})
    anti["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    topo = pod_manifest("ts-1", cpu="200m", memory="128Mi", labels={"app": "ts"})
    topo["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                  "whenUnsatisfiable": "DoNotSchedule",
                                                  "labelSelector": {"matchLabels": {"app": "ts"}}}]
    gpu = pod_manifest("gpu", cpu="200m", memory="128Mi")
    gpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "200m", "memory": "128Mi", "nvidia.com/gpu": "1"},
                                                 "limits": {"nvidia.com/gpu": "1"}}
    huge = pod_manifest("huge", cpu="200m", memory="128Mi")
    huge["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "200m", "memory": "128Mi", "hugepages-2Mi": "4Mi"},
                                                  "limits": {"memory": "128Mi", "hugepages-2Mi": "4Mi"}}
    pvc = pod_manifest("pvc", cpu="200m", memory="128Mi")
    pvc["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    pvc["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return {p["metadata"]["name"]: p for p in (port, anti, topo, gpu, huge, pvc)}


def _volume_on(api: Any, ns: str, node: str) -> None:
    """PersistentVolumeClaim ``data`` in ``ns``, bound (by kube-controller-manager) to a local PersistentVolume only
    ``node`` can reach: kube-scheduler offers the pod using it that node alone."""
    core = client.CoreV1Api(api)
    core.create_persistent_volume({"metadata": {"name": f"{ns}-pv"}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "kso-local",
        "persistentVolumeReclaimPolicy": "Retain", "local": {"path": "/mnt/data"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}})
    core.create_namespaced_persistent_volume_claim(ns, {"metadata": {"name": "data"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "kso-local", "resources": {"requests": {"storage": "1Gi"}}}})
    until(lambda: core.read_namespaced_persistent_volume_claim("data", ns).status.phase == "Bound", AIM_S,
          "the claim bound to the local volume")


def test_no_placeholder_is_ever_bound_and_each_refused_pod_has_exactly_one(plane: tuple[Any, Path], schedulers: Any,
                                                                            tmp_path: Path) -> None:
    """Issue 37's cases on the real control plane, kso as shipped (the placeholders' schedulerName is one no scheduler
    serves) with a default-scheduler running beside it all along: pods refused for a hostPort, self anti-affinity,
    topology spread, a volume only one node reaches (kube-scheduler removed a node kso's placeholder used to fit),
    an extended resource and hugepages (the API server used to answer 422), then a node added while they wait (hot
    too: kso refuses them there, so each placeholder is remade excluding it). A watch on kso-capacity sees every
    placeholder event: none is ever bound, no pod ever has two."""
    from tests.support.capacity_plane import PlaceholderWatch, add_node_kso_knows, with_allocatable

    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "never-bound")
    extra = {"nvidia.com/gpu": "4", "hugepages-2Mi": "1Gi"}
    nodes = [f"nb-{i}" for i in range(3)]
    create_nodes(api, [with_allocatable(node_manifest(n, "4", "16Gi", annotations=HOT), **extra) for n in nodes])
    watch = PlaceholderWatch(api)
    kso = start_kso(kubeconfig, tmp_path / "kso.log", KSO_CAPACITY_IDENTITY="kso-nb")
    try:
        for body in (_bound_pod("port-0", "nb-0", host_port=8080), _bound_pod("spread-0", "nb-1", {"app": "spread"}),
                     _bound_pod("ts-0", "nb-2", {"app": "ts"})):
            core.create_namespaced_pod(ns, body)
        _volume_on(api, ns, "nb-1")
        schedulers(kso.url)
        pods = _refused_pods()
        t0 = time.monotonic()
        for body in pods.values():
            core.create_namespaced_pod(ns, body)
        for name in pods:
            until(lambda name=name: signal_for(core, f"{ns}/{name}"), AIM_S, f"an Unschedulable placeholder for {name}")
        appear = time.monotonic() - t0
        by_pod = {p.metadata.annotations["kso.io/placeholder-for"]: p for p in placeholders(core)}
        assert set(by_pod) == {f"{ns}/{n}" for n in pods}
        for ph in by_pod.values():
            assert ph.spec.scheduler_name == "kso-capacity-no-scheduler" and not ph.spec.node_name
            [term] = ph.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
            [excl] = [e for e in term.match_expressions if e.key == "kubernetes.io/hostname"]
            assert excl.operator == "NotIn" and set(nodes) <= set(excl.values), "every existing node excluded"
        gpu = by_pod[f"{ns}/gpu"].spec.containers[0].resources
        assert gpu.limits == {"nvidia.com/gpu": "1"} and gpu.requests["nvidia.com/gpu"] == "1"
        assert by_pod[f"{ns}/huge"].spec.containers[0].resources.limits == {"hugepages-2Mi": str(4 * 2**20)}
        # a node added mid-wait, hot as well: kso refuses the pods there too and remakes each placeholder
        nodes.append("nb-new")
        add_node_kso_knows(api, with_allocatable(node_manifest("nb-new", "4", "16Gi", annotations=HOT), **extra))

        def all_exclude_the_new_node() -> bool:
            # (the pod on the volume only nb-1 reaches is never offered nb-new: its placeholder stays as it is)
            current = [p for p in placeholders(core) if p.metadata.annotations["kso.io/placeholder-for"] != f"{ns}/pvc"]
            return len(current) == len(pods) - 1 and all(
                "nb-new" in e.values for p in current
                for t in p.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
                for e in t.match_expressions if e.key == "kubernetes.io/hostname")
        until(all_exclude_the_new_node, AIM_S, "every placeholder remade excluding the node added mid-wait")
        assert len(placeholders(core)) == len(pods)
        time.sleep(5)  # a default-scheduler runs: any placeholder it could bind, it binds within this
        scrape = parse_metrics(kso.get("/metrics"))
        assert metric_sum(scrape, "kso_capacity_placeholders_bound_total") == 0
        assert metric_sum(scrape, "kso_capacity_placeholder_writes_total", action="failed") == 0, "no 422 loop"
        # the load falls: every pod is placed and its placeholder goes
        set_annotations(core, nodes, COOL)
        until(lambda: not placeholders(core, "kso-nb"), AIM_S, "every placeholder gone once the pods were placed")
        print(f"\nnever bound: {len(pods)} placeholders Unschedulable {appear:.1f} s after their pods were created; "
              f"bound to a node at any moment: {len(watch.bound)}; most placeholders for one pod: "
              f"{max(watch.most.values())} (2-core machine, shared)")
    finally:
        watch.stop()
        kso.stop()
        delete_nodes(api, nodes)
    assert watch.bound == {}, f"placeholders bound: {watch.bound}"
    assert set(watch.most) == {f"{ns}/{n}" for n in pods} and max(watch.most.values()) == 1, watch.most


def test_a_placeholder_excluding_5000_nodes_is_within_the_api_servers_limits(plane: tuple[Any, Path]) -> None:
    """The exclusion at 5,000 nodes with 43-character hostnames (GKE's shape): one ``kubernetes.io/hostname NotIn``
    of 5,000 values. Its Pod is ~231 KB of JSON: created by kso's ServiceAccount on the real API server, well within
    the API server's 3 MiB request body and etcd's 1.5 MiB request limit (a ``metadata.name`` requirement per node,
    the API server's only form for node fields, would be ~501 KB)."""
    import json

    from kso.core.capacity import placeholder_manifest

    cp, kubeconfig = plane
    rec = CapacityReconciler(load_api_client(str(kubeconfig)), CapacitySettings(enabled=True, identity="kso-5k"))
    core = client.CoreV1Api(cp.api_client())
    names = [f"gke-prod-cluster-default-pool-{i:08x}-abcd" for i in range(5000)]
    spec = PlaceholderSpec("uid-5k", "team-a/big-0", (("cpu", 100.0), ("memory", 2.0**27)), tuple(names[:3]),
                           exclude=tuple((n, n) for n in names))
    rec.renew()
    size = len(json.dumps(placeholder_manifest(spec, rec.settings, rec.owner), separators=(",", ":")))
    t0 = time.monotonic()
    try:
        assert rec.apply([spec]).created == [spec.name()]
        took = time.monotonic() - t0
        [ph] = placeholders(core, "kso-5k")
        [term] = ph.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        assert len(term.match_expressions[0].values) == 5000
        print(f"\n5,000 nodes excluded: the placeholder is {size / 1000:.0f} KB of JSON, created (and marked "
              f"Unschedulable) in {took:.2f} s")
        assert size < 1.5 * 2**20 / 4, "a quarter of etcd's request limit at most"
    finally:
        rec.clear()


def _shapes(good: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pods of other shapes than kso's placeholder ``good``, one difference each (issue 37's footholds first)."""
    import copy

    def changed(fn: Any) -> dict[str, Any]:
        body = copy.deepcopy(good)
        body["metadata"]["name"] += "-x"
        fn(body)
        return body

    c = lambda b: b["spec"]["containers"][0]  # noqa: E731
    return {
        "another image": changed(lambda b: c(b).update(image="docker.io/library/busybox:1.36")),
        "system-node-critical": changed(lambda b: b["spec"].update(priorityClassName="system-node-critical")),
        "a node name": changed(lambda b: b["spec"].update(nodeName="any-node")),
        "a served scheduler": changed(lambda b: b["spec"].update(schedulerName="default-scheduler")),
        "a hostPath volume": changed(lambda b: (b["spec"].update(volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
                                                c(b).update(volumeMounts=[{"name": "h", "mountPath": "/h"}]))),
        "a host network": changed(lambda b: b["spec"].update(hostNetwork=True)),
        "a command": changed(lambda b: c(b).update(command=["/bin/sh", "-c", "sleep 1d"])),
        "a second container": changed(lambda b: b["spec"]["containers"].append({**c(b), "name": "two"})),
        "no owner (the annotation only)": changed(lambda b: b["metadata"].pop("ownerReferences")),
        "not kso's labels": changed(lambda b: b["metadata"].update(labels={"app": "mine"})),
        "the whole quota": changed(lambda b: c(b)["resources"]["requests"].update(cpu="900")),
    }


def test_the_capacity_namespace_admits_only_placeholders_and_no_binding(plane: tuple[Any, Path]) -> None:
    """deploy/capacity.yaml's ValidatingAdmissionPolicy and ResourceQuota, live on the real API server: kso's
    ServiceAccount creates its placeholder, and is refused every other shape (by the policy, Pod Security or the
    quota); nobody, the cluster admin included, may bind a placeholder."""
    cp, kubeconfig = plane
    rec = CapacityReconciler(load_api_client(str(kubeconfig)), CapacitySettings(enabled=True, identity="kso-vap"))
    sa = client.CoreV1Api(load_api_client(str(kubeconfig)))
    admin = client.CoreV1Api(cp.api_client())
    spec = PlaceholderSpec("uid-vap", "team-a/vap-0", (("cpu", 100.0), ("memory", 2.0**27)), ("nowhere",))
    until(lambda: (admin.read_namespaced_resource_quota("kso-capacity-placeholders", NS).status.hard or {}).get(
        "requests.cpu"), AIM_S, "the quota controller took the quota up")
    try:
        assert rec.apply([spec]).created == [spec.name()], "kso's own placeholder is admitted"
        from kso.core.capacity import placeholder_manifest

        good = placeholder_manifest(spec, rec.settings, rec.owner)
        refused = {}
        admitted = []
        for what, body in _shapes(good).items():
            try:
                sa.create_namespaced_pod(NS, body)
                admitted.append(what)
                continue
            except ApiException as exc:
                assert exc.status in (403, 422), (what, exc.status, exc.body)
                refused[what] = exc.status
                text = exc.body or ""
                assert ("kso-capacity-placeholders" in text or "PodSecurity" in text or "exceeded quota" in text), text
        assert not admitted, f"admitted in kso-capacity: {admitted}"
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": spec.name(), "namespace": NS},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "nowhere"}}
        posts = {  # kube-scheduler's path (client-go's Bind), and the namespace's bindings
            "pods/binding": lambda: admin.create_namespaced_pod_binding(spec.name(), NS, binding),
            "bindings": lambda: admin.create_namespaced_binding(NS, binding, _preload_content=False)}
        for path, post in posts.items():
            with pytest.raises(ApiException) as exc:
                post()
            assert exc.value.status in (403, 422) and "never bound" in exc.value.body, (path, exc.value.body)
        assert not admin.read_namespaced_pod(spec.name(), NS).spec.node_name
        print(f"\nkso-capacity: {len(refused)} other shapes refused to kso's ServiceAccount ({refused}); a Binding "
              f"refused to the cluster admin on both paths ({exc.value.status})")
    finally:
        rec.clear()


def test_two_replicas_and_a_failover_keep_one_placeholder_per_pod(plane: tuple[Any, Path], schedulers: Any,
                                                                  tmp_path: Path) -> None:
    """Two extender replicas (deploy/'s two kube-scheduler pods each have one): kube-scheduler calls A, then fails
    over to B, which refuses the pod as well while A still holds its placeholder. Each kso reconciles against every
    live kso's placeholders: the pod never has two (a watch sees every event), and the one left goes once the pod is
    placed on a node added for it."""
    from tests.support.capacity_plane import PlaceholderWatch, add_node_kso_knows

    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "failover")
    nodes = hot_nodes(api, "fo")
    watch = PlaceholderWatch(api)
    a = start_kso(kubeconfig, tmp_path / "a.log", KSO_CAPACITY_IDENTITY="kso-fo-a")
    b = start_kso(kubeconfig, tmp_path / "b.log", KSO_CAPACITY_IDENTITY="kso-fo-b")
    try:
        schedulers(a.url)
        core.create_namespaced_pod(ns, pod_manifest("web", cpu="500m", memory="512Mi"))
        until(lambda: signal_for(core, f"{ns}/web"), AIM_S, "A's placeholder")
        schedulers(b.url)  # the failover: kube-scheduler now calls B, which refuses the pod too
        # a hot node added now: B refuses the pod there too, so the placeholder B wants excludes it and A's (no
        # longer called) does not: two names for one pod, which used to make two placeholders
        nodes.append("fo-3")
        add_node_kso_knows(api, node_manifest("fo-3", "4", "16Gi", annotations=HOT))
        until(lambda: b_refused(b), AIM_S, "B refused the pod")
        time.sleep(25)  # B's rounds (10 s) while A's placeholder stands
        assert len(placeholders(core)) == 1, [p.metadata.name for p in placeholders(core)]
        nodes.append("fo-new")
        create_nodes(api, [node_manifest("fo-new", "4", "16Gi")])
        until(lambda: core.read_namespaced_pod("web", ns).spec.node_name == "fo-new", AIM_S, "the pod placed")
        until(lambda: not placeholders(core), AIM_S, "no placeholder once the pod was placed")
        print(f"\ntwo replicas, failover: most placeholders for the pod at once {watch.most.get(f'{ns}/web')}, "
              f"bound {len(watch.bound)}")
    finally:
        watch.stop()
        a.stop()
        b.stop()
        delete_nodes(api, nodes)
    assert watch.most == {f"{ns}/web": 1} and watch.bound == {}


def b_refused(kso: ExtenderProcess) -> bool:
    """The kso at ``kso`` has a refused pod of its own (its gauge)."""
    return metric_sum(parse_metrics(kso.get("/metrics")), "kso_capacity_refused_pods") >= 1


def test_a_refused_create_is_backed_off_and_warned_once(plane: tuple[Any, Path],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """The API server refuses a placeholder (here: over capacity.yaml's quota, 403): kso does not try it again every
    round but after its backoff (interval, doubling), and warns once; the other placeholders are made meanwhile."""
    import logging

    cp, kubeconfig = plane
    admin = client.CoreV1Api(cp.api_client())
    until(lambda: (admin.read_namespaced_resource_quota("kso-capacity-placeholders", NS).status.hard or {}).get(
        "requests.cpu"), AIM_S, "the quota controller took the quota up")
    clock = [float(int(time.time()))]  # a whole second: the Lease's MicroTime must still be accepted
    rec = CapacityReconciler(load_api_client(str(kubeconfig)),
                             CapacitySettings(enabled=True, identity="kso-bo", interval_s=10.0), clock=lambda: clock[0])
    big = PlaceholderSpec("uid-bo-big", "team-a/huge-0", (("cpu", 900_000.0), ("memory", 2.0**30)), ("n",))
    small = PlaceholderSpec("uid-bo-small", "team-a/small-0", (("cpu", 100.0), ("memory", 2.0**27)), ("n",))
    try:
        with caplog.at_level(logging.DEBUG, logger="kso.capacity"):
            first = rec.apply([big, small])
            assert first.failed == [big.name()] and first.created == [small.name()]
            clock[0] += 5  # within the backoff (10 s): not tried
            assert rec.apply([big, small]).waiting == [big.name()]
            clock[0] += 6  # past it: tried, refused again, next wait 20 s
            assert rec.apply([big, small]).failed == [big.name()]
            clock[0] += 15
            assert rec.apply([big, small]).waiting == [big.name()]
        said = [r for r in caplog.records if "cannot create the placeholder" in r.getMessage()]
        assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG], [r.getMessage() for r in said]
        assert "exceeded quota" in said[0].getMessage()
    finally:
        rec.clear()


def test_a_placeholder_goes_within_seconds_of_its_pods_bind_not_at_the_next_round(plane: tuple[Any, Path]) -> None:
    """Issue 37's aim (every placeholder gone within 15 s of its pod's bind) at 40 refused pods, with rounds 600 s
    apart: only the prompt release (kso's watch sees the pod bound, the placeholder is deleted between rounds) can
    meet it. kso's pieces in this process, as kso's ServiceAccount: its watch, the decision engine's safe filter
    refusing every pod on the hot nodes, the signal's first round making the placeholders; then each pod is bound
    as kube-scheduler binds (a Binding), and both events are timed as a watch of this test receives them."""
    from prometheus_client import CollectorRegistry

    from benchmarks.capacity_scale import PlaceholderLives, outlived
    from benchmarks.e2e import BindWatch, create_pods, in_parallel
    from decisions.agents.base import Call
    from decisions.capacity import CapacitySignal
    from decisions.engine import DecisionEngine
    from extender.config import load_config
    from kso.core.cluster import ClusterState
    from kso.core.watcher import ClusterWatcher

    cp, kubeconfig = plane
    api, sa = cp.api_client(), load_api_client(str(kubeconfig))
    core = client.CoreV1Api(api)
    ns = new_namespace(core, "release")
    nodes = hot_nodes(api, "rl")
    n = 40
    create_pods(api, ns, [pod_manifest(f"p{i:02d}", cpu="10m", memory="16Mi", scheduler="nobody") for i in range(n)])
    state = ClusterState()
    watcher = ClusterWatcher(state, sa, resync_backoff_s=0.05)
    lives, binds = PlaceholderLives(api), BindWatch(api, ns)
    registry = CollectorRegistry()
    settings = CapacitySettings(enabled=True, identity="kso-rl", interval_s=600.0)
    engine = DecisionEngine(load_config({"KSO_AGENTS": "safe", "KSO_SAFE_MAX_HOLD_S": "inf"}), state)
    signal = CapacitySignal(engine, state, CapacityReconciler(sa, settings), settings, registry=registry)
    watcher.start()
    try:
        def seen() -> list[Any] | None:
            pods = [p for p in state.pending_pods() if p.namespace == ns]
            return pods if len(pods) == n and set(nodes) <= set(state.node_names()) else None

        pending = until(seen, AIM_S, "kso's watch sees the pods and nodes")
        for pod in pending:  # what kube-scheduler's filter call does: the safe agent refuses every hot node
            assert not engine.predicates["safe-overload"](Call(pod, state.view(nodes))).passed.any()
        signal.start()
        until(lambda: lives.alive() == n, AIM_S, f"{n} placeholders from the signal's first round")
        binding = lambda name: core.create_namespaced_pod_binding(  # noqa: E731
            name, ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[int(name[1:]) % len(nodes)]}},
            _preload_content=False)
        in_parallel(binding, [p.name for p in pending])
        until(lambda: len(binds.bound) == n and lives.alive() == 0, AIM_S, "every pod bound, every placeholder gone")
        with lives.lock:
            lags = outlived(dict(lives.lives), {pod: t for pod, (_, t) in binds.bound.items()}, ns)
        released = until(lambda: registry.get_sample_value("kso_capacity_placeholder_writes_total",
                                                           {"action": "released"}) == n and n, 10, "counted")
        rounds = registry.get_sample_value("kso_capacity_rounds_total")
        print(f"\nbind -> placeholder deleted, {n} pods: median {sorted(lags.values())[n // 2]:.2f} s, max "
              f"{max(lags.values()):.2f} s; rounds {rounds:.0f}, released between rounds {released:.0f} "
              f"(2-core machine, shared)")
    finally:
        signal.stop()
        watcher.stop()
        lives.stop()
        binds.stop()
        delete_nodes(api, nodes)
    assert len(lags) == n and max(lags.values()) <= 15.0, lags
    assert rounds == 1 and released == n, "deleted between rounds, not by one"
