"""kso.core.safety: the safe overload bound (value for value the reference's) and the balance score."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kso.core.safety import balance_score, safe_overload_risk
from tests.support.decision_cases import (
    SETTINGS,
    tricky,
)
from tests.support.reference_risk import reference_safe_overload_risk


@SETTINGS
@given(st.lists(st.tuples(st.one_of(tricky, st.just(math.nan)), st.one_of(tricky, st.just(math.nan))), max_size=16),
       st.integers(1, 100))
def test_safe_overload_risk_equals_the_reference(pairs: list[tuple[float, float]], u_star: int) -> None:
    mu = np.array([m for m, _ in pairs], dtype=float)
    sigma = np.array([s for _, s in pairs], dtype=float)
    expected = reference_safe_overload_risk(mu, sigma, u_star / 100)
    got = safe_overload_risk(mu, sigma, u_star / 100)
    assert np.array_equal(got, expected, equal_nan=True), (mu, sigma, got, expected)
    assert [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in expected]


def test_balance_score_is_the_seeds_formula_on_known_statistics() -> None:
    mu = np.array([0.0, 0.5, 0.9, 1.0, 0.2])
    sigma = np.array([0.0, 0.04, 0.01, 1.0, 0.16])
    # int((1 - (mu + sqrt(sigma)) / 2) * 10 + 0.5): 10.5, 7.0, 5.5, 0.5, 7.5 truncated
    assert balance_score(mu, sigma).tolist() == [10, 7, 5, 0, 7]


def test_balance_score_of_nan_statistics_is_zero_without_a_warning() -> None:
    mu = np.array([np.nan, 0.5, np.nan, 0.2])
    sigma = np.array([0.04, np.nan, np.nan, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value encountered in cast" fails the test
        scores = balance_score(mu, sigma)
    assert scores.tolist() == [0, 0, 0, 9]
    assert scores.dtype.kind == "i"


@pytest.mark.parametrize("sigma", [1e-170, 1e-160, 5e-155])
def test_a_vanishing_sigma_is_read_as_no_spread(sigma: float) -> None:
    # sigma^2 underflows to 0 (or mu (1 - mu) / sigma^2 overflows): the limit sigma -> 0, not betainc(inf, inf)'s
    # NaN, which read as rank 1 gave a node above U* risk 0. The agent's fast path must agree value for value.
    mu = np.array([0.95, 0.5, 1.0, 0.0, np.nan])
    sig = np.full(mu.shape, sigma)
    expected = [1.0, 0.0, 1.0, 0.0, 0.0]
    assert safe_overload_risk(mu, sig, 0.9).tolist()[:4] == expected[:4]
    assert np.array_equal(reference_safe_overload_risk(mu, sig, 0.9), safe_overload_risk(mu, sig, 0.9), equal_nan=True)
