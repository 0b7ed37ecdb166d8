"""scheduler.core: one Scheduler over a ClusterState (no API server: binds recorded), seed mode and default mode."""

from __future__ import annotations

import pytest

from kso.core.binder import RecordingBinder
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
