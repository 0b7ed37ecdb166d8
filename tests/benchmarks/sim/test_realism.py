"""Replay realism (issue 36): partial-step starts and the start latency, the harm columns at 80/90/100% of
allocatable and memory above allocatable, and the warm start (benchmarks/sim/engine.py, metrics.py)."""

from __future__ import annotations

import pytest

from benchmarks.sim.engine import EngineRules, Policy, SimPod, SimView, run
from benchmarks.sim.metrics import compute
from benchmarks.sim.policies import make_policy
from tests.benchmarks.sim.test_rules import GIB, scenario

H = 5 / 60  # one 5-minute step in hours


class HoldsFor(Policy):
    """Holds every pod ``hold_s`` after it entered the queue (as kso's safe agent's KSO_SAFE_MAX_HOLD_S), then places
    it on n0; its answer changes within a step (it reads ``sim.now``)."""

    name = "holds"
    retries_within_step = True

    def __init__(self, hold_s: float) -> None:
        super().__init__(0)
        self.hold_s = hold_s

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        return "n0" if sim.now - pod.queued_step * sim.step_s >= self.hold_s else None


ONE_STEP_POD = [(500, GIB, 0, 1, [0.5] * 3, [0.5] * 3)]  # a 5-minute pod: arrives at step 0, leaves at step 1


def test_a_five_minute_pod_held_one_minute_is_late_not_lost() -> None:
    res = run(scenario([1000], ONE_STEP_POD, 3), HoldsFor(60.0), rules=EngineRules(warmup_s=0))
    m = compute(res)
    assert res.pods[0].bound_step == 0 and res.served[0]
    assert m.pods_never_served == 0 and m.pods_started == 1
    assert m.start_latency_p50_s == pytest.approx(60.0) and m.start_latency_p99_s == pytest.approx(60.0)
    assert m.pod_time_served_pct == pytest.approx(80.0)  # 4 of its 5 minutes
    assert m.pending_pod_hours == pytest.approx(0.2 * H)
    # held 2.5 minutes: started at the next retry round, 3 minutes in
    m = compute(run(scenario([1000], ONE_STEP_POD, 3), HoldsFor(150.0), rules=EngineRules(warmup_s=0)))
    assert m.pods_never_served == 0 and m.start_latency_p50_s == pytest.approx(180.0)


def test_a_pod_that_never_runs_before_its_departure_is_never_served_and_not_in_the_latency() -> None:
    m = compute(run(scenario([1000], ONE_STEP_POD, 3), HoldsFor(300.0), rules=EngineRules(warmup_s=0)))
    assert m.pods_never_served == 1 and m.pods_started == 0 and m.pod_time_served_pct == 0.0
    # with one scheduling round a step (retry_s = 0, the engine before) the one-minute hold is a loss
    m = compute(run(scenario([1000], ONE_STEP_POD, 3), HoldsFor(60.0), rules=EngineRules(warmup_s=0, retry_s=0)))
    assert m.pods_never_served == 1
    # and a policy that says its answers cannot change within a step is asked once a step
    policy = HoldsFor(60.0)
    policy.retries_within_step = False
    res = run(scenario([1000], ONE_STEP_POD, 3), policy, rules=EngineRules(warmup_s=0))
    assert res.pods[0].attempts == 1 and compute(res).pods_never_served == 1


def test_a_pod_held_a_whole_step_shows_its_latency_in_seconds() -> None:
    # a 10-minute pod held 5 minutes starts at the next step's first round: 300 s, served half its life
    pods = [(500, GIB, 0, 2, [0.5] * 3, [0.5] * 3)]
    m = compute(run(scenario([1000], pods, 3), HoldsFor(300.0), rules=EngineRules(warmup_s=0)))
    assert m.start_latency_p99_s == pytest.approx(300.0) and m.pods_never_served == 0
    assert m.pod_time_served_pct == pytest.approx(50.0)
    assert EngineRules().retry_rounds(300.0) == 5 and EngineRules(retry_s=0).retry_rounds(300.0) == 1


def test_overloaded_node_hours_at_80_90_and_100_percent_and_memory_above_allocatable() -> None:
    # one 1-core, 8 GiB node. A (1 core) uses 0.5, 0.85, 0.95, 1.05 cores; B (4 GiB) uses 4, 4, 4, 10 GiB: memory
    # (A's 1 GiB + B's) 5, 5, 5, 11 GiB of 8
    pods = [(1000, GIB, 0, 99, [0.5, 0.85, 0.95, 1.05], [1.0] * 4), (0, 4 * GIB, 0, 99, [0.0] * 4, [1, 1, 1, 2.5])]
    m = compute(run(scenario([1000], pods, 4), make_policy("default", 0), rules=EngineRules(warmup_s=0)))
    assert m.overloaded_node_hours_80 == pytest.approx(3 * H)  # steps 1, 2, 3
    assert m.overloaded_node_hours_90 == pytest.approx(2 * H) == m.overloaded_node_hours  # U* = 90%: the same
    assert m.overloaded_node_hours_100 == pytest.approx(1 * H)  # step 3
    assert m.memory_over_allocatable_node_hours == pytest.approx(1 * H)
    # the fixed columns do not move with U*; overloaded_node_hours does
    m80 = compute(run(scenario([1000], pods, 4), make_policy("default", 0), rules=EngineRules(warmup_s=0)), u_star=0.8)
    assert m80.overloaded_node_hours == pytest.approx(3 * H) and m80.overloaded_node_hours_90 == pytest.approx(2 * H)


class PinsToN0(Policy):
    """Every pod on n0; records when it was set up, what it was told and the steps it was asked in."""

    name = "pins"

    def __init__(self) -> None:
        super().__init__(0)
        self.setup_step = -1
        self.told: list[tuple[str, str, int]] = []
        self.asked: list[int] = []

    def setup(self, sim: SimView) -> None:
        self.setup_step = sim.step

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        self.asked.append(sim.step)
        return "n0"

    def bound(self, pod: SimPod, node: str, sim: SimView) -> None:
        self.told.append((pod.name, node, sim.step))


def test_warm_start_places_the_warm_up_pods_with_the_default_policy_then_hands_over() -> None:
    # two 4-core nodes; two 1-core pods at step 0, one at step 3; warm-up 10 minutes (2 steps). Cold, the policy
    # puts all three on n0. Warm, kube-scheduler's LeastAllocated spreads the first two (one per node) during the
    # warm-up; the policy is set up at step 2, told of both running pods, and places the third.
    pods = [(1000, GIB, 0, 99, [0.5] * 8, [0.5] * 8)] * 2 + [(1000, GIB, 3, 99, [0.5] * 8, [0.5] * 8)]
    rules = EngineRules(warmup_s=600)
    cold = run(scenario([4000, 4000], pods, 8), PinsToN0(), rules=rules)
    assert [p.node for p in cold.pods] == [0, 0, 0] and cold.start == "cold"
    policy = PinsToN0()
    warm = run(scenario([4000, 4000], pods, 8), policy, rules=rules, warm_start=make_policy("default", 0))
    assert warm.warmup_steps == 2 and warm.start == "warm" and warm.policy == "pins"
    assert sorted(p.node for p in warm.pods[:2]) == [0, 1] and [p.bound_step for p in warm.pods[:2]] == [0, 0]
    assert policy.setup_step == 2 and policy.asked == [3]
    assert sorted(policy.told) == sorted([(warm.pods[0].name, f"n{warm.pods[0].node}", 2),
                                          (warm.pods[1].name, f"n{warm.pods[1].node}", 2), ("p2", "n0", 3)])


@pytest.mark.parametrize("name", ["trimaran-tlp", "trimaran-lvrb", "trimaran-lroc", "koordinator", "default-most",
                                  "oracle", "kso"])
def test_every_policy_takes_over_a_warm_cluster(name: str) -> None:
    """The peers keep per-node state sized when they first observe the cluster: handed a running cluster, they are
    shown it before being told of its pods (a warm start once failed on every peer with an IndexError)."""
    pods = [(1000, GIB, 0, 99, [0.5] * 8, [0.5] * 8)] * 2 + [(1000, GIB, 3, 99, [0.5] * 8, [0.5] * 8)]
    warm = run(scenario([4000, 4000], pods, 8), make_policy(name, 0), rules=EngineRules(warmup_s=600),
               warm_start=make_policy("default", 0))
    assert warm.start == "warm" and all(p.node >= 0 for p in warm.pods)
