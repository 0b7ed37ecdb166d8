"""Cost against harm: which policies lie on the Pareto frontier, and what kso's curve gives at a peer's cost.

Pure functions on (cost, harm) points (both lower is better); ``bench_report`` turns them into sentences
and ``frontier_plot`` into the headline figure.

- **Pareto frontier**: a point is on it when no other point has cost <= and harm <= with at least one of
  the two strictly lower. Points with a NaN coordinate (a metric the cells do not have) are neither on it
  nor dominate anything.
- **Interpolation along a curve**: a curve is one policy family's points over its knob sweep; its harm at
  cost c is linear in cost between the two neighbouring points (by cost) around c; points that share one
  cost count at their mean harm; a cost below the curve's cheapest or above its dearest point is outside
  the curve's range (``None``): nothing is extrapolated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    label: str  # the policy spec
    family: str  # the curve it belongs to
    cost: float  # mean over seeds
    harm: float
    cost_ci: float = math.nan  # 95% half-width over seeds (NaN: one seed)
    harm_ci: float = math.nan


def _finite(*values: float) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """a dominates b: no more cost and no more harm, and strictly less of one."""
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each (cost, harm) point: is it on the Pareto frontier of ``points``?"""
    ok = [_finite(*p) for p in points]
    return [ok[i] and not any(ok[j] and dominates(points[j], p) for j in range(len(points)) if j != i)
            for i, p in enumerate(points)]


def dominated_by(points: Sequence[tuple[float, float]], i: int) -> list[int]:
    """Indices of the points that dominate point ``i``."""
    if not _finite(*points[i]):
        return []
    return [j for j, q in enumerate(points) if j != i and _finite(*q) and dominates(q, points[i])]


def dominates_all(a: Sequence[float], b: Sequence[float]) -> bool:
    """a dominates b on every axis at once (each lower is better: negate an axis where higher is better): no worse
    on any, strictly better on one."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


def undominated(points: Sequence[Sequence[float]]) -> list[bool]:
    """For each point (a vector, every axis lower is better): does no other finite point dominate it on every axis?"""
    ok = [_finite(*p) for p in points]
    return [ok[i] and not any(ok[j] and dominates_all(points[j], p) for j in range(len(points)) if j != i)
            for i, p in enumerate(points)]


def interpolate(curve: Sequence[tuple[float, float]], cost: float) -> float | None:
    """Harm of ``curve`` (cost, harm points, any order) at ``cost``, linear between the neighbouring points;
    None when ``cost`` is outside the curve's cost range or the curve has no finite point."""
    pts = sorted((c, h) for c, h in curve if _finite(c, h))
    if not pts or not _finite(cost):
        return None
    merged: list[tuple[float, float]] = []  # one point per cost: the mean harm of the points sharing it
    i = 0
    while i < len(pts):
        j = i
        while j < len(pts) and pts[j][0] == pts[i][0]:
            j += 1
        merged.append((pts[i][0], sum(h for _, h in pts[i:j]) / (j - i)))
        i = j
    if cost < merged[0][0] or cost > merged[-1][0]:
        return None
    for (c0, h0), (c1, h1) in zip(merged, merged[1:], strict=False):
        if c0 <= cost <= c1:
            return h0 + (h1 - h0) * (cost - c0) / (c1 - c0)
    return merged[0][1]  # a single cost, equal to ``cost``


def cost_range(curve: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    costs = [c for c, h in curve if _finite(c, h)]
    return (min(costs), max(costs)) if costs else None
