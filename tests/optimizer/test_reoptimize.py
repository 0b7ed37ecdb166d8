"""``kso reoptimize`` without an API server (eligibility, snapshots, the demo, configuration errors), the
migration model on its own, and the one fault the real API server cannot produce on demand: an eviction
answered 404, 409 or 500 for chosen pods (the stand-in API server, tests/support/kube_standin.py, with the
real kubernetes client). Dry-run, --execute, PodDisruptionBudgets and publishing run on the real control
plane: test_reoptimize_on_control_plane.py, on the same cluster.

The cluster: node n1 is over its safe bound (kube-safe-scheduler annotations say 98.75 % cpu
in use, U* = 90 %), hosting three movable web pods (ReplicaSet web, 4 replicas) and one pod of every kind
that must never be evicted; n2 and n3 are nearly idle; n5 is idle but tainted (no pod may land there).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kso.cli import main
from kso.core.objects import pod_from_k8s
from kso.core.safety import safe_overload_risk
from optimizer.reoptimize import eligibility, eviction
from tests.support.kube_standin import NODES, PODS, StandinApiServer, make_node

U_STAR, EPS = 0.9, 0.3
CPU_M = 8000.0


def node(name: str, load_cpu: float, std_cpu: float = 200.0, taint: bool = False) -> dict[str, Any]:
    """8 cpu / 16Gi with the safe agent's annotations: cpu in millicores, memory in MB."""
    n = make_node(name, cpu="8", memory="16Gi", annotations={
        "mean-free-cpu": str(CPU_M - load_cpu), "std-free-cpu": str(std_cpu),
        "mean-free-memory": "14000", "std-free-memory": "100"})
    if taint:
        n["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    return n


def pod(name: str, node_name: str, namespace: str = "team-a", cpu: str = "500m",
        owner: tuple[str, str] | None = ("ReplicaSet", "web"), labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, phase: str = "Running", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": "web"},
                            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u-" + owner[1],
                                    "controller": True}]
    return {"metadata": meta,
            "spec": {"nodeName": node_name, "schedulerName": "default-scheduler",
                     "containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
                     **spec},
            "status": {"phase": phase}}


MOVABLE = {"web-0", "web-1", "web-2"}
# name -> pod: one of every kind that must never be evicted, all on the overloaded node.
NEVER = {
    "mirror": pod("mirror", "n1", owner=("Node", "n1"), annotations={"kubernetes.io/config.mirror": "abc"}),
    "ds": pod("ds", "n1", owner=("DaemonSet", "agent")),
    "critical-class": pod("critical-class", "n1", priorityClassName="system-cluster-critical"),
    "critical-node": pod("critical-node", "n1", priorityClassName="system-node-critical"),
    "critical-priority": pod("critical-priority", "n1", priority=2_000_000_000),
    "empty-dir": pod("empty-dir", "n1", volumes=[{"name": "scratch", "emptyDir": {}}]),
    "host-path": pod("host-path", "n1", volumes=[{"name": "logs", "hostPath": {"path": "/var/log"}}]),
    "single": pod("single", "n1", owner=("ReplicaSet", "solo")),
    "single-sts": pod("single-sts", "n1", owner=("StatefulSet", "db")),
    "bare": pod("bare", "n1", owner=None),
    "job": pod("job", "n1", owner=("Job", "batch-1")),
    "opted-out": pod("opted-out", "n1", annotations={"kso.io/evict": "false"}),
    "system": pod("system", "n1", namespace="kube-system", owner=("ReplicaSet", "coredns")),
    "starting": pod("starting", "n1", phase="Pending"),
}


def seed(server: StandinApiServer, never: bool = True) -> None:
    server.add(NODES, node("n1", load_cpu=7900))
    server.add(NODES, node("n2", load_cpu=500))
    server.add(NODES, node("n3", load_cpu=600))
    server.add(NODES, node("n5", load_cpu=0, taint=True))
    server.add_owner("ReplicaSet", "web", "team-a", replicas=4)
    server.add_owner("ReplicaSet", "solo", "team-a", replicas=1)
    server.add_owner("StatefulSet", "db", "team-a", replicas=1)
    server.add_owner("ReplicaSet", "coredns", "kube-system", replicas=2)
    for i in range(3):
        server.add(PODS, pod(f"web-{i}", "n1"))
    server.add(PODS, pod("web-3", "n2"))
    if never:
        for p in NEVER.values():
            server.add(PODS, p)


@pytest.fixture
def server() -> Iterator[StandinApiServer]:
    with StandinApiServer() as srv:
        yield srv


@pytest.fixture
def kubeconfig(server: StandinApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = server.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setattr(eviction, "SA_NAMESPACE_FILE", str(tmp_path / "no-such-namespace-file"))
    for var in ("KSO_PLAN_FILE", "KSO_PLAN_POLICY", "SAFEUTILIZATION", "SAFEPERCENTILE"):
        monkeypatch.delenv(var, raising=False)
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["reoptimize", "--workers", "1", "--time-limit", "10", *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run(capsys, "--json", *args)
    return code, json.loads(out), err


# ---- eligibility (no server) -----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(NEVER))
def test_never_movable_kinds_have_a_reason(name: str) -> None:
    raw = NEVER[name]
    replicas = {("team-a", "ReplicaSet", "web"): 4, ("team-a", "ReplicaSet", "solo"): 1,
                ("team-a", "StatefulSet", "db"): 1, ("kube-system", "ReplicaSet", "coredns"): 2}
    why = eligibility.not_movable_reason(raw, pod_from_k8s(raw), {"kube-system"},
                                        lambda ns, kind, n: (replicas.get((ns, kind, n)), "unknown owner"))
    assert why, name


def test_movable_pod_has_no_reason_and_unknown_owner_is_not_moved() -> None:
    raw = pod("web-0", "n1")
    assert eligibility.not_movable_reason(raw, pod_from_k8s(raw), {"kube-system"}, lambda *a: (4, "")) is None
    assert eligibility.not_movable_reason(raw, pod_from_k8s(raw), set(), lambda *a: (None, "owner unreadable (HTTP 403)")) \
        == "owner unreadable (HTTP 403)"
    assert eligibility.not_movable_reason(raw, pod_from_k8s(raw), {"team-a"}, lambda *a: (4, "")) == "namespace team-a excluded"
    opted_in = pod("w", "n1", annotations={"kso.io/evict": "true"})
    assert eligibility.not_movable_reason(opted_in, pod_from_k8s(opted_in), set(), lambda *a: (4, "")) is None


# ---- dry-run -----------------------------------------------------------------------------------------
def test_demo_snapshot_dry_run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KSO_PLAN_POLICY", raising=False)
    code, doc, err = run_json(capsys, "--demo", "--max-per-namespace", "5")
    assert code == 0, err
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert nodes["demo-06"]["overBefore"] and not nodes["demo-06"]["overAfter"]
    assert not any(n["overAfter"] for n in doc["nodes"])
    assert any(m["from"] == "demo-06" and m["reason"] == "risk" for m in doc["moves"])
    assert 0 < len(doc["moves"]) <= 5
    assert sum(n["inUseAfter"] for n in doc["nodes"]) < sum(n["inUseBefore"] for n in doc["nodes"])  # binpack gain


def test_snapshot_file_with_owner_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KSO_PLAN_POLICY", raising=False)
    items: list[dict[str, Any]] = [{"kind": "Node", "apiVersion": "v1", **node("n1", 7900)},
                                   {"kind": "Node", "apiVersion": "v1", **node("n2", 500)}]
    items += [{"kind": "Pod", "apiVersion": "v1", **pod(f"web-{i}", "n1")} for i in range(3)]
    items += [{"kind": "Pod", "apiVersion": "v1", **pod("solo-0", "n1", owner=("ReplicaSet", "solo"))},
              {"kind": "Pod", "apiVersion": "v1", **pod("solo-1", "n1", owner=("ReplicaSet", "solo"))},
              {"kind": "ReplicaSet", "apiVersion": "apps/v1", "metadata": {"name": "solo", "namespace": "team-a"},
               "spec": {"replicas": 1}}]  # the owner object wins over the pod count (2 pods, e.g. mid-rollout)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code, doc, err = run_json(capsys, "--snapshot", str(path), "--policy", "none")
    assert code == 0, err
    assert doc["candidates"] == 3 and doc["notMovable"] == {"single replica": 2}
    assert {m["pod"] for m in doc["moves"]} <= MOVABLE and doc["moves"]
    assert not any(n["overAfter"] for n in doc["nodes"])


# ---- --execute -------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [404, 409, 500])
def test_other_eviction_failures_are_reported_once(status: int, server: StandinApiServer, kubeconfig: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    seed(server, never=False)
    for i in range(3):
        server.fail_evictions[f"team-a/web-{i}"] = status
    code, doc, err = run_json(capsys, "--kubeconfig", kubeconfig, "--execute")
    assert code == 2 and doc["moves"]
    assert Counter((ns, n) for ns, n, _ in server.evictions).most_common(1)[0][1] == 1
    assert all(e["status"] == status for e in doc["evictions"])
    assert f"{status}" in err


# ---- configuration errors --------------------------------------------------------------------------
@pytest.mark.parametrize("args", [["--demo", "--execute"], ["--demo", "--max-moves", "-1"],
                                  ["--demo", "--move-cost", "nan"], ["--snapshot", "/no/such/file"]])
def test_config_errors_exit_1(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *args)
    assert code == 1 and err.startswith("kso reoptimize: ")


def test_unreachable_api_server_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "kubeconfig"
    path.write_text(f"""
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: ctx, context: {{cluster: c, user: u}}}}]
current-context: ctx
""")
    code, out, err = run(capsys, "--kubeconfig", str(path))
    assert code == 1 and "cannot list nodes and pods" in err


def test_help_names_the_flags_the_cronjob_uses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["reoptimize", "--help"])
    text = capsys.readouterr().out
    for flag in ("--execute", "--max-moves", "--max-per-node", "--max-per-namespace", "--exclude-namespaces",
                 "--snapshot", "--demo", "--prometheus", "--trace", "--plan-namespace", "kso.io/evict"):
        assert flag in text, flag


# ---- the migration model on its own -----------------------------------------------------------------
def _state(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Any:
    from kso.core.cluster import ClusterState
    from kso.core.objects import node_from_k8s

    state = ClusterState()
    for n in nodes:
        state.upsert_node(node_from_k8s(n))
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"uid-{i}"
        state.upsert_pod(pod_from_k8s(p))
    return state


def _spread_cluster() -> Any:
    """Four nodes each hosting one movable pod (no overloads): binpack may empty some, at a price."""
    nodes = [node(f"m{i}", load_cpu=1200) for i in range(4)]
    pods = [pod(f"w-{i}", f"m{i}", cpu="1") for i in range(4)]
    return _state(nodes, pods)


def test_move_cost_is_weighed_against_the_policy_gain() -> None:
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

    state = _spread_cluster()
    movable = state.bound_pods()
    cheap = plan_migration(state, None, U_STAR, EPS, movable, MigrationOptions("binpack", 0.2, MoveLimits(), workers=1))
    assert cheap.moves and all(m.reason == "policy" for m in cheap.moves)
    before, after = cheap.nodes_in_use()
    assert (before, after) == (4, 1)  # three pods of 1 cpu join the fourth: three nodes emptied, 3 moves
    # One move costs more than a node is worth: nothing moves.
    dear = plan_migration(state, None, U_STAR, EPS, movable, MigrationOptions("binpack", 1.5, MoveLimits(), workers=1))
    assert dear.moves == [] and dear.nodes_in_use() == (4, 4)
    # "none": only risk moves, and there is no risk here.
    assert plan_migration(state, None, U_STAR, EPS, movable, MigrationOptions("none", workers=1)).moves == []
    # A total budget of 2 empties two nodes at most.
    capped = plan_migration(state, None, U_STAR, EPS, movable, MigrationOptions("binpack", 0.2, MoveLimits(2), workers=1))
    assert len(capped.moves) == 2 and capped.nodes_in_use()[1] == 2
    # The plan of a subset of the moves has just those slots.
    sub = capped.plan_for(capped.moves[:1])
    assert sum(c.count for c in sub.classes.values()) == 1 and sub.plan_id != capped.plan.plan_id


def test_exact_rule_safety_net(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the linear bound let too much onto a node, the exact (Beta) check must catch it: the budgets of
    the idle nodes are inflated here, so the solver believes anything fits."""
    from optimizer.reoptimize import migration
    from optimizer.reoptimize.migration import MigrationOptions, plan_migration

    real = migration.compile_problem

    def loose(problem: Any) -> Any:
        comp = real(problem)
        comp.budget[:] = comp.budget + 10**6 * (comp.budget > 0)
        return comp

    monkeypatch.setattr(migration, "compile_problem", loose)
    # n1 is over its bound with four 2-cpu pods; n2 is at 80 %, so it can take one pod at most (safely none).
    nodes = [node("n1", load_cpu=7900), node("n2", load_cpu=6400, std_cpu=400)]
    pods = [pod(f"web-{i}", "n1", cpu="1500m") for i in range(4)]
    state = _state(nodes, pods)
    # Re-solving with tightened budgets, and (no repair rounds) undoing the moves as the last resort.
    for rounds, note in ((3, ""), (0, "moves undone")):
        result = plan_migration(state, None, U_STAR, EPS, state.bound_pods(),
                                MigrationOptions("none", workers=1, repair_rounds=rounds))
        load = {"n1": 7900.0, "n2": 6400.0}
        for m in result.moves:
            load[m.from_node] -= 1500.0
            load[m.to_node] += 1500.0
        risk_n2 = safe_overload_risk(np.array([load["n2"] / CPU_M]), np.array([400 / CPU_M]), U_STAR)[0]
        assert risk_n2 <= EPS, (result.moves, result.notes)
        assert not next(n for n in result.nodes if n.name == "n2").over_after
        assert "n1" in result.over_after  # n1 cannot be relieved safely: it stays over, honestly reported
        assert note in " ".join(result.notes)


def test_ownerless_classes_in_two_namespaces_keep_their_limits() -> None:
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

    nodes = [node("n1", load_cpu=7900), node("n2", load_cpu=300), node("n3", load_cpu=300)]
    pods = [pod(f"a-{i}", "n1", namespace="ns-a", owner=None) for i in range(3)]
    pods += [pod(f"b-{i}", "n1", namespace="ns-b", owner=None) for i in range(3)]
    state = _state(nodes, pods)
    result = plan_migration(state, None, U_STAR, EPS, state.bound_pods(),
                            MigrationOptions("none", limits=MoveLimits(max_per_namespace=1), workers=1))
    assert Counter(m.namespace for m in result.moves) == Counter({"ns-a": 1, "ns-b": 1})
    # Both namespaces' pods share the extender's class key ("shape@..."): one plan class with both slots.
    assert len(result.plan.classes) == 1 and next(iter(result.plan.classes.values())).count == 2


def test_trace_forecasts_are_used_not_dropped_as_old(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace's clock is its own: its forecasts must be judged fresh at the trace's "now", or the node
    annotations would silently be used instead."""
    monkeypatch.delenv("KSO_PLAN_POLICY", raising=False)
    code, by_annotations, err = run_json(capsys, "--demo", "--policy", "none")
    assert code == 0, err
    code, by_trace, err = run_json(capsys, "--demo", "--policy", "none", "--trace", "embedded")
    assert code == 0, err
    assert "synthetic join" in by_trace["loadFrom"]
    before = {n["name"]: n["meanBefore"]["cpu"] for n in by_annotations["nodes"]}
    changed = [n["name"] for n in by_trace["nodes"] if abs(n["meanBefore"]["cpu"] - before[n["name"]]) > 1e-6]
    assert len(changed) == len(before), changed


def test_the_solve_runs_in_the_protected_child_with_seed_retry() -> None:
    """kso reoptimize solves through the same protected child as kso plan: a child that dies (the test
    hook aborts the first one) is retried with another seed and the moves are those of an in-process solve."""
    from optimizer.plan.protected_solver import ORTOOLS_ABORT, ProtectedSolver
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

    state = _spread_cluster()
    movable = state.bound_pods()
    options = MigrationOptions("binpack", 0.2, MoveLimits(), workers=1)
    crashes: list[str] = []
    got = plan_migration(state, None, U_STAR, EPS, movable, options,
                         solver=ProtectedSolver(on_crash=crashes.append, abort_attempts=1))
    assert len(crashes) == 1 and "killed by SIGABRT" in crashes[0] and ORTOOLS_ABORT in crashes[0]
    assert crashes[0] in got.notes
    assert got.nodes_in_use() == (4, 1) and len(got.moves) == 3
    # Every attempt dead: nothing moves, and the result says why.
    dead = plan_migration(state, None, U_STAR, EPS, movable, options, solver=ProtectedSolver(retries=0, abort_attempts=1,
                                                                                           on_crash=crashes.append))
    assert dead.moves == [] and dead.status == "SOLVER_DIED"
    assert "no solver process returned a re-optimisation; nothing moves" in dead.notes


def test_large_model_moves_pods_only_off_nodes_over_their_bound_or_small_enough_to_empty() -> None:
    """Above ``full_model_limit`` class x node pairs only a neighbourhood moves: pods leave nodes over their
    safe bound (n1) and nodes the move budget could empty (n3, one pod); n2's three pods stay."""
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

    nodes = [node("n1", load_cpu=7900), node("n2", load_cpu=3300), node("n3", load_cpu=1200), node("n4", load_cpu=300)]
    pods = [pod(f"web-{i}", "n1", cpu="1500m") for i in range(4)]
    pods += [pod(f"api-{i}", "n2", cpu="1", owner=("ReplicaSet", "api"), labels={"app": "api"}) for i in range(3)]
    pods += [pod("api-3", "n3", cpu="1", owner=("ReplicaSet", "api"), labels={"app": "api"})]
    state = _state(nodes, pods)
    options = MigrationOptions("binpack", 0.2, MoveLimits(max_moves=2), workers=1, full_model_limit=0)
    result = plan_migration(state, None, U_STAR, EPS, state.bound_pods(), options)
    assert result.moves, (result.status, result.notes)
    assert {m.from_node for m in result.moves} <= {"n1", "n3"}
    assert any(m.from_node == "n1" and m.reason == "risk" for m in result.moves)
    assert any("pods leave only the 2 nodes" in n for n in result.notes), result.notes
