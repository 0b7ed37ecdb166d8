"""``kso reoptimize`` (dry-run, ``--execute``, PodDisruptionBudgets, publishing) on the real control plane:
etcd + kube-apiserver v1.36.2 and kube-controller-manager running only its disruption controller, which
computes the PodDisruptionBudgets' ``status.disruptionsAllowed`` as in a cluster. There is no kubelet:
pods are created already bound (``spec.nodeName``) and their status is written as a kubelet would.

The module has its own control plane because ``kso reoptimize`` reads every node of the cluster (nodes are
not namespaced): the shared one carries other tests' nodes. Every test starts from an empty cluster.

The cluster of most tests (tests/optimizer/reoptimize_cluster.py): node n1 is over its safe bound
(kube-safe-scheduler annotations say 98.75 % cpu in use, U* = 90 %), hosting three movable web pods
(ReplicaSet web, 4 replicas) and one pod of every kind that must never be evicted; n2 and n3 are nearly
idle; n5 is idle but tainted. The faults the real server cannot produce on demand (an eviction answered
404, 409 or 500 for a chosen pod) stay on the stand-in in test_eviction.py.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.e2e import create_nodes, node_manifest
from kso.cli import main
from kso.core.safety import safe_overload_risk
from optimizer.plan.placement_plan import PlacementPlan, load_plan
from optimizer.reoptimize import eviction
from tests.optimizer import reoptimize_cluster
from tests.optimizer.reoptimize_cluster import CPU_M, EPS, MOVABLE, U_STAR, pod
from tests.support.fixtures import make_running, started_control_plane, until

NAMESPACES = ("team-a", "team-b", "kso-system", "kso-test", "kso-ns")
# One of every kind that must never be evicted, all on the overloaded node: reoptimize_cluster.NEVER but for
# "critical-priority" (spec.priority without a class): kube-apiserver's Priority admission refuses a pod
# that sets the integer itself, so such a pod cannot exist; the eligibility rule is tested without a server.
NEVER = {name: raw for name, raw in reoptimize_cluster.NEVER.items() if name != "critical-priority"}


class Cluster:
    """The module's control plane with the helpers the tests use to seed and read it."""

    def __init__(self, cp: Any) -> None:
        from kubernetes import client

        self.cp = cp
        self.api = cp.api_client()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.owner_uids: dict[tuple[str, str, str], str] = {}

    # ---- seeding -----------------------------------------------------------------------------------------
    def add_node(self, name: str, load_cpu: float, std_cpu: float = 200.0, taint: bool = False) -> None:
        """8 cpu / 16Gi with the safe agent's annotations: cpu in millicores, memory in MB."""
        create_nodes(self.api, [node_manifest(
            name, "8", "16Gi", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}] if taint else None,
            annotations={"mean-free-cpu": str(CPU_M - load_cpu), "std-free-cpu": str(std_cpu),
                         "mean-free-memory": "14000", "std-free-memory": "100"})])

    def add_owner(self, kind: str, name: str, namespace: str, replicas: int) -> None:
        """A ReplicaSet or StatefulSet object (no controller runs that would create its pods)."""
        labels = {"owner": name}
        template = {"metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
        spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": labels}, "template": template}
        if kind == "ReplicaSet":
            made = self.apps.create_namespaced_replica_set(namespace, {"metadata": {"name": name}, "spec": spec})
        else:
            made = self.apps.create_namespaced_stateful_set(namespace, {"metadata": {"name": name},
                                                                        "spec": {**spec, "serviceName": name}})
        self.owner_uids[(kind, namespace, name)] = made.metadata.uid

    def add_pod(self, manifest: dict[str, Any]) -> None:
        """The pod bound to its node, then Running and Ready as its kubelet would report (unless Pending)."""
        body = json.loads(json.dumps(manifest))
        meta = body["metadata"]
        ns = meta.get("namespace", "default")
        for ref in meta.get("ownerReferences", []):
            ref["uid"] = self.owner_uids.get((ref["kind"], ns, ref["name"]), str(uuid.uuid4()))
        phase = body.pop("status")["phase"]
        body["spec"]["terminationGracePeriodSeconds"] = 0
        self.core.create_namespaced_pod(ns, body)
        if phase == "Running":
            make_running(self.core, ns, meta["name"], None)  # already bound: spec.nodeName

    def add_pdb(self, name: str, match_labels: dict[str, str], min_available: int, namespace: str) -> None:
        """A real PodDisruptionBudget; waits until the disruption controller has computed its status."""
        self.policy.create_namespaced_pod_disruption_budget(namespace, {"metadata": {"name": name}, "spec": {
            "minAvailable": min_available, "selector": {"matchLabels": match_labels}}})

        def observed() -> bool:
            pdb = self.policy.read_namespaced_pod_disruption_budget(name, namespace)
            return bool(pdb.status and pdb.status.observed_generation == pdb.metadata.generation
                        and pdb.status.expected_pods)
        until(observed, 60, f"the disruption controller's status of PodDisruptionBudget {name}")

    def seed(self, never: bool = True) -> None:
        for name, load in (("n1", 7900), ("n2", 500), ("n3", 600)):
            self.add_node(name, load_cpu=load)
        self.add_node("n5", load_cpu=0, taint=True)
        self.add_owner("ReplicaSet", "web", "team-a", replicas=4)
        self.add_owner("ReplicaSet", "solo", "team-a", replicas=1)
        self.add_owner("StatefulSet", "db", "team-a", replicas=1)
        self.add_owner("ReplicaSet", "coredns", "kube-system", replicas=2)
        for i in range(3):
            self.add_pod(pod(f"web-{i}", "n1"))
        self.add_pod(pod("web-3", "n2"))
        if never:
            for p in NEVER.values():
                self.add_pod(p)

    # ---- reading -----------------------------------------------------------------------------------------
    def pod_or_none(self, key: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        ns, name = key.split("/")
        try:
            return self.core.read_namespaced_pod(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def gone(self, key: str) -> bool:
        """Evicted: deleted, or terminating (a graceful delete waits for a kubelet there is not)."""
        got = self.pod_or_none(key)
        return got is None or got.metadata.deletion_timestamp is not None

    def events(self, *namespaces: str) -> list[Any]:
        return [e for ns in namespaces or NAMESPACES + ("kube-system",)
                for e in self.core.list_namespaced_event(ns).items if e.source and e.source.component == "kso-reoptimize"]

    def config_maps(self) -> dict[str, Any]:
        return {f"{ns}/{cm.metadata.name}": cm for ns in NAMESPACES
                for cm in self.core.list_namespaced_config_map(ns).items if cm.metadata.name == "kso-plan"}

    # ---- between tests -------------------------------------------------------------------------------------
    def clear(self) -> None:
        """Back to an empty cluster: the tests' pods, owners, budgets, ConfigMaps, events and nodes."""
        for ns in NAMESPACES + ("kube-system",):
            self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            self.apps.delete_collection_namespaced_replica_set(ns)
            self.apps.delete_collection_namespaced_stateful_set(ns)
            self.policy.delete_collection_namespaced_pod_disruption_budget(ns)
            self.core.delete_collection_namespaced_event(ns)
            for cm in self.core.list_namespaced_config_map(ns).items:
                if cm.metadata.name == "kso-plan":
                    self.core.delete_namespaced_config_map(cm.metadata.name, ns)
        self.core.delete_collection_node()
        self.owner_uids.clear()
        until(lambda: not any(self.core.list_namespaced_pod(ns).items for ns in NAMESPACES + ("kube-system",))
              and not self.core.list_node().items, 30, "an empty cluster")


@pytest.fixture(scope="module")
def control_plane_with_disruption() -> Iterator[Cluster]:
    with started_control_plane() as cp:
        cluster = Cluster(cp)
        for ns in NAMESPACES:
            cluster.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        cp.start_controller_manager(controllers="disruption")
        yield cluster


@pytest.fixture
def cluster(control_plane_with_disruption: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setattr(eviction, "SA_NAMESPACE_FILE", str(tmp_path / "no-such-namespace-file"))
    for var in ("KSO_PLAN_FILE", "KSO_PLAN_POLICY", "SAFEUTILIZATION", "SAFEPERCENTILE"):
        monkeypatch.delenv(var, raising=False)
    yield control_plane_with_disruption
    control_plane_with_disruption.clear()


def run(cluster: Cluster, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["reoptimize", "--workers", "1", "--time-limit", "10", "--kubeconfig", str(cluster.cp.kubeconfig), *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(cluster: Cluster, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(cluster, capsys, "--json", *args)
    return code, json.loads(out), err


def evicted(doc: dict[str, Any]) -> list[str]:
    return [f"{e['namespace']}/{e['pod']}" for e in doc["evictions"] if e["evicted"]]


# ---- dry-run -----------------------------------------------------------------------------------------
def test_dry_run_changes_nothing_and_prints_targets(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.seed()
    before = {f"{p.metadata.namespace}/{p.metadata.name}": p.metadata.resource_version
              for p in cluster.core.list_pod_for_all_namespaces().items}
    code, out, err = run(cluster, capsys)
    assert code == 0, err
    after = {f"{p.metadata.namespace}/{p.metadata.name}": p.metadata.resource_version
             for p in cluster.core.list_pod_for_all_namespaces().items}
    assert after == before  # not one pod evicted or touched
    assert cluster.events() == [] and cluster.config_maps() == {}  # no event, no ConfigMap
    assert "DRY-RUN" in out and "no pod was evicted" in out
    moves = [line.split() for line in out.splitlines() if line.startswith("team-a/web-")]
    assert moves, out
    for pod_name, src, dst, *why in moves:
        assert src == "n1" and dst in ("n2", "n3"), (pod_name, src, dst)  # never the tainted n5
        assert why[0] == "risk:"
    assert "Target plan" in out and "team-a/ReplicaSet/web@" in out
    assert "n1" in out and "over -> ok" in out


def test_dry_run_json_relieves_the_overloaded_node(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.seed()
    code, doc, err = run_json(cluster, capsys, "--policy", "none")
    assert code == 0, err
    assert doc["dryRun"] and doc["candidates"] == 4  # web-0..2 on n1 and web-3 on n2
    assert not any(n["overAfter"] for n in doc["nodes"]) and {n["name"]: n for n in doc["nodes"]}["n1"]["overBefore"]
    moved = {m["pod"] for m in doc["moves"]}
    assert moved <= MOVABLE and len(moved) >= 2
    assert all(m["reason"] == "risk" and m["from"] == "n1" and m["to"] in ("n2", "n3") for m in doc["moves"])
    # Independent check of "after": annotations' load minus/plus the moved pods' requests, exact Beta rule.
    load = {"n1": 7900.0, "n2": 500.0, "n3": 600.0, "n5": 0.0}
    for m in doc["moves"]:
        load[m["from"]] -= 500.0
        load[m["to"]] += 500.0
    names = sorted(load)
    risk = safe_overload_risk(np.array([load[n] / CPU_M for n in names]), np.full(len(names), 200.0 / CPU_M), U_STAR)
    assert (risk <= EPS).all(), dict(zip(names, risk, strict=True))
    plan = PlacementPlan.from_dict(doc["plan"])
    assert Counter(m["to"] for m in doc["moves"]) == Counter(
        {n: k for c in plan.classes.values() for n, k in c.slots.items()})
    assert set(doc["notMovable"]) >= {"mirror (static) pod", "DaemonSet pod", "system-critical pod",
                                      "local storage (emptyDir/hostPath)", "namespace kube-system excluded",
                                      "single replica"}


# ---- --execute -------------------------------------------------------------------------------------
def test_execute_evicts_only_eligible_pods_records_events_and_publishes(
        cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed()
    plan_file = tmp_path / "state" / "plan.json"
    monkeypatch.setenv("KSO_PLAN_FILE", str(plan_file))
    code, doc, err = run_json(cluster, capsys, "--execute", "--plan-namespace", "kso-test")
    assert code == 0, err
    done = evicted(doc)
    assert done and {d.split("/")[1] for d in done} <= MOVABLE
    assert len(doc["evictions"]) == len(doc["moves"]) == len(set(done))  # each once, all allowed
    for d in done:
        assert cluster.gone(d), d  # the API server deleted (or is deleting) them
    for name in NEVER:
        got = cluster.pod_or_none(f"{'kube-system' if name == 'system' else 'team-a'}/{name}")
        assert got is not None and got.metadata.deletion_timestamp is None, name
    # Events: one per eviction, on the pod, from kso-reoptimize.
    events = cluster.events()
    assert sorted(f"{e.involved_object.namespace}/{e.involved_object.name}" for e in events) == sorted(done)
    for e in events:
        assert e.reason == "KsoReoptimizeEvicted" and e.type == "Normal" and e.involved_object.kind == "Pod"
        assert e.involved_object.uid and "n1" in e.message
    # The plan: ConfigMap kso-test/kso-plan and the plan file, slots = where the evicted pods should land.
    cms = cluster.config_maps()
    assert list(cms) == ["kso-test/kso-plan"], cms
    plan = PlacementPlan.from_json(cms["kso-test/kso-plan"].data["plan.json"])
    slots = Counter({n: k for c in plan.classes.values() for n, k in c.slots.items()})
    assert slots == Counter(m["to"] for m in doc["moves"]) and set(slots) <= {"n2", "n3"}
    assert load_plan(plan_file).plan_id == plan.plan_id
    assert cluster.pod_or_none("team-a/web-3").metadata.uid in set(plan.baseline_pods)
    assert any("ConfigMap kso-test/kso-plan" in p for p in doc["published"])  # created before the evictions


def test_plan_configmap_is_replaced_on_the_next_run(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed(never=False)
    (tmp_path / "ns").write_text("kso-ns\n")
    monkeypatch.setattr(eviction, "SA_NAMESPACE_FILE", str(tmp_path / "ns"))
    code, doc, err = run_json(cluster, capsys, "--execute", "--max-moves", "1")
    assert code == 0, err
    first = cluster.config_maps().get("kso-ns/kso-plan")
    assert first is not None and len(evicted(doc)) == 1
    code, doc, err = run_json(cluster, capsys, "--execute", "--max-moves", "1")
    assert code == 0, err
    second = cluster.config_maps()["kso-ns/kso-plan"]
    assert second.metadata.resource_version != first.metadata.resource_version
    assert second.data["plan.json"] != first.data["plan.json"]
    assert any("(replaced)" in p for p in doc["published"]) and len(cluster.config_maps()) == 1


@pytest.mark.parametrize(("flag", "value"), [("--max-moves", 1), ("--max-per-node", 1), ("--max-per-namespace", 1)])
def test_execute_honours_every_limit(flag: str, value: int, cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    # Two overloaded nodes, each needing two moves, in two namespaces.
    for name, load in (("n1", 7900), ("n4", 7900), ("n2", 300), ("n3", 300), ("n6", 300)):
        cluster.add_node(name, load_cpu=load)
    cluster.add_owner("ReplicaSet", "web", "team-a", replicas=4)
    cluster.add_owner("ReplicaSet", "api", "team-b", replicas=4)
    for i in range(4):
        cluster.add_pod(pod(f"web-{i}", "n1"))
        cluster.add_pod(pod(f"api-{i}", "n4", namespace="team-b", owner=("ReplicaSet", "api"), labels={"app": "api"}))
    code, doc, err = run_json(cluster, capsys, "--execute", "--policy", "none", flag, str(value))
    assert code == 0, err
    done = evicted(doc)
    assert done and all(cluster.gone(d) for d in done)
    per_node = Counter(m["from"] for m in doc["moves"])
    per_ns = Counter(d.split("/")[0] for d in done)
    if flag == "--max-moves":
        assert len(done) == 1
    elif flag == "--max-per-node":
        assert max(per_node.values()) == 1 and len(done) == 2
    else:
        assert max(per_ns.values()) == 1 and len(done) == 2
    # Under the limits the overloads cannot all be fixed; the model says so honestly.
    assert {n["name"] for n in doc["nodes"] if n["overAfter"]} <= {"n1", "n4"}


# ---- PodDisruptionBudgets: planned within and retried, test_migration_budgets.py --------------------------


# ---- publishing --------------------------------------------------------------------------------------
def test_publish_failure_is_reported_not_fatal(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed(never=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KSO_PLAN_FILE", str(blocker / "plan.json"))  # a path under a file: cannot be written
    code, out, err = run(cluster, capsys, "--execute")
    assert code == 0 and "evicted" in out and "Evictions:" in out
    assert "could not publish the plan" in err and "plan.json" in err
    assert "kso-system/kso-plan" in cluster.config_maps()  # the ConfigMap still went out


def test_node_over_its_bound_without_movable_pods_is_reported(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.add_node("n1", load_cpu=7900)
    cluster.add_node("n2", load_cpu=500)
    cluster.add_pod(pod("ds", "n1", owner=("DaemonSet", "agent")))
    code, doc, err = run_json(cluster, capsys)
    assert code == 0, err
    assert doc["moves"] == [] and any("n1" in note and "no movable pod" in note for note in doc["notes"])
    assert [n["name"] for n in doc["nodes"] if n["overAfter"]] == ["n1"]
