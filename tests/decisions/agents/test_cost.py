"""decisions.agents.cost: the cost agent's score."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from decisions.agents.cost import cost_score


def test_cost_score() -> None:
    assert cost_score(np.array([1.0, 3.0, 2.0, np.nan])).tolist() == [10, 0, 5, 0]
    assert cost_score(np.array([2.0, 2.0])).tolist() == [10, 10]


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=30))
def test_cost_score_ranks_cheaper_higher(costs: list[float]) -> None:
    s = cost_score(np.array(costs))
    assert ((0 <= s) & (s <= 10)).all()
    order = np.argsort(costs, kind="stable")
    assert (np.diff(s[order]) <= 0).all()
