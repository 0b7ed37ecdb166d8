"""The harm and cost metrics on a replay small enough to count by hand (benchmarks/sim/metrics.py)."""

from __future__ import annotations

import pytest

from benchmarks.sim.engine import EngineRules, Policy, SimPod, SimView, run
from benchmarks.sim.metrics import compute, lost_to_kills
from benchmarks.sim.runner import SCALAR_METRICS
from tests.benchmarks.sim.test_rules import GIB, scenario

H = 5 / 60  # one 5-minute step in hours
TIB = 1024.0**4


class Pinned(Policy):
    """Places each pod on the node its index names (None: answers None); the engine still checks the node."""

    name = "pinned"

    def __init__(self, where: dict[int, str | None]) -> None:
        super().__init__(0)
        self.where = where

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        return self.where.get(pod.index)


# n0: 4 cores / 8 GiB, n1: 2 cores / 4 GiB, 6 steps, no autoscaler (both nodes billed every step).
#   A (2 cores, 2 GiB) on n0 from step 0, cpu 2.5x at step 1: 5 cores on 4 -> 1 core unmet, n0 overloaded
#   B (0 cpu used, 4 GiB) on n0, memory 1.75x at step 2: 9 GiB on 8 -> B killed (3 GiB over its request, A 0),
#     1 GiB overcommitted; n0 tainted at step 3 (B refused there, pending), B back at step 4
#   C (3 cores) arrives at 1, departs at 4: fits no node, pending 3 steps, never served
#   D (0.5 core) arrives at 4 on n1: runs steps 4 and 5
#   E arrives at 5, the policy answers None: pending 1 step at the end, never served
#   F (1 GiB) on n1, 5x at step 2: 5 GiB on 4 -> killed, 1 GiB overcommitted; n1 tainted at step 3 (F refused),
#     F departs at 4: killed and never placed again -> never served
PODS = [(2000, 2 * GIB, 0, 99, [1, 2.5, 1, 1, 1, 1], [1] * 6),
        (100, 4 * GIB, 0, 99, [0] * 6, [1, 1, 1.75, 1, 1, 1]),
        (3000, GIB, 1, 4, [1] * 6, [1] * 6),
        (500, GIB, 4, 99, [1] * 6, [1] * 6),
        (100, GIB, 5, 99, [1] * 6, [1] * 6),
        (100, GIB, 0, 4, [0] * 6, [1, 1, 5, 1, 1, 1])]
WHERE: dict[int, str | None] = {0: "n0", 1: "n0", 2: "n1", 3: "n1", 4: None, 5: "n1"}


def replay(warmup_s: float):  # type: ignore[no-untyped-def]
    s = scenario([4000, 2000], PODS, 6)
    s.node_memory[1] = 4 * GIB
    return run(s, Pinned(WHERE), rules=EngineRules(warmup_s=warmup_s))


def test_harm_and_cost_by_hand() -> None:
    res = replay(0.0)
    m = compute(res)
    assert sorted(res.oom_kills) == [(2, 1, 0), (2, 5, 1)] and res.pods[1].bound_step == 4  # B back after the taint
    assert m.warmup_steps == 0
    # overloaded node-steps: n0 at 1 (cpu 125%) and 2 (memory 112.5%), n1 at 2 (memory 125%); two episodes
    assert m.overloaded_node_hours == pytest.approx(3 * H) and m.overload_episodes == 2
    assert m.unmet_cpu_core_hours == pytest.approx(1 * H)
    assert m.memory_overcommit_tib_hours == pytest.approx(2 * GIB / TIB * H)
    assert m.oom_kills == 2 and m.pods_oom_killed == 2
    # B: lost steps 2 (killed in it) and 3 (back at 4); F: lost 2 and 3 (departs at 4)
    assert m.pod_hours_lost_to_kills == pytest.approx(4 * H)
    # alive pod-steps A 6, B 6, C 3, D 2, E 1, F 4 = 22; running through the step A 6, B 4, D 2, F 2 = 14
    assert m.pending_pod_hours == pytest.approx(8 * H)
    assert m.pod_time_served_pct == pytest.approx(100 * 14 / 22)
    assert m.pods_never_served == 3  # C and E never placed, F killed and not placed again
    # MemoryPressure: both nodes at step 2 (pressure) and 3 (the taint)
    assert m.mem_pressure_node_hours == pytest.approx(4 * H)
    assert m.pod_hours_lost_to_kills <= m.pending_pod_hours
    assert m.provisioned_node_hours == pytest.approx(12 * H)
    assert m.provisioned_core_hours == pytest.approx((4 + 2) * 6 * H)
    assert m.provisioned_memory_tib_hours == pytest.approx((8 + 4) * GIB / TIB * 6 * H)


def test_the_warm_up_leaves_its_steps_out_of_every_harm_and_cost_figure() -> None:
    res = replay(300.0)  # one step (a quarter of 6 steps caps it at 1 anyway)
    m = compute(res)
    assert m.warmup_steps == res.warmup_steps == 1
    assert m.overloaded_node_hours == pytest.approx(3 * H) and m.oom_kills == 2
    # alive from step 1: A 5, B 5, C 3, D 2, E 1, F 3 = 19; running A 5, B 3, D 2, F 1 = 11
    assert m.pending_pod_hours == pytest.approx(8 * H) and m.pod_time_served_pct == pytest.approx(100 * 11 / 19)
    assert m.pod_hours_lost_to_kills == pytest.approx(4 * H)
    assert m.provisioned_node_hours == pytest.approx(10 * H)
    assert m.provisioned_core_hours == pytest.approx(6 * 5 * H)
    # the default: an hour, at most a quarter of the replay
    assert EngineRules().warmup_steps(300.0, 288) == 12 and EngineRules().warmup_steps(300.0, 6) == 1


def test_lost_to_kills_counts_until_the_pod_runs_again_or_leaves() -> None:
    import numpy as np

    ran = np.array([[True, False, False, False, True, False], [False, False, False, False, False, False]])
    departure = np.array([99, 3])
    # pod 0 killed in step 1: lost 1, 2, 3 (back at 4); pod 1 killed in step 0: lost 0, 1, 2 (departs at 3)
    assert lost_to_kills([(1, 0, 0), (0, 1, 0)], ran, departure, 0) == 6
    assert lost_to_kills([(1, 0, 0), (0, 1, 0)], ran, departure, 3) == 1  # from step 3: pod 0's step 3
    # killed in the last step: that step
    assert lost_to_kills([(5, 0, 0)], ran, departure, 0) == 1
    # killed in steps 1, 2 and 3 (placed again each time, killed in it), runs through 4: one stretch, 1-3
    assert lost_to_kills([(3, 0, 0), (1, 0, 0), (2, 0, 0)], ran, departure, 0) == 3


def test_every_metric_is_a_runner_column() -> None:
    for name in ("overloaded_node_hours", "unmet_cpu_core_hours", "memory_overcommit_tib_hours", "pods_oom_killed",
                 "oom_kills", "pod_hours_lost_to_kills", "pending_pod_hours", "pods_never_served", "pod_time_served_pct",
                 "overload_episodes", "provisioned_node_hours", "provisioned_core_hours", "provisioned_memory_tib_hours",
                 "mem_pressure_node_hours", "warmup_steps"):
        assert name in SCALAR_METRICS
