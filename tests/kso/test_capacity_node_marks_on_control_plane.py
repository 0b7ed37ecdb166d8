"""The capacity signal's node marks (KSO_CAPACITY_KEEP_NODES) on the real control plane (kube-apiserver v1.36.2,
etcd; no kubelet, no scheduler: the pods are bound by ``spec.nodeName``).

``kso extender`` runs as the deploy/ ServiceAccount with deploy/optional/capacity-node-marks.yaml applied (so the
test also proves that RBAC is enough). Node statistics come from the nodes' annotations: "hot" nodes are ~97% used,
the two "warm" ones 55%, against U* 90%. P (1.5 cores, 37.5% of a 4-core node) runs on 'mk-keep', Q (1.9 cores) on
'mk-theirs': the safe agent refuses each on every other node (hot, or warm plus the pod over 90%), while each fits
there by requests, so the cluster-autoscaler could drain either; kso marks them. 'mk-theirs' already carries
scale-down-disabled=true, set by someone else: kso leaves it alone, then and on stop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from benchmarks.e2e import create_nodes, delete_nodes, node_manifest, pod_manifest
from benchmarks.prometheus_text import metric_sum, parse_metrics
from kso.core.capacity import MARKED_BY, SCALE_DOWN_DISABLED
from tests.extender.test_capacity_on_control_plane import start_kso
from tests.support.capacity_plane import (
    AIM_S,
    COOL,
    HOT,
    apply_deploy,
    kill,
    new_namespace,
    service_account_kubeconfig,
    set_annotations,
)
from tests.support.fixtures import started_control_plane, until

DEPLOY_FILES = ("namespace.yaml", "capacity.yaml", "scheduler-rbac.yaml", "extender-rbac.yaml",
                "optional/capacity-node-marks.yaml")
WARM = {**HOT, "mean-free-cpu": "1800", "forcasted-free-cpu": "1800"}


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    with started_control_plane() as cp:
        apply_deploy(cp.api_client(), DEPLOY_FILES)
        yield cp, service_account_kubeconfig(cp, tmp_path_factory.mktemp("sa") / "kubeconfig")


def marks(core: client.CoreV1Api, name: str) -> tuple[str | None, str | None]:
    ann = core.read_node(name).metadata.annotations or {}
    return ann.get(SCALE_DOWN_DISABLED), ann.get(MARKED_BY)


def marked_pool(api: Any, prefix: str) -> tuple[list[str], list[str]]:
    """The nodes and pods of the module's docstring, names prefixed: (warm nodes [keep, theirs], hot nodes)."""
    core = client.CoreV1Api(api)
    ns = new_namespace(core, f"{prefix}-marks")
    keep, theirs, hot = f"{prefix}-keep", f"{prefix}-theirs", [f"{prefix}-hot-0", f"{prefix}-hot-1"]
    create_nodes(api, [node_manifest(keep, "4", "16Gi", annotations=WARM),
                       node_manifest(theirs, "4", "16Gi", annotations={**WARM, SCALE_DOWN_DISABLED: "true"}),
                       *[node_manifest(n, "4", "16Gi", annotations=HOT) for n in hot]])
    for pod, node, cpu in (("p", keep, "1500m"), ("q", theirs, "1900m")):
        body = pod_manifest(pod, cpu=cpu, memory="512Mi")
        body["spec"]["nodeName"] = node
        core.create_namespaced_pod(ns, body)
    return [keep, theirs], hot


def test_kso_marks_the_nodes_it_needs_unmarks_them_takes_its_marks_off_on_stop_and_leaves_others_alone(
        plane: tuple[Any, Path], tmp_path: Path) -> None:
    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    _, hot = marked_pool(api, "mk")
    kso = start_kso(kubeconfig, tmp_path / "kso.log", KSO_CAPACITY_IDENTITY="kso-mk", KSO_CAPACITY_KEEP_NODES="true",
                    KSO_CAPACITY_KEEP_HOLD_S="0", KSO_CAPACITY_INTERVAL_S="1")
    try:
        t0 = time.monotonic()
        until(lambda: marks(core, "mk-keep") == ("true", "kso-mk"), AIM_S, "mk-keep marked by kso")
        marked = time.monotonic() - t0
        assert marks(core, "mk-theirs") == ("true", None), "someone else's mark is left as it is"
        assert all(marks(core, n) == (None, None) for n in hot), "a node with no pod to move is not marked"
        assert metric_sum(parse_metrics(kso.get("/metrics")), "kso_capacity_kept_nodes") == 2
        # the other nodes cool: P would be placed there, so the mark goes (hold 0) and the cluster can shrink
        t1 = time.monotonic()
        set_annotations(core, hot, COOL)
        until(lambda: marks(core, "mk-keep") == (None, None), AIM_S, "mk-keep unmarked once P fits elsewhere")
        unmarked = time.monotonic() - t1
        assert marks(core, "mk-theirs") == ("true", None)
        set_annotations(core, hot, HOT)
        until(lambda: marks(core, "mk-keep") == ("true", "kso-mk"), AIM_S, "mk-keep marked again")
    finally:
        kso.stop()
    try:
        # a clean stop took kso's marks off and left the other one
        assert marks(core, "mk-keep") == (None, None), "kso takes its marks off when it stops"
        assert marks(core, "mk-theirs") == ("true", None)
        print(f"\nnode marks: marked {marked:.1f} s after kso was ready, unmarked {unmarked:.1f} s after the other "
              f"nodes cooled (interval 1 s; 2-core machine, shared)")
    finally:
        delete_nodes(api, ["mk-keep", "mk-theirs", *hot])


def test_the_marks_of_a_killed_kso_are_taken_off_once_its_lease_expires(plane: tuple[Any, Path],
                                                                         tmp_path: Path) -> None:
    """SIGKILL (no clean-up): the killed kso's mark stays until another running kso finds its Lease expired
    (KSO_CAPACITY_LEASE_S + KSO_CAPACITY_INTERVAL_S) and takes it off; that kso then marks the node as its own."""
    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    (keep, theirs), hot = marked_pool(api, "kl")
    lease_s, interval_s = 10.0, 2.0
    env = {"KSO_CAPACITY_KEEP_NODES": "true", "KSO_CAPACITY_LEASE_S": f"{lease_s:g}",
           "KSO_CAPACITY_INTERVAL_S": f"{interval_s:g}"}
    first = start_kso(kubeconfig, tmp_path / "a.log", KSO_CAPACITY_IDENTITY="kso-ka", **env)
    second = None
    try:
        until(lambda: marks(core, keep) == ("true", "kso-ka"), AIM_S, "marked by the first kso")
        second = start_kso(kubeconfig, tmp_path / "b.log", KSO_CAPACITY_IDENTITY="kso-kb", **env)
        time.sleep(2 * interval_s)
        assert marks(core, keep) == ("true", "kso-ka"), "a live kso's mark is not another kso's to take"
        kill(first.proc)
        t0 = time.monotonic()
        until(lambda: marks(core, keep) == ("true", "kso-kb"), lease_s + interval_s + 30,
              "the killed kso's mark taken off, the node marked by the live one")
        taken = time.monotonic() - t0
        assert marks(core, theirs) == ("true", None)
        print(f"\nkilled kso: its node mark taken over {taken:.1f} s after SIGKILL (bound {lease_s + interval_s:g} s)")
        assert taken <= lease_s + interval_s + 15
    finally:
        if second is not None:
            second.stop()
        first.stop()
    try:
        assert marks(core, keep) == (None, None) and marks(core, theirs) == ("true", None)
    finally:
        delete_nodes(api, [keep, theirs, *hot])


def test_two_installs_leave_each_others_marks_alone_and_take_a_gone_installs_off(plane: tuple[Any, Path],
                                                                                  tmp_path: Path) -> None:
    """Two installs, each with its own KSO_CAPACITY_NAMESPACE (B's: kso-capacity-b, with capacity.yaml's Role bound
    there): B's mark on a node A does not need stays while B's Lease is current (A finds it in B's namespace; it
    used to look in its own only and take B's marks off every round), and goes once that Lease expires. B is kso's
    own reconciler and marker with the ServiceAccount's token, as B's kso would run them."""
    import yaml

    from kso.core.capacity import CapacityReconciler, CapacitySettings
    from kso.core.capacity_marks import NodeMarker
    from kso.core.kube import load_api_client
    from tests.support.capacity_plane import DEPLOY

    cp, kubeconfig = plane
    api = cp.api_client()
    core = client.CoreV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    new_namespace(core, "kso-capacity-b")
    for doc in yaml.safe_load_all((DEPLOY / "capacity.yaml").read_text()):
        if doc and doc["kind"] in ("Role", "RoleBinding"):
            doc["metadata"]["namespace"] = "kso-capacity-b"
            (rbac.create_namespaced_role if doc["kind"] == "Role" else rbac.create_namespaced_role_binding)(
                "kso-capacity-b", doc)
    (keep, theirs), hot = marked_pool(api, "ti")
    sa = load_api_client(str(kubeconfig))
    lease_s = 15.0
    b = CapacityReconciler(sa, CapacitySettings(enabled=True, namespace="kso-capacity-b", identity="kso-install-b",
                                                lease_s=lease_s))
    b.renew()
    assert NodeMarker(sa, "kso-install-b").apply([hot[0]]).marked == [hot[0]]
    a = start_kso(kubeconfig, tmp_path / "a.log", KSO_CAPACITY_IDENTITY="kso-install-a", KSO_CAPACITY_KEEP_NODES="true",
                  KSO_CAPACITY_INTERVAL_S="1")
    try:
        until(lambda: marks(core, keep) == ("true", "kso-install-a"), AIM_S, "A marks the node it needs")
        b.renew()  # B's Lease current for lease_s from now
        flips = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < lease_s - 5:  # A's rounds (1 s) while B's Lease is current
            flips += marks(core, hot[0]) != ("true", "kso-install-b")
            time.sleep(0.5)
        assert flips == 0, "A took the mark of a live install off"
        until(lambda: marks(core, hot[0]) == (None, None), lease_s + 30, "B's mark taken off once its Lease expired")
        print(f"\ntwo installs: B's mark kept through {lease_s - 5:g} s of A's rounds (1 s) while B's Lease was "
              f"current ({flips} flips), taken off {time.monotonic() - t0 - lease_s:.1f} s after it expired")
    finally:
        a.stop()
        delete_nodes(api, [keep, theirs, *hot])
