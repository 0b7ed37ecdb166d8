"""kso scheduler's pure parts: QoS maths and the queue order, kube-scheduler's reasons and message,
Hightower's choice, the cost agent's score, and one Scheduler over a ClusterState (no API server: bindings
are recorded, which is not what these tests are about)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kso.core.binder import RecordingBinder
from kso.core.objects import PodInfo, node_from_k8s, pod_from_k8s
from kso.decisions.agents.cost import cost_score
from scheduler.core import Scheduler, SchedulerSettings, StaticClocks
from scheduler.feasibility import (
    failed_message,
    hightower_choice,
    hightower_fit,
    kube_reason,
    resource_reasons,
    rule_reasons,
)
from scheduler.qos import (
    PodClock,
    clock_from_k8s,
    controller_table,
    format_table,
    go_duration,
    parse_slo,
    sort_key,
)
from tests.support.fixtures import make_node, make_pod, make_state

T0 = 1_800_000_000.0


def clock(name: str, controller: str, *, slo: float | None = None, created: float = T0, scheduled: float = math.nan,
          ready: float = math.nan, namespace: str = "default", priority: int = 0) -> PodClock:
    return PodClock(f"uid-{namespace}-{name}", namespace, name, controller, slo, created, scheduled, ready, priority)


# ---- QoS maths ----------------------------------------------------------------------------------
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
    pods = [_kso_pod("g", "100m", "c", "0.8"), _kso_pod("f", "100m", "c", "0.8")]
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


# ---- kube-scheduler's filters and message -------------------------------------------------------
def test_reasons_and_deduplicated_message() -> None:
    nodes = [make_node("small", cpu="1"), make_node("gpu", cpu="8", **{"nvidia.com/gpu": "1"}),
             make_node("tainted", cpu="8"), make_node("cordoned", cpu="8"), make_node("other", cpu="8")]
    nodes[2]["spec"]["taints"] = [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    nodes[3]["spec"]["unschedulable"] = True
    nodes[4]["metadata"]["labels"]["zone"] = "b"
    for n in nodes[:4]:
        n["metadata"]["labels"]["zone"] = "a"
    state = make_state(nodes)
    pod = make_pod("p", cpu="2")
    pod["spec"]["nodeSelector"] = {"zone": "a"}
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    info = pod_from_k8s(pod)
    names = [n["metadata"]["name"] for n in nodes]
    view = state.view(names)
    rules = rule_reasons(info, view.nodes)
    assert rules == {2: "node(s) had untolerated taint {dedicated: db}", 3: "node(s) were unschedulable",
                     4: "node(s) didn't match Pod's node affinity/selector"}
    res = resource_reasons(info, view)
    assert res[0] in ("Insufficient cpu", "Insufficient nvidia.com/gpu") and 1 not in res
    assert failed_message(5, {**res, **rules, 1: "Insufficient cpu"}) == (
        "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint "
        "{dedicated: db}, 1 node(s) were unschedulable, 2 Insufficient cpu.")  # Go: sort.Strings of "n reason"
    assert kube_reason("P(util > 90%) = 0.5 > eps") == "P(util > 90%) = 0.5 > eps"  # agents' reasons pass through


def test_too_many_pods() -> None:
    state = make_state([make_node("n", pods="1")], [make_pod("on", node="n")])
    assert resource_reasons(pod_from_k8s(make_pod("p")), state.view(["n"])) == {0: "Too many pods"}


# ---- Hightower ------------------------------------------------------------------------------------
def _nodes(*prices: str | None) -> list[Any]:
    return [node_from_k8s(make_node(f"n{i}", annotations={} if p is None else {"hightower.com/cost": p}))
            for i, p in enumerate(prices)]


def test_hightower_cheapest_first_on_ties_first_if_none_priced() -> None:
    assert hightower_choice(_nodes("5", "3", "3", "4")) == 1
    assert hightower_choice(_nodes(None, None)) == 0
    assert hightower_choice(_nodes(None, "9", None, "2")) == 3
    # ParseFloat(s, 32): prices equal as float32 are a tie, so the first wins
    assert hightower_choice(_nodes("0.100000001", "0.1")) == 0
    assert hightower_choice(_nodes("0.1001", "0.1")) == 1
    assert hightower_choice(_nodes("cheap", "7")) == 1  # unparsable: logged and treated as unpriced


def test_hightower_fit_is_free_cpu_only() -> None:
    state = make_state([make_node("a", cpu="1"), make_node("b", cpu="2", memory="1Ki")], [make_pod("x", cpu="600m", node="a")])
    fits, failures = hightower_fit(pod_from_k8s(make_pod("p", cpu="500m", memory="4Gi")), state.view(["a", "b"]))
    assert fits == [1] and failures == {0: "fit failure on node (a): Insufficient CPU"}


# ---- cost agent ---------------------------------------------------------------------------------
def test_cost_score() -> None:
    assert cost_score(np.array([1.0, 3.0, 2.0, np.nan])).tolist() == [10, 0, 5, 0]
    assert cost_score(np.array([2.0, 2.0])).tolist() == [10, 10]


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=30))
def test_cost_score_ranks_cheaper_higher(costs: list[float]) -> None:
    s = cost_score(np.array(costs))
    assert ((0 <= s) & (s <= 10)).all()
    order = np.argsort(costs, kind="stable")
    assert (np.diff(s[order]) <= 0).all()


# ---- one Scheduler over a ClusterState ------------------------------------------------------------
class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def scheduled(self, pod: PodInfo, node: str, message: str) -> None:
        self.events.append(("Scheduled", pod.name, message))

    def failed(self, pod: PodInfo, message: str) -> None:
        self.events.append(("FailedScheduling", pod.name, message))


def _kso_pod(name: str, cpu: str, controller: str, slo: str) -> dict[str, Any]:
    pod = make_pod(name, cpu=cpu)
    pod["spec"]["schedulerName"] = "kso"
    pod["metadata"]["annotations"] = {"controller": controller, "slo": slo}
    return pod


def test_scheduler_seed_mode_order_and_backoff() -> None:
    nodes = [make_node("n0", cpu="1", annotations={"hightower.com/cost": "3"}),
             make_node("n1", cpu="1", annotations={"hightower.com/cost": "1"}),
             make_node("n2", cpu="1", annotations={"hightower.com/cost": "2"})]
    running = [make_pod("r-strict", cpu="0", node="n0"), make_pod("r-lax", cpu="0", node="n0")]
    pending = [_kso_pod("lax-0", "600m", "lax", "0.5"), _kso_pod("strict-0", "600m", "strict", "0.99"),
               _kso_pod("strict-1", "600m", "strict", "0.99"), _kso_pod("huge", "5", "lax", "0.5"),
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
    state = make_state(nodes, [_kso_pod("p", "100m", "c", "0.8")])
    config = with_cost_agent(load_config({"KSO_AGENTS": "safe,congestion", "KSO_WEIGHTS": "safe-balance=1,congestion=1"}),
                             10)
    assert config.settings.weights["cost"] == 10 and "cost" in config.settings.agents
    ext = Extender(config, state, RecordingBinder())
    sched = Scheduler(["kso"], SchedulerSettings(), state, StaticClocks(), RecordingBinder(), Recorded(), ext)
    d = sched.schedule_one()
    assert d is not None and d.node == "n1"


@pytest.mark.parametrize("env, argv, message", [
    ({"KSO_SCHEDULER_LEASE": "bad"}, [], "KSO_SCHEDULER_LEASE='bad' is not namespace/name"),
    ({}, ["--debug-address", "127.0.0.1:x"], "port 'x' is not a number"),
    ({}, ["--debug-address", "127.0.0.1:70000"], "port out of range"),
])
def test_bad_settings_fail_with_a_message_before_anything_starts(env: dict[str, str], argv: list[str], message: str,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from kso.cli import main as kso_main

    # the command configures logging (LOG_LEVEL on kso's loggers, a handler on the root): undone after the test
    monkeypatch.setattr(logging.getLogger(), "handlers", list(logging.getLogger().handlers))
    monkeypatch.setattr(logging.getLogger(), "level", logging.getLogger().level)
    monkeypatch.setattr(logging.getLogger("kso"), "level", logging.getLogger("kso").level)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert kso_main(["scheduler", "--kubeconfig", "/nonexistent", *argv]) == 1
    out = capsys.readouterr()
    assert message in out.err and message not in out.out  # errors go to stderr


def test_kso_scheduler_reads_its_settings_from_the_config_file_and_sets_only_kso_loggers(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from kso.cli import main as kso_main
    from scheduler.cli import load_scheduler_config

    path = tmp_path / "settings.yaml"
    path.write_text("LOG_LEVEL: DEBUG\nKSO_STANDALONE_NAMES: kso-a, kso-b\nKSO_PLAN_COST_KEY: example.com/price\n"
                    "KSO_SCHEDULER_ORDER: FIFO\nKSO_PLAN_POLICY: COST\n")
    for name in ("LOG_LEVEL", "KSO_STANDALONE_NAMES", "KSO_PLAN_COST_KEY", "KSO_SCHEDULER_ORDER", "KSO_PLAN_POLICY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KSO_SCHEDULER_ORDER", "PRIORITY")  # the environment wins over the file
    config = load_scheduler_config(config_file=str(path))
    assert config.scheduler.names == ["kso-a", "kso-b"] and config.scheduler.order == "PRIORITY"
    assert config.scheduler.cost_key == config.extender.plan.cost_key == "example.com/price"
    assert config.extender.plan.policy == "COST" and config.extender.logs.level == "DEBUG"

    root, kso = logging.getLogger(), logging.getLogger("kso")
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", logging.WARNING)
    monkeypatch.setattr(kso, "level", logging.NOTSET)
    assert kso_main(["scheduler", "--config", str(path), "--kubeconfig", "/nonexistent"]) == 1
    assert kso.level == logging.DEBUG  # LOG_LEVEL from --config, on kso's loggers
    assert root.level == logging.WARNING  # the libraries' (kubernetes, urllib3) stay at WARNING
    assert "kso scheduler: " in capsys.readouterr().err


def test_seed_choice_prices_nodes_by_the_configured_cost_key() -> None:
    nodes = [node_from_k8s(make_node(f"n{i}", annotations={"hightower.com/cost": h, "example.com/price": p}))
             for i, (h, p) in enumerate((("1", "7"), ("9", "3"), ("5", "4")))]
    assert hightower_choice(nodes) == 0  # Hightower's annotation by default
    assert hightower_choice(nodes, "example.com/price") == 1
