"""benchmarks.latency.node_lists: the lists kube-scheduler v1.36 sends an extender (numFeasibleNodesToFind's sizes,
a window rotating through every node, a new order each call)."""

from __future__ import annotations

import pytest

from benchmarks.latency.node_lists import node_lists, num_feasible_nodes_to_find


@pytest.mark.parametrize(("nodes", "expected"), [(50, 50), (100, 100), (500, 230), (1000, 420), (5000, 500),
                                                 (10_000, 500), (150, 100)])
def test_num_feasible_nodes_to_find_is_kube_schedulers(nodes: int, expected: int) -> None:
    assert num_feasible_nodes_to_find(nodes) == expected


def test_a_set_percentage_is_used_and_capped_at_every_node() -> None:
    assert num_feasible_nodes_to_find(1000, 30) == 300
    assert num_feasible_nodes_to_find(1000, 1) == 100  # at least minFeasibleNodesToFind
    assert num_feasible_nodes_to_find(1000, 100) == 1000


def test_the_window_rotates_through_every_node_in_a_new_order() -> None:
    names = [f"n{i}" for i in range(1000)]
    lists = node_lists("kube-scheduler", names, 5)
    assert [len(listed) for listed in lists] == [420] * 5
    assert set(lists[0]) == set(names[:420]) and set(lists[1]) == set(names[420:840])
    assert set(lists[2]) == set(names[840:] + names[:260])  # wraps around
    assert lists[0] != sorted(lists[0], key=names.index)  # completion order, not the snapshot's
    small = node_lists("kube-scheduler", names[:60], 3)
    assert all(set(listed) == set(names[:60]) for listed in small) and small[0] != small[1]
    fixed = node_lists("fixed", names, 3)
    assert all(listed == names for listed in fixed)
    with pytest.raises(ValueError, match="unknown list kind"):
        node_lists("sorted", names, 1)
