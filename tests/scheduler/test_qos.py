"""scheduler.qos: QoS maths, the table, SLO annotations, clocks and the queue order."""

from __future__ import annotations

import math

import pytest

from kso.core.binder import RecordingBinder
from scheduler.core import Scheduler, SchedulerSettings, StaticClocks
from scheduler.qos import (
    clock_from_k8s,
    controller_table,
    format_table,
    go_duration,
    parse_slo,
    sort_key,
)
from tests.support.fixtures import make_node, make_pod, make_state
from tests.support.scheduler_cases import (
    T0,
    Recorded,
    clock,
    kso_pod,
)


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (0.591, "591ms"), (-142.541, "-2m22.541s"), (1861, "31m1s"),
                                           (7446, "2h4m6s"), (636, "10m36s"), (-34.946, "-34.946s"), (60, "1m0s"),
                                           (3600, "1h0m0s"), (1.5, "1.5s")])
def test_go_duration_prints_like_go(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_pod_times_in_each_phase() -> None:
    now = T0 + 100
    assert clock("p", "c").times(now) == (0.0, 100.0, 0.0)  # pending: waiting since creation
    assert clock("p", "c", scheduled=T0 + 30).times(now) == (0.0, 30.0, 70.0)  # bound, not Ready
    assert clock("p", "c", scheduled=T0 + 30, ready=T0 + 40).times(now) == (60.0, 30.0, 10.0)
    # conditions older than the creation (clock skew, a test's patch) clamp at 0, never negative
    assert clock("p", "c", scheduled=T0 - 50, ready=T0 - 20).times(now) == (120.0, 0.0, 30.0)


def test_controller_table_sums_pods_and_takes_the_strictest_slo() -> None:
    now = T0 + 100
    clocks = [clock("a1", "a", slo=0.5, scheduled=T0 + 10, ready=T0 + 20),  # R 80 W 10 B 10
              clock("a2", "a", slo=0.9),                                      # W 100
              clock("a3", "a", slo=None, scheduled=T0 + 40),                 # W 40 B 60
              clock("b1", "b", scheduled=T0, ready=T0)]                       # R 100, default SLO
    table = controller_table(clocks, now, default_slo=0.8)
    a, b = table["a"], table["b"]
    assert (a.running, a.waiting, a.binding, a.pods, a.slo) == (80.0, 150.0, 70.0, 3, 0.9)
    assert a.qos == pytest.approx(80 / 300)
    assert a.ttv == pytest.approx(80 / 0.9 - 300)
    assert (b.qos, b.slo, b.ttv) == (1.0, 0.8, pytest.approx(100 / 0.8 - 100))
    # a controller with no time yet is at QoS 1 and TTV 0 (the seed's first table row)
    fresh = controller_table([clock("f", "f")], T0)["f"]
    assert (fresh.qos, fresh.ttv) == (1.0, 0.0)


def test_table_text_is_the_seeds_layout_most_urgent_first() -> None:
    table = controller_table([clock("x", "50_slo_1", slo=0.5, scheduled=T0 + 636, ready=T0 + 636.591),
                              clock("y", "relaxed", scheduled=T0, ready=T0)], T0 + 636.591 + 493)
    lines = format_table(table).splitlines()
    assert lines[0].split() == ["CONTROLLER", "QOS/SLO", "TTV", "RUNNING", "WAITING", "BINDING"]
    assert lines[1].split() == ["50_slo_1", "0.44/0.50", "-2m23.591s", "8m13s", "10m36s", "591ms"]
    assert lines[2].split()[0] == "relaxed"
    assert len({len(line) for line in lines}) == 1  # right-aligned fixed-width columns


@pytest.mark.parametrize("raw, value", [("0.9", 0.9), ("1", 1.0), ("0", None), ("1.5", None), ("x", None), (None, None)])
def test_slo_annotation(raw: str | None, value: float | None) -> None:
    assert parse_slo(raw) == value


def test_clock_from_a_pod_object_groups_by_annotation_then_owner() -> None:
    pod = make_pod("p", namespace="ns")
    pod["metadata"].update(creationTimestamp="2026-11-23T06:00:00Z", annotations={"controller": "web", "slo": "0.95"})
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-23T06:00:10Z"},
                                   {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-23T06:00:20Z"}]
    c = clock_from_k8s(pod, "controller", "slo")
    assert (c.controller, c.slo, c.scheduled - c.created, math.isnan(c.ready)) == ("web", 0.95, 10.0, True)
    owned = make_pod("q", namespace="ns")
    owned["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-1", "controller": True}]
    assert clock_from_k8s(owned, "controller", "slo").controller == "ns/ReplicaSet/web-1"
    assert clock_from_k8s(make_pod("r", namespace="ns"), "controller", "slo").controller == "ns/Pod/r"
    bad = make_pod("s")
    bad["metadata"]["creationTimestamp"] = "yesterday"
    assert math.isnan(clock_from_k8s(bad, "controller", "slo").created)  # unusable -> unknown, no exception


def test_gated_and_deleting_pods_are_held() -> None:
    gated = make_pod("g")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    deleting = make_pod("d")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-23T06:00:00Z"
    assert clock_from_k8s(gated, "controller", "slo").held == "scheduling gates"
    assert clock_from_k8s(deleting, "controller", "slo").held == "being deleted"
    assert clock_from_k8s(make_pod("f"), "controller", "slo").held == ""
    pods = [kso_pod("g", "100m", "c", "0.8"), kso_pod("f", "100m", "c", "0.8")]
    pods[0]["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    state = make_state([make_node("n")], pods)
    clocks = StaticClocks({c.uid: c for c in (clock_from_k8s(p, "controller", "slo") for p in pods)})
    sched = Scheduler(["kso"], SchedulerSettings(), state, clocks, RecordingBinder(), Recorded(), None)
    first = sched.schedule_one()
    assert first is not None and first.pod.name == "f" and sched.schedule_one() is None


def test_qos_order_system_first_then_lower_ttv_then_priority_age_name() -> None:
    now = T0 + 100
    clocks = [clock("late", "urgent", slo=0.99, created=T0 + 50, scheduled=math.nan),
              clock("early", "urgent", slo=0.99, created=T0 + 10),
              clock("run", "urgent", slo=0.99, scheduled=T0, ready=T0),
              clock("hi", "urgent", slo=0.99, created=T0 + 50, priority=5),
              clock("relaxed", "relaxed", slo=0.5, scheduled=T0, ready=T0),
              clock("relaxed-pending", "relaxed", slo=0.5),
              clock("dns", "kube-dns", namespace="kube-system", slo=0.5, scheduled=T0, ready=T0),
              clock("dns-pending", "kube-dns", namespace="kube-system")]
    table = controller_table(clocks, now)
    assert table["urgent"].ttv < table["relaxed"].ttv
    pending = [c for c in clocks if math.isnan(c.scheduled)]
    ordered = [c.name for c in sorted(pending, key=lambda c: sort_key("qos", c, table))]
    assert ordered == ["dns-pending", "hi", "early", "late", "relaxed-pending"]
    assert [c.name for c in sorted(pending, key=lambda c: sort_key("fifo", c, table))] == \
        ["relaxed-pending", "dns-pending", "early", "hi", "late"]
    assert [c.name for c in sorted(pending, key=lambda c: sort_key("priority", c, table))][0] == "hi"
