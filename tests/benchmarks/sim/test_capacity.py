"""The capacity signal a policy sends the autoscaler model, on hand-counted cases: placeholder pods (lowest
non-expendable priority, anti-affinity to the nodes the policy judges hot) and the NoSchedule capacity taint,
each read as the cluster-autoscaler reads it (a pending pod that fits no existing node under its simulation
makes it add one; nothing else does)."""

from __future__ import annotations

import numpy as np

from benchmarks.sim.engine import CAPACITY_TAINT, Autoscaler, CapacityRequest, EngineRules, run
from benchmarks.sim.policies.default import DefaultScheduler
from tests.benchmarks.sim.test_rules import GIB, scenario


class RefusesNodeZero(DefaultScheduler):
    """The default scheduler that never places a pod on node 0 (the node it judges hot), like an extender's
    filter: the autoscaler does not see that refusal. ``signal``: how it tells the autoscaler (None, "placeholder",
    "taint")."""

    def __init__(self, seed: int = 0, signal: str | None = None) -> None:
        super().__init__(seed)
        self.signal = signal
        self.seen_taint: list[bool] = []
        self.feasible0: list[bool] = []

    def hot(self, sim):  # type: ignore[no-untyped-def]
        mask = np.zeros(len(sim.node_names), dtype=bool)
        mask[0] = True
        return mask

    def observe(self, sim):  # type: ignore[no-untyped-def]
        self.seen_taint.append(CAPACITY_TAINT in sim.taints[0])

    def place(self, pod, sim):  # type: ignore[no-untyped-def]
        self.feasible0.append(bool(self.framework.filter_mask(pod, sim)[0]))
        name = super().place(pod, sim)
        return None if name == "n0" else name

    def capacity_taints(self, sim):  # type: ignore[no-untyped-def]
        return self.hot(sim) if self.signal == "taint" else None

    def capacity_requests(self, sim):  # type: ignore[no-untyped-def]
        if self.signal != "placeholder" or not sim.pending:
            return None
        return CapacityRequest(np.array([(p.cpu, p.memory) for p in sim.pending]), self.hot(sim))


# pool of two 4-core nodes, node 0 ready holding A (2 cores: 50%, not underused), node 1 not provisioned; B (2
# cores) arrives at step 0 and fits node 0 by requests, which the policy refuses.
PODS = [(2000, GIB, 0, 99, [0.5] * 6, [0.5] * 6), (2000, GIB, 0, 99, [0.5] * 6, [0.5] * 6)]


class PlaceAFirst(RefusesNodeZero):
    """A is placed on node 0 (the only node) before the policy starts refusing it."""

    def place(self, pod, sim):  # type: ignore[no-untyped-def]
        if pod.index == 0:
            return "n0"
        return super().place(pod, sim)


def test_without_a_signal_a_pod_refused_by_the_policy_orders_no_node() -> None:
    # B fits node 0 by requests: the autoscaler's simulation (no extender) adds nothing; B never runs
    res = run(scenario([4000, 4000], PODS, 6), PlaceAFirst(), autoscaler=Autoscaler(initial_nodes=1))
    assert res.scale_ups == 0 and res.pods[1].node == -1 and not res.pods[1].ever_bound
    assert res.capacity == {"placeholder_pod_steps": 0, "placeholder_scale_ups": 0, "capacity_tainted_node_steps": 0}


def test_a_placeholder_avoiding_the_hot_node_fits_nowhere_and_the_autoscaler_adds_a_node() -> None:
    # step 0: B refused; its placeholder (2 cores, anti-affinity to node 0) fits no other node: node 1 ordered at the
    # end of step 0, ready at step 1, where B binds; no placeholder after that
    policy = PlaceAFirst(signal="placeholder")
    res = run(scenario([4000, 4000], PODS, 6), policy, autoscaler=Autoscaler(initial_nodes=1))
    assert res.scale_ups == 1 and res.provisioned[1].tolist() == [False] + [True] * 5
    assert res.pods[1].node == 1 and res.pods[1].bound_step == 1
    assert res.capacity["placeholder_pod_steps"] == 1 and res.capacity["placeholder_scale_ups"] == 1
    assert res.extra["placeholder_scale_ups"] == 1  # in the cells' rows too


def test_a_placeholder_that_fits_a_node_it_does_not_avoid_orders_none_and_holds_that_room() -> None:
    # three nodes, 0 and 1 ready: the placeholder fits node 1 (not hot), so the autoscaler adds nothing; node 1 is
    # empty of real pods but the placeholder's room (B's 2 cores of 4: 50%, not below the 50% threshold) keeps it
    class KeepsAsking(PlaceAFirst):
        def place(self, pod, sim):  # type: ignore[no-untyped-def]
            return "n0" if pod.index == 0 else None  # B is always refused: the placeholder stays

    s = scenario([4000, 4000, 4000], PODS, 6)
    res = run(s, KeepsAsking(signal="placeholder"), autoscaler=Autoscaler(initial_nodes=2), rules=EngineRules(warmup_s=0))
    assert res.scale_ups == 0 and res.scale_downs == 0
    assert res.provisioned[:, -1].tolist() == [True, True, False]
    assert res.capacity["placeholder_pod_steps"] == 6 and res.capacity["placeholder_scale_ups"] == 0
    # the same without placeholders: node 1 (empty) is removed 10 minutes after it is first unneeded (3 evaluations)
    res = run(s, KeepsAsking(), autoscaler=Autoscaler(initial_nodes=2), rules=EngineRules(warmup_s=0))
    assert res.scale_downs == 1 and res.provisioned[1].tolist() == [True, True, True, False, False, False]


def test_the_capacity_taint_keeps_every_scheduler_off_the_node_and_the_autoscaler_adds_one() -> None:
    # node 0 tainted from step 0's scheduling: A and B both fit no untainted node; the autoscaler (which honours
    # NoSchedule taints) orders node 1, where both bind at step 1. The framework's filter refuses node 0 and the
    # view shows the taint. Node 0, empty, is removed at the end of step 2 (10 minutes below 50%, and 10 minutes after
    # the scale-up of step 0): a node out of the
    # cluster carries no taint (observe runs before capacity_taints is asked: it sees the last step's taints).
    pods = [(1000, GIB, 0, 99, [0.5] * 4, [0.5] * 4), (1000, GIB, 0, 99, [0.5] * 4, [0.5] * 4)]
    policy = RefusesNodeZero(signal="taint")
    res = run(scenario([4000, 4000], pods, 4), policy, autoscaler=Autoscaler(initial_nodes=1))
    assert policy.seen_taint == [False, True, True, True]
    assert res.provisioned[0].tolist() == [True, True, True, False]
    assert policy.feasible0 and not any(policy.feasible0)  # asked at step 1 (at step 0 no untainted node was ready)
    assert res.scale_ups == 1 and sorted((p.node, p.bound_step) for p in res.pods) == [(1, 1), (1, 1)]
    assert res.capacity["capacity_tainted_node_steps"] == 3  # node 0, steps 0 to 2
    # a policy naming the tainted node anyway is refused like a failed predicate
    class Insists(RefusesNodeZero):
        def place(self, pod, sim):  # type: ignore[no-untyped-def]
            return "n0"

    res = run(scenario([4000, 4000], pods, 4), Insists(signal="taint"))
    assert res.rejected_placements == 8 and not any(p.ever_bound for p in res.pods)


def test_the_capacity_taint_is_honoured_by_the_autoscalers_drain_check() -> None:
    # nodes 0, 1 ready, one 1-core pod each: 600m on node 0 (60%: not underused), 300m on node 1 (30%). Node 1's
    # pod fits node 0 by requests, so without the taint node 1 is drained after two steps below 50%; with node 0
    # tainted it fits nowhere and node 1 stays
    pods = [(600, GIB, 0, 9, [0.5] * 4, [0.5] * 4), (300, GIB, 0, 9, [0.5] * 4, [0.5] * 4)]

    class Spread(RefusesNodeZero):
        def place(self, pod, sim):  # type: ignore[no-untyped-def]
            return sim.node_names[pod.index]

        def capacity_taints(self, sim):  # type: ignore[no-untyped-def]
            return self.hot(sim) if self.signal == "taint" and sim.step > 0 else None

    s = scenario([1000, 1000], pods, 4)
    assert run(s, Spread(), autoscaler=Autoscaler()).scale_downs == 1
    assert run(s, Spread(signal="taint"), autoscaler=Autoscaler()).scale_downs == 0


def test_a_placeholder_request_names_the_nodes_each_placeholder_avoids_or_one_mask_for_all() -> None:
    import pytest

    req = CapacityRequest(np.array([[100.0, GIB], [200.0, GIB]]), np.array([True, False, False]))
    assert req.avoid_rows(3).tolist() == [[True, False, False]] * 2
    per = CapacityRequest(np.array([[100.0, GIB], [200.0, GIB]]), np.array([[True, False, False], [False, True, False]]))
    assert per.avoid_rows(3)[1].tolist() == [False, True, False]
    with pytest.raises(ValueError, match=r"shape \(2, 2\), not \(3,\) or \(2, 3\)"):
        CapacityRequest(np.array([[100.0, GIB], [200.0, GIB]]), np.zeros((2, 2), dtype=bool)).avoid_rows(3)



class MarksNodes(DefaultScheduler):
    """Pod i on node i; ``marked[k]``: the nodes annotated scale-down-disabled at step k."""

    def __init__(self, marked: dict[int, list[int]]) -> None:
        super().__init__(0)
        self.marked = marked

    def place(self, pod, sim):  # type: ignore[no-untyped-def]
        return sim.node_names[pod.index] if not pod.ever_bound else super().place(pod, sim)

    def scale_down_disabled(self, sim):  # type: ignore[no-untyped-def]
        if sim.step not in self.marked:
            return None
        mask = np.zeros(len(sim.node_names), dtype=bool)
        mask[self.marked[sim.step]] = True
        return mask


def test_a_node_annotated_scale_down_disabled_is_never_unneeded_and_its_unneeded_time_restarts_when_unmarked() -> None:
    # two 1-core nodes, 600m on node 0 (60%: not underused), 300m on node 1 (30%), which fits node 0 by requests:
    # without the annotation node 1 is drained at the end of step 2 (10 minutes below 50%)
    pods = [(600, GIB, 0, 9, [0.5] * 8, [0.5] * 8), (300, GIB, 0, 9, [0.5] * 8, [0.5] * 8)]
    s = scenario([1000, 1000], pods, 8)
    res = run(s, MarksNodes({}), autoscaler=Autoscaler())
    assert res.scale_downs == 1 and res.provisioned[1].tolist() == [True] * 3 + [False] * 5
    assert "scale_down_disabled_node_steps" not in res.capacity  # no policy mark, no count
    # annotated at steps 0-2: never unneeded meanwhile (the eligibility check skips it); unmarked from step 3, it is
    # unneeded at steps 3, 4 and 5 and drained at the end of step 5, not at once
    res = run(s, MarksNodes({0: [1], 1: [1], 2: [1]}), autoscaler=Autoscaler())
    assert res.scale_downs == 1 and res.provisioned[1].tolist() == [True] * 6 + [False] * 2
    assert res.capacity["scale_down_disabled_node_steps"] == 3 and res.capacity["scale_down_disabled_marks"] == 1
    # annotated all along: never removed
    res = run(s, MarksNodes({k: [1] for k in range(8)}), autoscaler=Autoscaler())
    assert res.scale_downs == 0 and res.provisioned[1].all()


def test_a_node_annotated_scale_down_disabled_still_takes_the_pods_of_a_node_the_autoscaler_drains() -> None:
    # three 1-core nodes: 300m on node 0 (30%), 100m on node 1 (10%), 600m on node 2. Without marks node 1 (the
    # least requested) is drained onto node 0 at the end of step 1, then node 0 (now 40%) onto node 2 at step 2.
    # With node 0 annotated, node 1 is still drained onto it (a destination), and node 0 stays.
    pods = [(300, GIB, 0, 9, [0.5] * 6, [0.5] * 6), (100, GIB, 0, 9, [0.5] * 6, [0.5] * 6),
            (600, GIB, 0, 9, [0.5] * 6, [0.5] * 6)]
    s = scenario([1000, 1000, 1000], pods, 6)
    res = run(s, MarksNodes({}), autoscaler=Autoscaler())
    assert res.scale_downs == 2 and res.provisioned[:, -1].tolist() == [False, False, True]
    res = run(s, MarksNodes({k: [0] for k in range(6)}), autoscaler=Autoscaler())
    assert res.scale_downs == 1 and res.provisioned[:, -1].tolist() == [True, False, True]
    assert res.pods[1].node == 0  # node 1's pod went to the annotated node
    # a mark on a node that is not ready is dropped (an annotation needs a Node object); pods 1 and 2 fit node 0 by
    # requests, so no node is added
    res = run(s, MarksNodes({k: [0, 1] for k in range(6)}), autoscaler=Autoscaler(initial_nodes=1))
    assert res.capacity["scale_down_disabled_node_steps"] == 6
