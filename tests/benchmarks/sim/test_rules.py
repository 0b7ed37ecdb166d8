"""The replay engine's rules on hand-counted cases: cpu throttling (unmet core-minutes), OOM kills,
overload episodes, the cluster-autoscaler model (scale up, scale down, drains) and pending time."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.sim.engine import MEMORY_PRESSURE_TAINT, Autoscaler, EngineRules, SimPod, run
from benchmarks.sim.metrics import compute, episodes
from benchmarks.sim.policies import make_policy
from benchmarks.sim.policies.default import DefaultScheduler
from benchmarks.sim.trace import Scenario

GIB = 1024.0**3


def scenario(node_cpu: list[float], pods: list[tuple[float, float, int, int, list[float], list[float]]], n_steps: int,
             node_mem: float = 8 * GIB) -> Scenario:
    """pods: (cpu request, memory request, arrival, departure, cpu ratio per step, memory ratio per step)."""
    usage = np.zeros((len(pods), n_steps, 2), dtype=np.float32)
    for i, (*_, cpu_ratio, mem_ratio) in enumerate(pods):
        usage[i, :, 0] = cpu_ratio
        usage[i, :, 1] = mem_ratio
    return Scenario("rules", 300.0, n_steps, [f"n{i}" for i in range(len(node_cpu))], np.array(node_cpu, float),
                    np.full(len(node_cpu), node_mem), [f"p{i}" for i in range(len(pods))],
                    np.array([p[0] for p in pods], float), np.array([p[1] for p in pods], float),
                    np.array([p[2] for p in pods], np.int64), np.array([p[3] for p in pods], np.int64), usage)


def test_episodes_count_runs_of_consecutive_node_steps() -> None:
    above = np.array([[True, True, False, True], [False, False, False, False], [True, False, True, False]])
    assert episodes(above) == 4  # node 0: 2 runs, node 2: 2 runs
    assert episodes(np.zeros((2, 0), dtype=bool)) == 0


def test_cpu_above_allocatable_is_throttled_and_counted_in_core_minutes() -> None:
    # one 1-core node, a 500m pod demanding 1.0x, 3.0x, 1.5x, 2.0x its request: 500, 1500, 750, 1000 millicores
    s = scenario([1000], [(500, GIB, 0, 9, [1.0, 3.0, 1.5, 2.0], [0.5] * 4)], 4)
    res = run(s, make_policy("default", 0))
    m = compute(res, u_star=0.9)
    # unmet: step 1 only, (1500 - 1000) m = 0.5 core for 5 min = 2.5 core-minutes
    assert m.unmet_cpu_core_min == 2.5
    assert res.usage[0, 1, 0] == 1000 and res.demand[0, 1, 0] == 1500  # monitoring sees the throttled usage
    # demand > 90%: steps 1 and 3 (750 is not): two episodes, two node-steps
    assert m.overload_episodes == 2 and m.overload_node_steps == 2 and m.oom_kills == 0


def test_memory_above_allocatable_kills_the_pod_most_over_its_request_and_requeues_it() -> None:
    # an 8 GiB node; at step 1: A uses 2 GiB (= request), B 6 GiB (4 over), C 3 GiB (1 over): 11 > 8 -> kill B only
    pods = [(100, 2 * GIB, 0, 9, [0.1] * 4, [1.0, 1.0, 1.0, 1.0]),
            (100, 2 * GIB, 0, 9, [0.1] * 4, [1.0, 3.0, 1.0, 1.0]),
            (100, 2 * GIB, 0, 9, [0.1] * 4, [1.0, 1.5, 1.0, 1.0])]
    res = run(scenario([4000], pods, 4), make_policy("default", 0))
    m = compute(res)
    assert res.oom_kills == [(1, 1, 0)]  # (step, pod, node)
    assert m.oom_kills == 1
    assert res.demand[0, 1, 1] == 11 * GIB and res.usage[0, 1, 1] == 5 * GIB
    b = res.pods[1]
    # re-queued for step 2, where the node carries the memory-pressure taint (pressure gone for less than 5
    # minutes): pending; bound at step 3
    assert b.node == 0 and b.bound_step == 3 and b.waits == [0, 1]
    assert m.pods_total == 3 and m.scheduled == 3


class Recorder(DefaultScheduler):
    """The default scheduler, noting what it sees of node 0's taints and how its filter judges node 0."""

    def __init__(self, seed: int = 0, insist: str | None = None) -> None:
        super().__init__(seed)
        self.seen: list[tuple[bool, bool]] = []
        self.insist = insist

    def observe(self, sim):  # type: ignore[no-untyped-def]
        probe = SimPod(-1, "probe", "probe", 1.0, 1.0, 0, 1)
        self.seen.append((MEMORY_PRESSURE_TAINT in sim.taints[0], bool(self.framework.filter_mask(probe, sim)[0])))

    def place(self, pod, sim):  # type: ignore[no-untyped-def]
        return self.insist or super().place(pod, sim)


@pytest.mark.parametrize("transition_s, tainted", [(300.0, [2]), (600.0, [2, 3]), (0.0, [])])
def test_memory_pressure_taints_the_node_until_the_transition_period_has_passed(transition_s: float,
                                                                                 tainted: list[int]) -> None:
    # the case above over 6 steps: pressure at step 1 only; the taint is on for the scheduling of the steps
    # 1 < k <= 1 + transition / 5 min; the victim B binds at the first step after it
    pods = [(100, 2 * GIB, 0, 9, [0.1] * 6, [1.0] * 6),
            (100, 2 * GIB, 0, 9, [0.1] * 6, [1.0, 3.0, 1.0, 1.0, 1.0, 1.0]),
            (100, 2 * GIB, 0, 9, [0.1] * 6, [1.0, 1.5, 1.0, 1.0, 1.0, 1.0])]
    policy = Recorder()
    res = run(scenario([4000], pods, 6), policy, rules=EngineRules(pressure_transition_s=transition_s))
    assert [k for k, (taint, _) in enumerate(policy.seen) if taint] == tainted  # view.taints
    assert [k for k, (_, feasible) in enumerate(policy.seen) if not feasible] == tainted  # the filter refuses it
    assert res.pods[1].bound_step == 1 + len(tainted) + 1
    assert np.flatnonzero(res.memory_pressure[0]).tolist() == [1, *tainted]  # the condition: step 1 and the taint
    # a policy naming the tainted node anyway is refused like a failed predicate (a second, empty node keeps the
    # engine asking)
    insist = Recorder(insist="n0")
    res = run(scenario([4000, 4000], pods, 6), insist, rules=EngineRules(pressure_transition_s=transition_s))
    assert res.rejected_placements == len(tainted) and res.pods[1].bound_step == 1 + len(tainted) + 1


def test_a_victim_that_fits_nowhere_is_seen_by_the_autoscaler_not_killed_again_and_again() -> None:
    # pool of two 8 GiB nodes, one ready. A requests 4 GiB and uses 4 GiB; B requests 4 GiB and uses 6 GiB, every
    # step: together 10 GiB > 8 -> B (2 GiB over its request, A 0) is killed at step 0. The node is tainted at step
    # 1, so B fits no ready node: the autoscaler orders node 1 at the end of step 0 (ready at 1), B binds there
    # (both nodes 50% requested: neither is scaled down). Without the taint and with the victims hidden from the
    # autoscaler, B went back on node 0 by requests and was killed there every step (24 kills in 24 steps, no
    # scale-up).
    pods = [(100, 4 * GIB, 0, 99, [0.1] * 24, [1.0] * 24), (100, 4 * GIB, 0, 99, [0.1] * 24, [1.5] * 24)]
    res = run(scenario([4000, 4000], pods, 24), make_policy("default", 0), autoscaler=Autoscaler(initial_nodes=1))
    assert res.oom_kills == [(0, 1, 0)]
    assert res.scale_ups == 1 and res.provisioned[1].tolist() == [False] + [True] * 23
    assert res.pods[1].node == 1 and res.pods[1].bound_step == 1
    assert res.pods[0].node == 0 and res.pods[0].bound_step == 0


def test_with_no_node_to_add_a_victim_returns_only_after_the_transition_period() -> None:
    # the same two pods on a fixed pool of one node: B is killed at step 0, pending at step 1 (tainted), back on
    # node 0 at step 2 and killed there again: one kill every two steps, not one every step
    pods = [(100, 4 * GIB, 0, 99, [0.1] * 24, [1.0] * 24), (100, 4 * GIB, 0, 99, [0.1] * 24, [1.5] * 24)]
    res = run(scenario([4000], pods, 24), make_policy("default", 0))
    assert [k for k, _, _ in res.oom_kills] == list(range(0, 24, 2))
    assert not res.ran[1].any()  # killed in every step it is placed in: it never runs through one


def test_autoscaler_removes_empty_nodes_after_ten_minutes_and_bills_provisioned_steps() -> None:
    # three 1-core nodes, one 600m pod (60% requested: stays); the two empty nodes are below 50% at the end of
    # steps 0, 1 and 2 -> removed at the end of step 2, 10 minutes after the first (billed for steps 0 to 2)
    s = scenario([1000, 1000, 1000], [(600, GIB, 0, 9, [0.5] * 4, [0.5] * 4)], 4)
    res = run(s, make_policy("default", 0), autoscaler=Autoscaler(), rules=EngineRules(warmup_s=0))
    m = compute(res)
    assert res.provisioned.sum(axis=0).tolist() == [3, 3, 3, 1]
    assert m.provisioned_node_hours == pytest.approx(10 * 5 / 60)
    # the default warm-up (an hour, at most a quarter of the replay: 1 step of 4) scores steps 1-3 only
    res = run(s, make_policy("default", 0), autoscaler=Autoscaler())
    assert res.warmup_steps == 1 and compute(res).provisioned_node_hours == pytest.approx(7 * 5 / 60)
    assert m.scale_downs == 2 and m.ca_evictions == 0 and m.scale_ups == 0


def test_autoscaler_drains_an_underused_node_when_its_pods_fit_elsewhere() -> None:
    # two 1-core nodes, a 300m pod on each (LeastAllocated spreads): both 30% requested; 10 minutes after they are
    # first unneeded (end of step 2) the first (lowest share, pool order on ties) is drained: its pod is re-queued
    # for step 3 and lands on the other
    pods = [(300, GIB, 0, 9, [0.5] * 4, [0.5] * 4), (300, GIB, 0, 9, [0.5] * 4, [0.5] * 4)]
    res = run(scenario([1000, 1000], pods, 4), make_policy("default", 0), autoscaler=Autoscaler())
    m = compute(res)
    assert m.scale_downs == 1 and m.ca_evictions == 1
    assert res.provisioned.sum(axis=0).tolist() == [2, 2, 2, 1]
    assert {p.node for p in res.pods} == {int(np.flatnonzero(res.provisioned[:, 3])[0])}
    moved = [p for p in res.pods if len(p.waits) == 2]
    assert len(moved) == 1 and moved[0].bound_step == 3


def test_autoscaler_provisions_a_node_for_a_pending_pod_which_waits_one_step() -> None:
    # pool of three 1-core nodes, one ready; two 800m pods at step 0: one binds, the other is pending; the
    # autoscaler orders node 1 at the end of step 0, ready at step 1, where the pod binds (5 minutes pending)
    pods = [(800, GIB, 0, 9, [0.5] * 3, [0.5] * 3), (800, GIB, 0, 9, [0.5] * 3, [0.5] * 3)]
    res = run(scenario([1000, 1000, 1000], pods, 3), make_policy("default", 0), autoscaler=Autoscaler(initial_nodes=1))
    m = compute(res)
    assert m.scale_ups == 1 and m.scale_downs == 0
    assert res.provisioned.sum(axis=0).tolist() == [1, 2, 2]
    assert sorted(p.bound_step for p in res.pods) == [0, 1]
    assert sorted(res.waits_steps) == [0, 1]
    assert res.pending_per_step.tolist() == [1, 0, 0]


def test_a_pod_nothing_can_hold_triggers_no_node_and_is_counted_pending() -> None:
    pods = [(5000, GIB, 0, 9, [0.5] * 3, [0.5] * 3)]
    res = run(scenario([1000, 1000], pods, 3), make_policy("default", 0), autoscaler=Autoscaler(initial_nodes=1))
    m = compute(res)
    assert m.scale_ups == 0 and m.pending_end == 1 and res.waits_steps == [3]
    assert m.pending_p95_min == 15.0


def test_policy_evictions_are_counted_as_moves_and_requeued() -> None:
    class EvictFirstAtStepOne(DefaultScheduler):
        def evictions(self, sim):  # type: ignore[no-untyped-def]
            return [0, 7] if sim.step == 1 else []  # 7: not a running pod, ignored

    s = scenario([1000, 1000], [(300, GIB, 0, 9, [0.5] * 3, [0.5] * 3), (300, GIB, 0, 9, [0.5] * 3, [0.5] * 3)], 3)
    res = run(s, EvictFirstAtStepOne(0))
    m = compute(res)
    assert m.pods_moved == 1 and res.pods[0].bound_step == 1 and res.pods[0].waits == [0, 0]


def test_bench_scenario_mode_writes_the_tradeoff_report(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from benchmarks.sim.cli import main

    rc = main(["--scenario", "google-embedded", "--hours", "1", "--policies", "default,default-most,trimaran-tlp:target=80",
               "--out", str(tmp_path)])
    assert rc == 0
    report = (tmp_path / "report.md").read_text()
    assert "| default-most | 1 |" in report and "trimaran-tlp:target=80" in report and "units:" in report
    assert "The frontier: cost against harm" in report and "real join" in report
    assert (tmp_path / "frontier-google-embedded.png").stat().st_size > 1000
    assert len((tmp_path / "cells.jsonl").read_text().splitlines()) == 3


def test_an_unneeded_node_survives_five_minutes_and_goes_after_ten() -> None:
    # two 1-core nodes, a 600m pod on one for the whole run; the other is empty (unneeded) from the first evaluation:
    # at the end of step 0 (first seen), step 1 (5 minutes: stays) and step 2 (10 minutes: removed)
    s = scenario([1000, 1000], [(600, GIB, 0, 99, [0.5] * 6, [0.5] * 6)], 6)
    res = run(s, make_policy("default", 0), autoscaler=Autoscaler())
    empty = 1 - res.pods[0].node
    assert res.provisioned[empty].tolist() == [True, True, True, False, False, False] and res.scale_downs == 1
    # the settings are the model's: 5 minutes removes it at the second evaluation (the engine's rule before)
    res = run(s, make_policy("default", 0), autoscaler=Autoscaler(scale_down_unneeded_s=300))
    assert res.provisioned[empty].tolist() == [True, True, False, False, False, False]
    # a time that is not a whole number of steps is rounded up to the next evaluation
    res = run(s, make_policy("default", 0), autoscaler=Autoscaler(scale_down_unneeded_s=301))
    assert res.provisioned[empty].tolist() == [True, True, True, False, False, False]
    assert Autoscaler().unneeded_evaluations(300.0) == 3 and Autoscaler().unneeded_evaluations(60.0) == 11


def test_no_scale_down_within_ten_minutes_of_a_scale_up_but_the_unneeded_time_counts_meanwhile() -> None:
    # pool of 1-, 1- and 2-core nodes, 0 and 1 ready; pod A (600m) binds on node 0 at step 0; node 1 stays empty.
    # Pod B (1500m) arrives at step 2, fits no ready node: the autoscaler orders node 2 at the end of step 2. Node 1,
    # unneeded since step 0, would go at the end of step 2; the delay after add keeps it at steps 2 and 3 (5
    # minutes after the scale-up), it goes at step 4 (10 minutes after).
    pods = [(600, GIB, 0, 99, [0.5] * 8, [0.5] * 8), (1500, GIB, 2, 99, [0.5] * 8, [0.5] * 8)]
    s = scenario([1000, 1000, 2000], pods, 8)

    class Spread(DefaultScheduler):  # A on node 0, B wherever it fits
        def place(self, pod, sim):  # type: ignore[no-untyped-def]
            return "n0" if pod.index == 0 else super().place(pod, sim)

    res = run(s, Spread(0), autoscaler=Autoscaler(initial_nodes=2))
    assert res.scale_ups == 1 and res.provisioned[2].tolist() == [False] * 3 + [True] * 5
    assert res.provisioned[1].tolist() == [True] * 5 + [False] * 3
    # without the delay (0 s) node 1 goes at the end of step 2, as the unneeded time alone says
    res = run(s, Spread(0), autoscaler=Autoscaler(initial_nodes=2, scale_down_delay_after_add_s=0))
    assert res.provisioned[1].tolist() == [True] * 3 + [False] * 5
