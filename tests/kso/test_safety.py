"""kso.core.safety's scores on the inputs the agent can hand them: known statistics and NaN (none known)."""

from __future__ import annotations

import warnings

import numpy as np

from kso.core.safety import balance_score


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
