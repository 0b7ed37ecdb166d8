"""``kso reoptimize`` plans within the PodDisruptionBudgets and retries evictions they refuse, on the real
control plane (etcd, kube-apiserver and the disruption controller of kube-controller-manager, which computes
each budget's ``status.disruptionsAllowed``; the module's own, as in test_reoptimize_cli_on_control_plane.py).

The cluster: node n1 is over its safe bound (annotations: 7.9 of 8 cpu in use, U* = 90 %) and holds three pods
of each of three workloads (ReplicaSets of 6 replicas, as a Deployment makes them): "big" pods request 1 cpu,
"mid" and "small" 500m. The cheapest relief is in big pods. Budgets, as in a cluster that cares: big
maxUnavailable 1 (1 disruption allowed), mid minAvailable 5 (1), small minAvailable 4 (2)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from optimizer.reoptimize import eviction
from optimizer.reoptimize.migration import Move, MoveLimits
from tests.optimizer import test_reoptimize_cli_on_control_plane as on_control_plane
from tests.optimizer.reoptimize_cluster import pod
from tests.optimizer.test_reoptimize_cli_on_control_plane import Cluster, evicted, run_json
from tests.support.fixtures import until

# That module's control plane fixtures (a control plane of this module's own, an empty cluster per test).
control_plane_with_disruption = on_control_plane.control_plane_with_disruption
cluster = on_control_plane.cluster

WORKLOADS = {"big": "1", "mid": "500m", "small": "500m"}  # name -> cpu request per pod
BUDGETS = {"big": {"maxUnavailable": 1}, "mid": {"minAvailable": 5}, "small": {"minAvailable": 4}}
ALLOWED = {"big": 1, "mid": 1, "small": 2}


def add_budget(cl: Cluster, name: str, app: str, spec: dict[str, Any], namespace: str = "team-a") -> None:
    """A real PodDisruptionBudget; waits until the disruption controller has computed its status."""
    cl.policy.create_namespaced_pod_disruption_budget(namespace, {"metadata": {"name": name}, "spec": {
        **spec, "selector": {"matchLabels": {"app": app}}}})

    def observed() -> bool:
        pdb = cl.policy.read_namespaced_pod_disruption_budget(name, namespace)
        return bool(pdb.status and pdb.status.observed_generation == pdb.metadata.generation
                    and pdb.status.expected_pods)
    until(observed, 60, f"the disruption controller's status of PodDisruptionBudget {name}")


def seed_three_workloads(cl: Cluster) -> None:
    cl.add_node("n1", load_cpu=7900, std_cpu=900)
    for name in ("n2", "n3"):
        cl.add_node(name, load_cpu=500)
    for app, cpu in WORKLOADS.items():
        cl.add_owner("ReplicaSet", app, "team-a", replicas=6)
        for i in range(6):
            cl.add_pod(pod(f"{app}-{i}", "n1" if i < 3 else ("n2" if i % 2 else "n3"), cpu=cpu,
                           owner=("ReplicaSet", app), labels={"app": app}))


def budget_moves(doc: dict[str, Any]) -> Counter[str]:
    return Counter(m["pod"].rsplit("-", 1)[0] for m in doc["moves"])


def test_plan_takes_at_most_what_each_budget_allows(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    seed_three_workloads(cluster)
    for app, spec in BUDGETS.items():
        add_budget(cluster, f"{app}-pdb", app, spec)
    code, doc, err = run_json(cluster, capsys, "--policy", "none")
    assert code == 0, err
    moves = budget_moves(doc)
    assert sum(moves.values()) >= 2, doc["moves"]  # n1 needs more than one budget's worth of relief
    assert all(moves[app] <= ALLOWED[app] for app in moves), (moves, ALLOWED)
    assert {b["name"]: b["disruptionsAllowed"] for b in doc["disruptionBudgets"]} == {
        f"team-a/{app}-pdb": n for app, n in ALLOWED.items()}
    assert all(b["moves"] <= b["disruptionsAllowed"] and b["movablePods"] == 6 for b in doc["disruptionBudgets"])
    # The same plan executed: the API server accepts every eviction, first time.
    code, doc, err = run_json(cluster, capsys, "--policy", "none", "--execute", "--eviction-deadline", "0")
    assert code == 0, (doc["evictions"], err)
    assert all(budget_moves(doc)[app] <= ALLOWED[app] for app in ALLOWED)
    assert len(evicted(doc)) == len(doc["moves"]) >= 2 and not any(e["status"] for e in doc["evictions"])


def test_budget_with_no_disruption_left_moves_nothing_from_it(cluster: Cluster,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    seed_three_workloads(cluster)
    add_budget(cluster, "big-pdb", "big", {"minAvailable": 6})  # 6 of 6 must stay: 0 allowed
    code, doc, err = run_json(cluster, capsys, "--policy", "none")
    assert code == 0, err
    assert doc["moves"] and budget_moves(doc)["big"] == 0, doc["moves"]


def test_pod_under_two_budgets_is_not_moved(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    seed_three_workloads(cluster)
    add_budget(cluster, "big-pdb", "big", {"maxUnavailable": 3})
    add_budget(cluster, "big-pdb-2", "big", {"maxUnavailable": 3})  # the Eviction API refuses such pods (500)
    code, doc, err = run_json(cluster, capsys, "--policy", "none")
    assert code == 0, err
    assert budget_moves(doc)["big"] == 0 and doc["notMovable"]["under more than one PodDisruptionBudget"] == 6


# ---- retries of evictions refused with 429 ----------------------------------------------------------------
def web_with_budget(cl: Cluster) -> dict[str, str]:
    """RS web (4 replicas, 2 on n1), budget minAvailable 3: one disruption allowed at a time. Returns the uids."""
    for name in ("n1", "n2"):
        cl.add_node(name, load_cpu=500)
    cl.add_owner("ReplicaSet", "web", "team-a", replicas=4)
    for i in range(4):
        cl.add_pod(pod(f"web-{i}", "n1" if i < 2 else "n2"))
    cl.add_pdb("web-pdb", {"app": "web"}, min_available=3, namespace="team-a")
    return {p.metadata.name: p.metadata.uid for p in cl.core.list_namespaced_pod("team-a").items}


def two_moves(uids: dict[str, str]) -> Any:
    return SimpleNamespace(moves=[Move(f"web-{i}", "team-a", uids[f"web-{i}"], "n1", "n2", "risk", "web") for i in (0, 1)])


def test_refused_eviction_is_retried_until_the_budget_allows_it(cluster: Cluster) -> None:
    uids = web_with_budget(cluster)

    def replacement_comes_up() -> None:
        """What the ReplicaSet controller, kube-scheduler and a kubelet do once web-0 is evicted."""
        until(lambda: cluster.gone("team-a/web-0"), 30, "web-0 evicted")
        cluster.add_pod(pod("web-new", "n2"))

    helper = threading.Thread(target=replacement_comes_up, daemon=True)
    helper.start()
    t0 = time.monotonic()
    out = eviction.execute(SimpleNamespace(api_client=cluster.api), two_moves(uids), MoveLimits(), deadline_s=60)
    helper.join(5)
    assert [(o.move.pod, o.evicted) for o in out.outcomes] == [("web-0", True), ("web-1", True)], \
        [(o.move.pod, o.detail) for o in out.outcomes]
    assert time.monotonic() - t0 < 60
    assert cluster.gone("team-a/web-1")
    messages = {e.involved_object.name: e.message for e in cluster.events("team-a")}
    assert "refusals" in messages["web-1"] and "refusals" not in messages["web-0"], messages


def test_refused_eviction_is_given_up_at_the_deadline(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    uids = web_with_budget(cluster)
    t0 = time.monotonic()
    out = eviction.execute(SimpleNamespace(api_client=cluster.api), two_moves(uids), MoveLimits(), deadline_s=3)
    took = time.monotonic() - t0
    first, second = out.outcomes
    assert first.evicted and not second.evicted and second.status == 429
    assert "within the 3 s eviction deadline" in second.detail, second.detail
    tries = int(second.detail.split("tried ")[1].split(" times")[0])
    assert tries >= 2 and 1.0 <= took < 3 + 10, (tries, took)  # pauses of 1 s, 2 s: the next would pass 3 s
    assert not cluster.gone("team-a/web-1")


def test_eviction_deadline_flag_is_checked(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = on_control_plane.run(cluster, capsys, "--execute", "--eviction-deadline", "-1")
    assert code == 1 and "--eviction-deadline must be a number of seconds >= 0, got -1" in err
