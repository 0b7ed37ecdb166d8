"""kso scheduler's capacity signal without an API server: the scheduler's own filter calls are what the signal
records (the same safe-agent predicate the extender serves), and the signal runs once per term as leader, each
term ending with its placeholders deleted. The Kubernetes side (kso.core.capacity.CapacityReconciler) is a
recording stand-in here; tests/scheduler/test_capacity_on_control_plane.py runs the real one."""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import generate_latest

from decisions.capacity import CapacitySignal
from decisions.engine import DecisionEngine
from extender.config import load_config
from kso.core.binder import RecordingBinder
from kso.core.capacity import ApplyResult, CapacitySettings, Owner, PlaceholderSpec
from scheduler.core import Scheduler, SchedulerSettings, StaticClocks
from tests.support.fixtures import make_node, make_state
from tests.support.scheduler_cases import Recorded, kso_pod

HOT = {"mean-free-cpu": "100", "std-free-cpu": "50", "forcasted-free-cpu": "100",
       "mean-free-memory": "6000", "std-free-memory": "100", "forcasted-free-memory": "6000"}


class RecordingReconciler:
    """What CapacitySignal asks of the cluster, recorded."""

    def __init__(self) -> None:
        self.owner = Owner("sched-test")
        self.calls: list[tuple[str, Any]] = []
        self.applied = threading.Event()
        self.held: dict[str, str] = {}  # (nothing to release between rounds: apply records, creates nothing)

    def apply(self, specs: list[PlaceholderSpec], live: set[str] | None = None, still_pending: Any = None
              ) -> ApplyResult:
        self.calls.append(("apply", [s.for_key for s in specs]))
        self.applied.set()
        return ApplyResult(created=[s.name() for s in specs])

    def live_holders(self) -> set[str]:
        return {self.owner.identity}

    def reap(self, live: set[str] | None = None) -> list[str]:
        self.calls.append(("reap", None))
        return []

    def clear(self) -> list[str]:
        self.calls.append(("clear", None))
        return []

    def close(self) -> None:
        pass


def scheduler_with_signal(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
                          ) -> tuple[Scheduler, CapacitySignal, RecordingReconciler]:
    state = make_state(nodes, pods)
    engine = DecisionEngine(load_config({"KSO_AGENTS": "safe", "KSO_SAFE_MAX_HOLD_S": "inf"}), state)
    sched = Scheduler(["kso"], SchedulerSettings(), state, StaticClocks(), RecordingBinder(), Recorded(), engine)
    reconciler = RecordingReconciler()
    signal = CapacitySignal(engine, state, reconciler, CapacitySettings(enabled=True, interval_s=0.5),  # type: ignore[arg-type]
                            registry=sched.metrics.registry)
    return sched, signal, reconciler


def test_a_pod_the_scheduler_refuses_on_every_node_is_shown_and_one_that_fits_nowhere_by_requests_is_not() -> None:
    nodes = [make_node(f"hot-{i}", cpu="4", memory="8Gi", annotations=HOT) for i in range(3)]
    pods = [kso_pod("web", "500m", "web", "0.9"), kso_pod("huge", "5", "huge", "0.9")]
    sched, signal, _ = scheduler_with_signal(nodes, pods)
    decisions = {d.pod.name: d for d in iter(sched.schedule_one, None)}
    assert decisions["web"].node is None and decisions["huge"].node is None
    wanted = signal.tick()
    # huge fits no node by its requests: kube-scheduler's own verdict on it is what the autoscaler reads
    assert [(s.for_key, s.avoid) for s in wanted] == [("default/web", ("hot-0", "hot-1", "hot-2"))]
    assert signal.refused == 1
    assert b"kso_capacity_placeholders 1.0" in generate_latest(sched.metrics.registry)


def test_a_cool_node_means_no_placeholder() -> None:
    nodes = [make_node("hot", cpu="4", memory="8Gi", annotations=HOT), make_node("cool", cpu="4", memory="8Gi")]
    sched, signal, _ = scheduler_with_signal(nodes, [kso_pod("web", "500m", "web", "0.9")])
    d = sched.schedule_one()
    assert d is not None and d.node == "cool"
    assert signal.tick() == [] and signal.refused == 0


def test_the_signal_runs_once_per_term_and_each_term_ends_with_its_placeholders_deleted() -> None:
    nodes = [make_node("hot", cpu="4", memory="8Gi", annotations=HOT)]
    sched, signal, reconciler = scheduler_with_signal(nodes, [kso_pod("web", "500m", "web", "0.9")])
    assert sched.schedule_one() is not None
    for _ in range(2):  # two terms as leader
        reconciler.applied.clear()
        signal.start()
        signal.start()  # a second start in the same term starts nothing more
        assert reconciler.applied.wait(10)
        assert signal.running
        signal.stop()
        signal.stop()  # the serving thread and the election thread may both stop it: one clean-up
        assert not signal.running
    kinds = [kind for kind, _ in reconciler.calls]
    # each term: clean start (clear, reap), rounds (reap, apply), and one clear at its end
    terms = "".join({"clear": "c", "reap": "r", "apply": "a"}[k] for k in kinds).split("cr")[1:]
    assert len(terms) == 2 and all(t.startswith("ra") and t.endswith("c") and t.count("c") == 1 for t in terms), kinds
    assert ("apply", ["default/web"]) in reconciler.calls


def test_a_placeholder_excludes_every_node_and_is_remade_only_when_a_node_it_lets_in_turns_hot() -> None:
    """Every node there is when the placeholder is made is excluded (by its hostname label; by name without one),
    hot or not; a node added later leaves the placeholder as it is until kso refuses the pod there too."""
    from kso.core.objects import node_from_k8s

    nodes = [make_node(f"hot-{i}", cpu="4", memory="8Gi", annotations=HOT) for i in range(2)]
    other = make_node("other", cpu="4", memory="8Gi")
    other["metadata"]["labels"] = {}  # no hostname label
    sched, signal, _ = scheduler_with_signal([*nodes, other], [kso_pod("web", "500m", "web", "0.9")])
    state = signal.state
    signal.log.record(state.pending_pods()[0], ["hot-0", "hot-1"])
    [spec] = signal.tick()
    assert spec.exclude == (("hot-0", "hot-0"), ("hot-1", "hot-1"), ("other", ""))
    state.upsert_node(node_from_k8s(make_node("new", cpu="4", memory="8Gi", annotations=HOT)))
    [same] = signal.tick()
    assert same.name() == spec.name(), "a node added later: the placeholder stays"
    signal.log.record(state.pending_pods()[0], ["new"])  # kso refused the pod on the new node too
    [remade] = signal.tick()
    assert ("new", "new") in remade.exclude and remade.name() != spec.name()
