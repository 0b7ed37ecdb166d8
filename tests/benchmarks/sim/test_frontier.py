"""The frontier maths (benchmarks/sim/frontier.py) on hand-counted points."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.sim.frontier import cost_range, dominated_by, dominates_all, interpolate, pareto_front, undominated


def test_pareto_front_by_hand() -> None:
    #        cost harm
    pts = [(10.0, 5.0),   # 0: on it (cheapest)
           (12.0, 2.0),   # 1: on it
           (12.0, 3.0),   # 2: dominated by 1 (same cost, more harm)
           (15.0, 2.0),   # 3: dominated by 1 (more cost, same harm)
           (20.0, 0.0),   # 4: on it (least harm)
           (11.0, 6.0)]   # 5: dominated by 0
    assert pareto_front(pts) == [True, True, False, False, True, False]
    assert dominated_by(pts, 2) == [1] and dominated_by(pts, 3) == [1] and dominated_by(pts, 5) == [0]
    assert dominated_by(pts, 4) == []


def test_equal_points_do_not_dominate_each_other_and_nan_points_are_off_the_front() -> None:
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [True, True]
    assert pareto_front([(1.0, math.nan), (2.0, 2.0), (0.5, 0.5)]) == [False, False, True]
    assert pareto_front([(1.0, math.nan), (2.0, 2.0)]) == [False, True]  # a NaN point dominates nothing


def test_interpolation_is_linear_in_cost_between_neighbours() -> None:
    curve = [(30.0, 1.0), (10.0, 9.0), (20.0, 5.0)]  # any order
    assert interpolate(curve, 15.0) == pytest.approx(7.0)  # halfway between (10, 9) and (20, 5)
    assert interpolate(curve, 27.5) == pytest.approx(2.0)  # 3/4 of the way from (20, 5) to (30, 1)
    assert interpolate(curve, 10.0) == 9.0 and interpolate(curve, 30.0) == 1.0
    assert interpolate(curve, 9.99) is None and interpolate(curve, 30.01) is None  # outside: not extrapolated
    assert cost_range(curve) == (10.0, 30.0)


def test_interpolation_merges_points_at_one_cost_and_skips_nan() -> None:
    curve = [(10.0, 4.0), (10.0, 8.0), (20.0, 2.0), (15.0, math.nan)]
    assert interpolate(curve, 10.0) == 6.0  # mean of the two points at cost 10
    assert interpolate(curve, 12.5) == pytest.approx(5.0)
    assert interpolate([(10.0, 3.0)], 10.0) == 3.0 and interpolate([(10.0, 3.0)], 11.0) is None
    assert interpolate([], 1.0) is None and interpolate([(math.nan, 1.0)], 1.0) is None


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=12))
def test_front_points_are_undominated_and_every_other_point_is_dominated_by_one(pts: list[tuple[float, float]]) -> None:
    front = pareto_front(pts)
    assert any(front)
    for i, on in enumerate(front):
        assert on == (dominated_by(pts, i) == [])


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=2, max_size=8), st.floats(0, 100))
def test_interpolated_harm_lies_between_the_curve_extremes(curve: list[tuple[float, float]], cost: float) -> None:
    got = interpolate(curve, cost)
    lo, hi = cost_range(curve)  # type: ignore[misc]
    assert (got is None) == (cost < lo or cost > hi)
    if got is not None:
        harms = [h for _, h in curve]
        assert min(harms) - 1e-9 <= got <= max(harms) + 1e-9


def test_every_axis_dominance_by_hand() -> None:
    # (node-h, overloaded node-h, pods OOM-killed, -pod-time served %)
    pts = [(100.0, 50.0, 10.0, -95.0),   # 0: cheapest, serves least: not dominated
           (120.0, 10.0, 0.0, -100.0),   # 1: not dominated
           (130.0, 10.0, 0.0, -100.0),   # 2: dominated by 1 (dearer, else equal)
           (90.0, 5.0, 0.0, -90.0),      # 3: cheapest and safest, serves least: not dominated
           (110.0, float("nan"), 0.0, -99.0)]  # 4: missing a value: neither on it nor dominating
    assert dominates_all(pts[1], pts[2]) and not dominates_all(pts[1], pts[1])
    assert not dominates_all(pts[3], pts[0])  # cheaper and safer, but serves less pod-time
    assert undominated(pts) == [True, True, False, True, False]
