"""The default-scheduler model and the peers' formulas against hand-computed values (extender-protocol.md,
peers.md)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.sim.engine import SimPod, SimView
from benchmarks.sim.policies import POLICIES, make_policy
from benchmarks.sim.policies.framework import Framework, feasible_nodes_to_find
from benchmarks.sim.policies.koordinator import load_aware_filter, load_aware_score, pod_estimate
from benchmarks.sim.policies.trimaran_lroc import lroc_score
from benchmarks.sim.policies.trimaran_lvrb import lvrb_score
from benchmarks.sim.policies.trimaran_tlp import predicted_cpu, tlp_score
from benchmarks.sim.trace import Scenario

GIB = 1024.0**3


def tiny_scenario(cpu: list[float], memory: list[float], n_steps: int = 4) -> Scenario:
    return Scenario("tiny", 300.0, n_steps, [f"n{i}" for i in range(len(cpu))], np.array(cpu, float), np.array(memory, float),
                    [], np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, n_steps, 2)))


def pod(cpu: float, memory: float, index: int = 0) -> SimPod:
    return SimPod(index, f"p{index}", f"uid-{index}", cpu, memory, 0, 10)


@pytest.fixture
def three_nodes() -> SimView:
    # A: 4 cores / 8 GiB with 1 core / 2 GiB requested; B: empty; C: 3 cores / 0 GiB requested (unbalanced)
    view = SimView(tiny_scenario([4000, 4000, 4000], [8 * GIB] * 3))
    view.requested[:] = [[1000, 2 * GIB], [0, 0], [3000, 0]]
    return view


def test_feasible_nodes_to_find() -> None:
    assert feasible_nodes_to_find(50) == 50
    assert feasible_nodes_to_find(100) == 100
    assert feasible_nodes_to_find(500) == 230  # 50 - 500 // 125 = 46 %
    assert feasible_nodes_to_find(1000) == 420
    assert feasible_nodes_to_find(5000) == 500  # 10 %
    assert feasible_nodes_to_find(20000) == 1000  # floor at 5 %


def test_least_allocated_and_balanced_by_hand(three_nodes: SimView) -> None:
    p = pod(1000, 2 * GIB)
    idx = np.arange(3)
    # A: cpu (4000-2000)*100//4000 = 50, mem (8-4)*100//8 = 50 -> 50; B: 75, 75 -> 75; C: cpu 0, mem 75 -> 37
    assert Framework.least_allocated(p, three_nodes, idx).tolist() == [50, 75, 37]
    # A: f = (0.5, 0.5) -> 100; B: (0.25, 0.25) -> 100; C: f = (1.0, 0.25), std 0.375 -> int(62.5) = 62
    assert Framework.balanced_allocation(p, three_nodes, idx).tolist() == [100, 100, 62]
    # + TaintToleration 100 x 3 (no taints)
    assert Framework(0).default_scores(p, three_nodes, idx).tolist() == [450, 475, 399]
    assert make_policy("default", 0).place(p, three_nodes) == "n1"


def test_filters_and_single_feasible_node(three_nodes: SimView) -> None:
    big = pod(3500, 1 * GIB)  # fits only on B
    assert Framework(0).filter_mask(big, three_nodes).tolist() == [False, True, False]
    assert make_policy("default", 0).place(big, three_nodes) == "n1"
    assert make_policy("default", 0).place(pod(5000, 0), three_nodes) is None
    three_nodes.taints[1] = [("dedicated", "x", "NoSchedule")]
    assert make_policy("default", 0).place(big, three_nodes) is None


def test_sampling_rotates_start_index() -> None:
    view = SimView(tiny_scenario([1000] * 200, [GIB] * 200))
    fw = Framework(0)
    first = fw.feasible(pod(10, 10), view)
    second = fw.feasible(pod(10, 10), view)
    assert len(first) == 100 and first.tolist() == list(range(100))  # k = max(100, 200 * 48 // 100)
    assert second.tolist() == list(range(100, 200))
    view.requested[:150, 0] = 1000  # nodes 0..149 full: from start 0 the scan passes 150 failures
    third = fw.feasible(pod(10, 10), view)
    assert third.tolist() == list(range(150, 200))
    assert Framework(0, sample=False).feasible(pod(10, 10), view).tolist() == list(range(150, 200))


def test_tie_break_is_seeded_and_uniform() -> None:
    view = SimView(tiny_scenario([1000] * 4, [GIB] * 4))
    picks = [Framework(seed).pick(np.arange(4), np.array([5, 5, 5, 1])) for seed in range(60)]
    assert set(picks) == {0, 1, 2}
    assert picks == [Framework(seed).pick(np.arange(4), np.array([5, 5, 5, 1])) for seed in range(60)]
    assert view.node_names[Framework(0).pick(np.arange(4), np.array([1, 9, 5, 1]))] == "n1"


def test_tlp_vectors() -> None:
    cap = np.full(5, 1000.0)
    measured = np.array([200.0, 400.0, 700.0, 1010.0, 0.0])
    # U = 20 -> round(60 * 20 / 40 + 40) = 70; U = 40 -> 100; U = 70 -> round(40 * 30 / 60) = 20; U > 100 -> 0; U = 0 -> 40
    assert tlp_score(measured, 0.0, np.zeros(5), cap).tolist() == [70, 100, 20, 0, 40]
    assert tlp_score(measured, 0.0, np.zeros(5), cap, has_metrics=False).tolist() == [0] * 5
    assert tlp_score(np.array([100.0]), 100.0, np.array([100.0]), np.array([1000.0])).tolist() == [85]  # U = 30
    assert predicted_cpu(1000) == 1500 and predicted_cpu(0) == 1000 and predicted_cpu(1000, 800) == 800


def test_lvrb_vector() -> None:
    # peers.md: C=100, req=10, avg=40, std=36 -> 57
    assert lvrb_score(np.array([40.0]), np.array([36.0]), np.array([10.0]), np.array([100.0])).tolist() == [57]
    # node score = min over resources: cpu 57, memory (avg 0, std 0, req 10 of 100) = 95
    two = lvrb_score(np.array([[40.0, 0.0]]), np.array([[36.0, 0.0]]), np.array([10.0, 10.0]), np.array([[100.0, 100.0]]))
    assert two.tolist() == [57]


def test_lroc_vectors() -> None:
    one = np.array([[100.0]])
    # no limits and L- < C: riskLimit 0, p = F(R-/C) / F(L-/C) = 1 -> 100
    assert lroc_score(np.array([[40.0]]), np.array([[40.0]]), np.array([10.0]), np.array([10.0]),
                      np.array([[30.0]]), np.array([[5.0]]), one).tolist() == [100]
    # limits: R- = 40, L- = 60, pod 10 / limit 50: R = 50, L = 110 > C: riskLimit = 10 / 60; load std 0 -> p = 1
    # risk = 0.5 / 6 -> round(100 * (1 - 0.0833)) = 92
    assert lroc_score(np.array([[40.0]]), np.array([[60.0]]), np.array([10.0]), np.array([50.0]),
                      np.array([[30.0]]), np.array([[0.0]]), one).tolist() == [92]
    # L- >= C: p = F(R-/C) alone; avg 60, std 0 and R- = 40 < mu -> F = 0 -> riskLoad 1; riskLimit (140-100)/(140-50)
    score = lroc_score(np.array([[40.0]]), np.array([[120.0]]), np.array([10.0]), np.array([20.0]),
                       np.array([[60.0]]), np.array([[0.0]]), one)
    assert score.tolist() == [round(100 * (1 - (0.5 * 40 / 90 + 0.5)))]


def test_koordinator_vectors() -> None:
    est = pod_estimate(np.array([1000.0, GIB]))
    assert est.tolist() == [850.0, float(round(0.7 * GIB))]
    assert pod_estimate(np.array([0.0, 0.0])).tolist() == [250.0, 200.0 * 1024 * 1024]
    alloc = np.array([[10000.0, 10 * GIB], [10000.0, 10 * GIB]])
    node_est = np.array([[6000.0 + 850, 2 * GIB], [6000.0, 2 * GIB]])  # 69 % > 65 -> rejected; 60 % passes
    assert load_aware_filter(node_est, alloc).tolist() == [False, True]
    # (10000 - 6000) * 100 // 10000 = 40, memory 80 -> 60
    assert load_aware_score(node_est[1:], alloc[1:]).tolist() == [60]


def test_registry() -> None:
    for name in ("default", "trimaran-tlp", "trimaran-lvrb", "trimaran-lroc", "koordinator", "kso", "kso-inproc"):
        assert name in POLICIES
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("nope")
