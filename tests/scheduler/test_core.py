"""scheduler.core: one Scheduler over a ClusterState (no API server: binds recorded), seed mode and default mode."""

from __future__ import annotations

import threading

import pytest

from kso.core.binder import RecordingBinder
from kso.core.objects import PodInfo
from scheduler.core import Scheduler, SchedulerSettings, StaticClocks
from tests.support.fixtures import make_node, make_pod, make_state
from tests.support.scheduler_cases import (
    T0,
    Recorded,
    clock,
    kso_pod,
)


def test_scheduler_seed_mode_order_and_backoff() -> None:
    nodes = [make_node("n0", cpu="1", annotations={"hightower.com/cost": "3"}),
             make_node("n1", cpu="1", annotations={"hightower.com/cost": "1"}),
             make_node("n2", cpu="1", annotations={"hightower.com/cost": "2"})]
    running = [make_pod("r-strict", cpu="0", node="n0"), make_pod("r-lax", cpu="0", node="n0")]
    pending = [kso_pod("lax-0", "600m", "lax", "0.5"), kso_pod("strict-0", "600m", "strict", "0.99"),
               kso_pod("strict-1", "600m", "strict", "0.99"), kso_pod("huge", "5", "lax", "0.5"),
               make_pod("not-ours")]
    state = make_state(nodes, running + pending)
    clocks = StaticClocks({c.uid: c for c in [
        clock("r-strict", "strict", slo=0.99, scheduled=T0, ready=T0), clock("r-lax", "lax", slo=0.5, scheduled=T0, ready=T0),
        *[clock(p["metadata"]["name"], p["metadata"].get("annotations", {}).get("controller", "x"), created=T0 + 50)
          for p in pending]]})
    events = Recorded()
    sched = Scheduler(["kso"], SchedulerSettings(), state, clocks, RecordingBinder(), events, None,
                      seed_compatible=True, clock=lambda: T0 + 100)
    decisions = []
    while (d := sched.schedule_one()) is not None:
        decisions.append((d.pod.name, d.node))
    assert sched.drain()
    # strict (TTV 100/0.99 - 200 < 0) before lax (100/0.5 - 150 > 0), a controller's pods by name at equal
    # age; each pod to the cheapest node with room
    assert decisions == [("strict-0", "n1"), ("strict-1", "n2"), ("huge", None), ("lax-0", "n0")]
    assert ("Scheduled", "strict-0", "Successfully assigned strict-0 to n1") in events.events
    failed = [e for e in events.events if e[0] == "FailedScheduling"]
    assert failed and failed[0][2].startswith("pod (huge) failed to fit in any node\nfit failure on node (n0)")
    assert sched.backoff[pending[3]["metadata"]["uid"]].attempts == 1
    assert sched.schedule_one() is None  # backing off, and nothing else is queued


def test_scheduler_default_mode_prefers_cheaper_node(monkeypatch: pytest.MonkeyPatch) -> None:
    from extender.config import load_config
    from extender.verbs import Extender
    from scheduler.cli import with_cost_agent

    nodes = [make_node(f"n{i}", annotations={"hightower.com/cost": str(c)}) for i, c in enumerate((5, 2, 9))]
    state = make_state(nodes, [kso_pod("p", "100m", "c", "0.8")])
    config = with_cost_agent(load_config({"KSO_AGENTS": "safe,congestion", "KSO_WEIGHTS": "safe-balance=1,congestion=1"}),
                             10)
    assert config.settings.weights["cost"] == 10 and "cost" in config.settings.agents
    ext = Extender(config, state, RecordingBinder())
    sched = Scheduler(["kso"], SchedulerSettings(), state, StaticClocks(), RecordingBinder(), Recorded(), ext)
    d = sched.schedule_one()
    assert d is not None and d.node == "n1"


class GatedStatus:
    """Records condition patches; the first one waits until ``release`` (so later ones queue up behind it)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool]] = []
        self.entered, self.release = threading.Event(), threading.Event()

    def unschedulable(self, pod: PodInfo, message: str, transition: bool) -> None:
        self.entered.set()
        assert self.release.wait(10)
        self.calls.append((pod.name, message, transition))


def test_condition_writer_sends_each_pods_latest_new_message_once_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer behind PodScheduled=False: a message the pod has (or is about to get) is not sent again, a newer
    message replaces one not yet sent, only the first write of a pod starts a transition, and a full backlog
    drops (and counts) rather than grows."""
    pending = [kso_pod(n, "100m", "c", "0.9") for n in ("a", "b", "c")]
    state = make_state([make_node("n0", cpu="1")], pending)
    status = GatedStatus()
    sched = Scheduler(["kso"], SchedulerSettings(), state, StaticClocks(), RecordingBinder(), Recorded(), None,
                      status=status)
    a, b, c = (state.pending_pod(p["metadata"]["uid"]) for p in pending)
    try:
        sched._mark_unschedulable(a, "m1")
        assert status.entered.wait(10)  # the writer is busy with a/m1
        sched._mark_unschedulable(a, "m1")  # already on its way: not queued again
        sched._mark_unschedulable(b, "x")
        sched._mark_unschedulable(b, "y")  # replaces b/x, not yet sent
        monkeypatch.setattr("scheduler.core.STATUS_BACKLOG", 2)
        sched._mark_unschedulable(c, "z")  # a and b wait: the backlog is full
        status.release.set()
        assert sched.drain(10)
        assert status.calls == [("a", "m1", True), ("b", "y", True)]
        sched._mark_unschedulable(a, "m1")  # the pod has it
        sched._mark_unschedulable(a, "m2")  # a new message, the condition stays False: no new transition
        sched._mark_unschedulable(c, "z")  # asked again after the drop: sent now
        assert sched.drain(10)
        assert status.calls[2:] == [("a", "m2", False), ("c", "z", True)]
        registry = sched.metrics.registry
        assert [registry.get_sample_value("kso_scheduler_pod_condition_patches_total", {"result": r})
                for r in ("patched", "dropped")] == [4, 1]
    finally:
        status.release.set()
        sched.close()


class RefusingStatus:
    """A status sink answering every patch as an API server without the pods/status rule would (403)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def unschedulable(self, pod: PodInfo, message: str, transition: bool) -> None:
        from kubernetes.client.exceptions import ApiException

        self.calls.append(pod.name)
        raise ApiException(status=403, reason="Forbidden")


def test_condition_writer_skips_an_assumed_pod_and_pauses_after_a_403() -> None:
    """A pod assumed for its bind since the patch was queued gets none (the Binding sets PodScheduled=True); after a
    403 the writer sends nothing for STATUS_REFUSED_PAUSE_S (dropped, counted) instead of a refused request per pod
    and attempt."""
    from scheduler.core import STATUS_REFUSED_PAUSE_S

    pending = [kso_pod(n, "100m", "c", "0.9") for n in ("a", "b", "c")]
    state = make_state([make_node("n0", cpu="1")], pending)
    status = RefusingStatus()
    clock = [1000.0]
    sched = Scheduler(["kso"], SchedulerSettings(), state, StaticClocks(), RecordingBinder(), Recorded(), None,
                      status=status, clock=lambda: clock[0])
    a, b, c = (state.pending_pod(p["metadata"]["uid"]) for p in pending)
    try:
        state.assume(a, "n0")
        sched._mark_unschedulable(a, "m")
        assert sched.drain(10) and status.calls == []
        sched._mark_unschedulable(b, "m")
        assert sched.drain(10) and status.calls == ["b"]
        sched._mark_unschedulable(c, "m")
        sched._mark_unschedulable(b, "m2")
        assert sched.drain(10) and status.calls == ["b"]
        clock[0] += STATUS_REFUSED_PAUSE_S + 1
        sched._mark_unschedulable(c, "m")
        assert sched.drain(10) and status.calls == ["b", "c"]
        registry = sched.metrics.registry
        assert [registry.get_sample_value("kso_scheduler_pod_condition_patches_total", {"result": r})
                for r in ("error", "dropped")] == [2, 2]
    finally:
        sched.close()
