"""The fluid lower bound on node-hours (benchmarks/sim/bound.py) on a hand-counted case."""

from __future__ import annotations

import pytest

from benchmarks.sim.bound import fluid_bound
from tests.benchmarks.sim.test_rules import GIB, scenario


def test_fluid_bound_counts_the_fewest_nodes_whose_u_star_share_covers_demand() -> None:
    # nodes of 8 GiB (cpu 4, 2, 1 cores, pool order); three pods of 4 GiB request, 4 steps of 5 min:
    #   step 0: p0 alone, 1.0x -> 4 GiB demand: one node (0.9 x 8 = 7.2 GiB)
    #   step 1: p0 + p1, 1.0x each -> 8 GiB: two nodes (7.2 < 8 <= 14.4)
    #   step 2: p0 + p1 + p2 at 1.0, 1.0, 1.5 -> 14 GiB demand, 12 GiB requested: two nodes
    #   step 3: p2 alone at 1.5 -> 6 GiB: one node
    pods = [(100, 4 * GIB, 0, 3, [0.5] * 4, [1.0] * 4),
            (100, 4 * GIB, 1, 3, [0.5] * 4, [1.0] * 4),
            (100, 4 * GIB, 2, 9, [0.5] * 4, [1.5] * 4)]
    s = scenario([4000, 2000, 1000], pods, 4)
    b = fluid_bound(s, u_star=0.9)
    assert b.best_node_hours == pytest.approx((1 + 2 + 2 + 1) * 5 / 60)
    assert b.prefix_node_hours == b.best_node_hours  # equal memory: pool order is as good as the best case
    assert b.short_steps == 0 and b.binding["memory demand"] == 4
    # one node allowed above U* (up to 100%): step 1's 8 GiB fits one node, step 2's 14 GiB still needs two
    assert fluid_bound(s, 0.9, hot_nodes=1).best_node_hours == pytest.approx((1 + 1 + 2 + 1) * 5 / 60)
    # scored after a warm-up of 2 steps (as the report does when the cells say so): steps 2 and 3 only
    assert fluid_bound(s, 0.9, from_step=2).best_node_hours == pytest.approx((2 + 1) * 5 / 60)


def test_fluid_bound_counts_the_whole_pool_when_it_cannot_cover_a_step() -> None:
    s = scenario([1000], [(100, 4 * GIB, 0, 9, [0.5] * 2, [2.0] * 2)], 2)  # 8 GiB demand > 0.9 x 8 GiB
    b = fluid_bound(s, u_star=0.9)
    assert b.short_steps == 2 and b.best_node_hours == pytest.approx(2 * 5 / 60)
