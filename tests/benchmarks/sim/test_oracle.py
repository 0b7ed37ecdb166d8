"""The oracle reference policy (benchmarks/sim/policies/oracle.py) on hand-counted cases: it refuses a node
whose demand would pass U* within the next hour (future usage, not the present), leaves a pod queued when
no node can take it, shows that pod to the autoscaler as a placeholder, and packs best-fit-decreasing by the
next hour's peak."""

from __future__ import annotations

import pytest

from benchmarks.sim.engine import Autoscaler, run
from benchmarks.sim.metrics import compute
from benchmarks.sim.policies import make_policy
from benchmarks.sim.policies.oracle import Oracle
from tests.benchmarks.sim.test_rules import GIB, scenario

# A (on the node first) uses 1 GiB now and 6 GiB from step 3; B arrives at step 1 using 2 GiB. At step 1 the
# node holds 1 GiB, but over the next hour 6 + 2 = 8 GiB > U* x 8 GiB = 7.2 GiB.
RISING = [(100, GIB, 0, 9, [0.1] * 6, [1, 1, 1, 6, 6, 6]), (100, GIB, 1, 9, [0.1] * 6, [2] * 6)]


def test_oracle_refuses_a_node_that_passes_u_star_later_in_the_hour() -> None:
    s = scenario([4000, 4000], RISING, 6)
    res = run(s, make_policy("oracle", 0))
    a, b = res.pods
    assert (a.node, b.node) == (0, 1) and b.bound_step == 1
    assert compute(res, 0.9).overload_node_steps == 0
    # an oracle that sees only the current step best-fits B onto node 0 (1 + 2 GiB) and passes U* at steps 3-5
    myopic = run(scenario([4000, 4000], RISING, 6), make_policy("oracle", 0, horizon_steps=1))
    assert myopic.pods[1].node == 0 and compute(myopic, 0.9).overload_node_steps == 3


def test_a_pod_no_node_can_take_under_u_star_stays_queued() -> None:
    res = run(scenario([4000], RISING, 6), make_policy("oracle", 0))
    b = res.pods[1]
    assert b.node == -1 and not b.ever_bound and b.attempts == 5  # steps 1-5, requests would have fitted
    # least-peak: it goes where the overshoot is smallest instead
    assert run(scenario([4000], RISING, 6), make_policy("oracle", 0, overflow="least-peak")).pods[1].node == 0


class RecordingOracle(Oracle):
    def __init__(self, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(0, **kw)
        self.asked: list[tuple[int, list[list[float]], list[bool]]] = []

    def capacity_requests(self, sim):  # type: ignore[no-untyped-def]
        req = super().capacity_requests(sim)
        if req is not None:
            self.asked.append((sim.step, req.demands.tolist(), req.avoid.tolist()))
        return req


def test_the_pod_the_oracle_refuses_gets_a_node_through_a_placeholder() -> None:
    # one of two nodes ready; B fits n0 by requests, so without a signal the autoscaler sees nothing to add and the
    # oracle (no node under U* over the hour) keeps B queued: it never runs
    quiet = RecordingOracle(capacity="none")
    res = run(scenario([4000, 4000], RISING, 6), quiet, autoscaler=Autoscaler(initial_nodes=1))
    assert res.scale_ups == 0 and not res.pods[1].ever_bound and quiet.asked == []
    # with the placeholder (B's requests, avoiding the ready n0) the autoscaler orders n1 at the end of step 1; B
    # binds there at step 2 and nothing passes U* (scale-down slowed so the drain rule does not move B back)
    signal = RecordingOracle()
    res = run(scenario([4000, 4000], RISING, 6), signal, autoscaler=Autoscaler(initial_nodes=1, scale_down_unneeded_steps=9))
    assert res.scale_ups == 1 and res.capacity["placeholder_scale_ups"] == 1
    assert (res.pods[1].node, res.pods[1].bound_step) == (1, 2)
    assert signal.asked == [(1, [[100.0, GIB]], [True, False])]
    assert compute(res, 0.9).overload_node_steps == 0
    assert signal.extra["placeholders"] == len(signal.asked)


def test_plan_is_best_fit_decreasing_by_next_hour_peak_and_opens_the_largest_node() -> None:
    # queue order S (1 GiB), L (6 GiB), M (1.5 GiB); nodes: 2 cores then 4 cores, 8 GiB each
    pods = [(100, GIB, 0, 9, [0.1] * 3, [1.0] * 3), (100, GIB, 0, 9, [0.1] * 3, [6.0] * 3),
            (100, GIB, 0, 9, [0.1] * 3, [1.5] * 3)]
    oracle = Oracle(0)
    res = run(scenario([2000, 4000], pods, 3), oracle)
    # L first, on the largest empty node (node 1); M: 6 + 1.5 > 7.2 there, opens node 0; S: best fit, node 1
    # (7 of 7.2 GiB) rather than node 0 (2.5)
    assert [p.node for p in res.pods] == [1, 1, 0]
    assert res.pods[0].bound_step == 0


def test_oracle_rejects_bad_knobs_and_says_it_is_a_reference() -> None:
    with pytest.raises(ValueError, match="u_star"):
        Oracle(0, u_star=1.5)
    with pytest.raises(ValueError, match="overflow"):
        Oracle(0, overflow="never")
    with pytest.raises(ValueError, match="capacity must be one of placeholder, none, not 'taint'"):
        Oracle(0, capacity="taint")
    assert "not a runnable scheduler" in Oracle(0).mode
