"""decisions.agents.congestion: the congestion score equals the seed's rule."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.support.decision_cases import (
    SETTINGS,
)


@SETTINGS
@given(st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-10**6, 10**6).map(float),
                          st.sampled_from([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e308, 0.5, 99.0, 100.0, 101.0])),
                max_size=20),
       st.integers(1, 10**6))
def test_congestion_score_equals_the_seed_rule(factors: list[float], factor_max: int) -> None:
    """cf = min(v, MAX) if v is a positive integer else 0; score = round-half-away-from-zero(10 (1 - cf / MAX)),
    value by value in Python."""
    from decisions.agents.congestion import congestion_score

    def rule(v: float) -> int:
        cf = min(v, factor_max) if (math.isfinite(v) and v > 0 and v == math.floor(v)) or v == math.inf else 0.0
        x = 10.0 * (1.0 - cf / factor_max)
        return int(math.copysign(math.floor(abs(x) + 0.5), x))

    got = congestion_score(np.array(factors, dtype=float), factor_max)
    assert got.tolist() == [rule(v) for v in factors]
