"""The extender following a PlacementPlan: real CP-SAT plans, real HTTP, real plan files."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.app import create_app
from extender.config import load_config
from extender.demo import BackgroundServer, Client
from extender.plan_cache import PlanCache, PlanSolver
from extender.plan_jobs import start_plan_jobs
from extender.verbs import Extender
from kso.core.binder import RecordingBinder
from kso.core.objects import node_from_k8s
from kso.core.settings import load_settings
from optimizer.plan.cluster_problem import problem_from_state
from optimizer.plan.model import SolverOptions
from optimizer.plan.pipeline import plan_cluster
from optimizer.plan.placement_plan import PlacementPlan, write_plan
from optimizer.settings import PlanSettings
from tests.support.fixtures import make_node, make_pod, make_state

# measured, nearly idle: the plan pulls only onto nodes whose load kso sees (decisions/sight.py)
IDLE = {"mean-free-cpu": "3900", "std-free-cpu": "50", "mean-free-memory": "8000", "std-free-memory": "50"}
NODES = [make_node(f"n{i}", cpu="4", memory="8Gi", annotations=IDLE) for i in range(1, 4)]
UNMEASURED = [make_node(f"n{i}", cpu="4", memory="8Gi") for i in range(1, 4)]
PENDING = [make_pod(f"p{i}", cpu="1", memory="1Gi") for i in range(1, 4)]


@contextmanager
def plan_extender(tmp_path: Path, env: dict[str, str] | None = None, nodes: list[dict[str, Any]] = NODES
                  ) -> Iterator[tuple[Client, Extender, PlanCache]]:
    env = {"KSO_PLAN_FILE": str(tmp_path / "plan.json"), **(env or {})}
    config = load_config({"KSO_AGENTS": "safe,pigeon", **env})
    state = make_state(nodes, PENDING)
    cache = PlanCache(config.plan, state)
    ext = Extender(config, state, RecordingBinder(), plan=cache)
    cache.on_event = lambda kind, detail: ext.metrics.plan_events.labels(kind).inc()
    with BackgroundServer(create_app(ext)) as srv:
        yield Client(srv.port), ext, cache


def solved_plan(ext: Extender, policy: str = "binpack") -> PlacementPlan:
    problem = problem_from_state(ext.state, None, 0.9, 0.3)
    return plan_cluster(problem, SolverOptions(policy=policy, time_limit_s=5)).plan


def scores(client: Client, pod: dict[str, Any]) -> dict[str, int]:
    status, body = client.post("/prioritize", {"Pod": pod, "NodeNames": ["n1", "n2", "n3"]})
    assert status == 200
    return {s["Host"]: s["Score"] for s in body}


def metric(client: Client, name: str) -> float:
    _, text = client.get("/metrics")
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_plan_nodes_rank_first_until_their_slots_are_taken(tmp_path: Path) -> None:
    with plan_extender(tmp_path) as (client, ext, cache):
        before = scores(client, PENDING[0])
        plan = solved_plan(ext)
        (key, planned), = plan.classes.items()  # three identical pods: one class
        assert planned.count == 3 and planned.unplaced == 0
        # binpack: 3 x 1 cpu fit on one 4-cpu node within U* = 90% (3.6 cpu)
        assert list(planned.slots.values()) == [3]
        target = next(iter(planned.slots))
        write_plan(plan, cache.settings.plan_file)
        cache.load_file()
        with_plan = scores(client, PENDING[0])
        assert with_plan[target] == 10
        assert all(s <= 5 for n, s in with_plan.items() if n != target)
        assert metric(client, 'kso_plan_decisions_total{result="hit"}') == 1
        # Each bind takes a slot; after three, the plan has nothing left and the agents decide alone.
        for pod in PENDING:
            status, body = client.post("/bind", {"PodName": pod["metadata"]["name"], "PodNamespace": "default",
                                                 "PodUID": pod["metadata"]["uid"], "Node": target})
            assert status == 200 and body["Error"] == ""
        assert cache.slots_for(ext.parse_pod(make_pod("p9", cpu="1", memory="1Gi"))) is None
        after = scores(client, make_pod("p9", cpu="1", memory="1Gi"))
        assert after != with_plan
        # The reconcile from the node cache agrees with the binds' bookkeeping.
        cache.reconcile()
        assert cache.describe()["free_slots"] == 0
        assert before  # the call without a plan answered too


def test_corrupt_or_stale_plan_is_rejected_and_heuristics_answer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with plan_extender(tmp_path) as (client, ext, cache):
        heuristic = scores(client, PENDING[0])
        path = Path(cache.settings.plan_file)
        good = solved_plan(ext).to_dict()
        for i, broken in enumerate([b"{not json", orjson.dumps({**good, "format": "something/else"}),
                                    orjson.dumps({**good, "classes": {"k": {"requests": {}, "count": 2, "unplaced": 0,
                                                                            "slots": {"ghost-node": 2}}}}),
                                    orjson.dumps({**good, "classes": {"k": {"requests": {}, "count": 1, "unplaced": 0,
                                                                            "slots": {"n1": -1}}}})]):
            path.write_bytes(broken)
            cache._file_mtime = None  # same-second rewrites keep the mtime
            cache.load_file()
            assert cache.describe()["plan"] is None, f"broken plan {i} was installed"
            assert scores(client, PENDING[0]) == heuristic
        assert metric(client, 'kso_plan_events_total{event="rejected:corrupt"}') == 4
        assert "plan rejected" in caplog.text
        # A plan older than KSO_PLAN_MAX_AGE_S is refused at load ...
        stale = {**good, "createdAt": time.time() - 10_000}
        path.write_bytes(orjson.dumps(stale))
        cache._file_mtime = None
        cache.load_file()
        assert cache.describe()["plan"] is None
        assert metric(client, 'kso_plan_events_total{event="rejected:stale"}') == 1
        # ... and a plan that ages past it in memory stops being used, with a metric.
        plan = solved_plan(ext)
        assert cache.install(plan, "test")
        plan.created_at = time.time() - 10_000
        assert scores(client, PENDING[0]) == heuristic
        assert metric(client, 'kso_plan_events_total{event="stale"}') == 1
        assert metric(client, 'kso_plan_decisions_total{result="none"}') >= 1


def test_restarted_extender_answers_from_the_plan_file(tmp_path: Path) -> None:
    with plan_extender(tmp_path) as (_, ext, cache):
        plan = solved_plan(ext, "load-balance")
        write_plan(plan, cache.settings.plan_file)
    with plan_extender(tmp_path) as (client, _, cache2):
        cache2.load_file()
        assert cache2.describe()["plan"]["plan_id"] == plan.plan_id
        _, explain = client.post("/debug/explain", {"Pod": PENDING[0], "NodeNames": ["n1", "n2", "n3"]})
        assert explain["plan"]["plan"]["policy"] == "load-balance"
        # load-balance spreads the three pods: one slot on each node, so every node ranks first.
        assert sorted(n["plan_slots"] for n in explain["nodes"]) == [1, 1, 1]
        assert all(n["score"] == 10 for n in explain["nodes"])


def test_background_solve_in_a_separate_process(tmp_path: Path) -> None:
    """Out of the box the background solve waits for load statistics: with none (no forecast, no load
    annotations) a binpack plan would fill nodes by requests alone, so the agents decide and the metric
    says why. Once a node carries kube-safe-scheduler's load annotations, the plan is solved in its child."""
    with plan_extender(tmp_path, {"KSO_SOLVER_TIME_LIMIT_S": "5", "KSO_PLAN_INTERVAL_S": "5"},
                       nodes=UNMEASURED) as (client, ext, cache):
        jobs = start_plan_jobs(ext, solve=True, first_solve_delay_s=0.1)
        assert jobs is not None
        try:
            deadline = time.time() + 60
            while metric(client, 'kso_plan_solves_total{result="no-statistics"}') < 1 and time.time() < deadline:
                time.sleep(0.2)
            assert metric(client, 'kso_plan_solves_total{result="no-statistics"}') >= 1
            assert cache.describe()["plan"] is None
            for name in ("n1", "n2", "n3"):  # the plan then pulls onto them: their load is measured
                ext.state.upsert_node(node_from_k8s(make_node(name, cpu="4", memory="8Gi", annotations={
                    "mean-free-cpu": "3500", "std-free-cpu": "100", "mean-free-memory": "7000", "std-free-memory": "100"})))
            deadline = time.time() + 90
            while cache.describe()["plan"] is None and time.time() < deadline:
                time.sleep(0.2)
            described = cache.describe()
            assert described["plan"] is not None, described
            assert described["source"] == "solver"
            assert Path(cache.settings.plan_file).exists()  # saved for the next restart
            assert metric(client, 'kso_plan_solves_total{result="ok"}') == 1
            assert max(scores(client, PENDING[1]).values()) == 10
        finally:
            jobs.close()


def test_without_statistics_the_plan_is_solved_when_asked(tmp_path: Path) -> None:
    with plan_extender(tmp_path, {"KSO_SOLVER_TIME_LIMIT_S": "5", "KSO_PLAN_WITHOUT_STATISTICS": "true"},
                       nodes=UNMEASURED) as (_, ext, cache):
        solver = PlanSolver(cache, usage=lambda state: {})
        try:
            assert solver.solve() is not None
        finally:
            solver.close()


def test_reoptimize_targets_from_the_configmap_rank_first(tmp_path: Path, control_plane: Any, kube_namespace: str) -> None:
    """``kso reoptimize --execute`` publishes its targets to ConfigMap kso-plan; the extender reads it
    from the real kube-apiserver and ranks those nodes first, next to (not instead of) its own plan."""
    from kubernetes import client as k8s

    ns = kube_namespace
    api = control_plane.api_client()
    core = k8s.CoreV1Api(api)

    def configmap(text: str) -> dict[str, Any]:
        return {"metadata": {"name": "kso-plan", "namespace": ns}, "data": {"plan.json": text}}

    with plan_extender(tmp_path) as (client, ext, cache):
        cache.poll_configmap(api, ns, "kso-plan")  # none yet: nothing happens, nothing is reported
        assert cache.describe()["plan"] is None and cache.last_error is None
        own = solved_plan(ext)  # the solver's plan: binpack puts all three on one node
        cache.install(own, "solver")
        target_own = next(iter(next(iter(own.classes.values())).slots))
        migration = solved_plan(ext).to_dict()
        other = next(n for n in ("n1", "n2", "n3") if n != target_own)
        (key, cls), = migration["classes"].items()
        cls["slots"], cls["unplaced"], cls["count"] = {other: 1}, 0, 1
        cls.pop("pods")  # the class now stands for one pod to come, not the three pending ones
        migration["planId"] = "reopt-1"
        core.create_namespaced_config_map(ns, configmap(orjson.dumps(migration).decode()))
        cache.poll_configmap(api, ns, "kso-plan")
        described = cache.describe()
        assert described["migration_plan"]["plan_id"] == "reopt-1" and described["plan"]["plan_id"] == own.plan_id
        got = scores(client, PENDING[0])
        assert got[other] == 10 and got[target_own] == 10
        # Binding there takes the re-optimisation's slot first.
        status, body = client.post("/bind", {"PodName": "p1", "PodNamespace": "default", "PodUID": "uid-default-p1",
                                             "Node": other})
        assert status == 200 and body["Error"] == ""
        assert cache.describe()["migration_free_slots"] == 0
        # A corrupt ConfigMap is reported and the plans in use stay.
        core.replace_namespaced_config_map("kso-plan", ns, configmap("{broken"))
        cache.poll_configmap(api, ns, "kso-plan")
        assert "not valid JSON" in (cache.last_error or "")
        assert cache.describe()["plan"]["plan_id"] == own.plan_id


def test_plan_counts_only_pending_pods_of_the_named_schedulers() -> None:
    ours = make_pod("ours", cpu="1", memory="1Gi")
    ours["spec"]["schedulerName"] = "kso-scheduler"
    unnamed = make_pod("unnamed", cpu="2", memory="1Gi")
    del unnamed["spec"]["schedulerName"]  # the API server would default it to default-scheduler
    other = make_pod("other", cpu="3", memory="1Gi")
    other["spec"]["schedulerName"] = "volcano"
    bound = make_pod("bound", cpu="1", memory="1Gi", node="n1")
    bound["spec"]["schedulerName"] = "volcano"
    state = make_state(NODES, [ours, unnamed, other, bound])

    def planned(names: list[str]) -> dict[float, int]:
        problem = problem_from_state(state, None, 0.9, 0.3, scheduler_names=names)
        return {c.requests["cpu"] / 1000: c.count for c in problem.classes}  # millicores -> cores

    assert planned([]) == {1.0: 1, 2.0: 1, 3.0: 1}
    assert planned(["kso-scheduler"]) == {1.0: 1}
    assert planned(["kso-scheduler", "default-scheduler"]) == {1.0: 1, 2.0: 1}
    # a bound pod of another scheduler still loads its node
    problem = problem_from_state(state, None, 0.9, 0.3, scheduler_names=["kso-scheduler"])
    assert {n.name: n.requested.get("cpu", 0.0) for n in problem.nodes}["n1"] == 1000.0
    assert load_settings(PlanSettings, {"KSO_SCHEDULER_NAMES": "kso-scheduler, default-scheduler"}).scheduler_names == [
        "kso-scheduler", "default-scheduler"]


def test_plan_solver_close_ends_its_process() -> None:
    """The extender's solver process must not outlive it (an idle worker stayed after SIGTERM): close()
    stops a solve in flight, and the caller gets the FFD fallback at once."""
    import threading

    from optimizer.plan.openb import openb_problem
    from optimizer.plan.protected_solver import FFD_STATUS, ProtectedSolver

    solver = ProtectedSolver(retries=1)
    got: list[Any] = []
    options = SolverOptions(time_limit_s=120, full_model_limit=0, lns_nodes=4, lns_step_s=0.5)
    thread = threading.Thread(target=lambda: got.append(solver.solve_plan(openb_problem(30, 120, seed=0), options)))
    thread.start()
    deadline = time.monotonic() + 60
    while solver._proc is None and time.monotonic() < deadline:
        time.sleep(0.1)
    proc = solver._proc
    assert proc is not None and proc.is_alive()
    solver.close()
    thread.join(timeout=30)
    assert not thread.is_alive() and not proc.is_alive()
    assert got[0].status == FFD_STATUS
