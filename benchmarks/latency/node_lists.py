"""The NodeNames lists kube-scheduler (v1.36) sends an extender, for benchmarks that call one the way it does.

kube-scheduler's ``findNodesThatPassFilters`` (pkg/scheduler/schedule_one.go) checks the nodes of its snapshot from
``nextStartNodeIndex`` on, in parallel, and stops once ``numFeasibleNodesToFind`` of them passed; each passing node
is appended as its check completes, so the list is in completion order, and ``nextStartNodeIndex`` moves on by the
nodes processed. The extender's filter gets that list, its prioritize the nodes filter passed, in that order. So
when every node passes: below 100 nodes, every node each call in a new order; from 100 on, a window of
``numFeasibleNodesToFind`` nodes that rotates through the cluster, in a new order each call. kube-scheduler never
sends the same list twice in a row; ``fixed`` (every node, always in the same order) is what benchmarks used to
send, kept for comparison.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

# pkg/scheduler/schedule_one.go
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
BASE_PERCENTAGE_OF_NODES_TO_SCORE = 50

LIST_KINDS = ("kube-scheduler", "fixed")


def num_feasible_nodes_to_find(all_nodes: int, percentage_of_nodes_to_score: int = 0) -> int:
    """How many passing nodes kube-scheduler looks for before it stops (its ``numFeasibleNodesToFind``; the
    default ``percentageOfNodesToScore`` 0 is the adaptive 50 - nodes/125 percent, at least 5)."""
    if all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return all_nodes
    percentage = percentage_of_nodes_to_score
    if percentage == 0:
        percentage = max(BASE_PERCENTAGE_OF_NODES_TO_SCORE - all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND) if percentage < 100 else all_nodes


def scheduler_lists(names: Sequence[str], percentage_of_nodes_to_score: int = 0, seed: int = 0) -> Iterator[list[str]]:
    """The lists of successive scheduling cycles when every node passes kube-scheduler's own filters: the window
    from ``nextStartNodeIndex`` (which then moves on by the window's length), in a random order (completion order
    of parallel checks). Endless."""
    rng = random.Random(seed)
    n = len(names)
    k = num_feasible_nodes_to_find(n, percentage_of_nodes_to_score)
    start = 0
    while True:
        window = [names[(start + j) % n] for j in range(k)]
        rng.shuffle(window)
        start = (start + k) % n
        yield window


def node_lists(kind: str, names: Sequence[str], count: int, seed: int = 0) -> list[list[str]]:
    """``count`` successive lists of ``kind`` (LIST_KINDS): kube-scheduler's, or the same full list ``count`` times."""
    if kind == "fixed":
        fixed = list(names)
        return [fixed] * count
    if kind != "kube-scheduler":
        raise ValueError(f"unknown list kind {kind!r}; expected one of {LIST_KINDS}")
    lists = scheduler_lists(names, seed=seed)
    return [next(lists) for _ in range(count)]
