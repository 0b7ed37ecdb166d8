"""IBM kube-safe-scheduler baseline: mean and std of the recent window, blended with an ARIMA(5,1,0)
one-step forecast of chunk means at weight 0.2.

Window: the last hour of 5-minute values. Chunks: 15-minute means over the last 12 hours (48 chunks);
ARIMA(5,1,0) = AR(5) without intercept on the differenced chunk means, fitted by least squares. The
safe scheduler scores on mean + std of the window (about the 84th percentile); the quantiles here are the
Gaussian ones around the blended mean with the window std."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from forecasting.models._base import Grid, GridForecaster, gaussian
from forecasting.models.trimaran import TrimaranForecaster
from forecasting.types import UtilisationSeries

WINDOW_BINS = 12  # 1 h
CHUNK_BINS = 3  # 15 min
N_CHUNKS = 48  # 12 h of chunks: 47 differences -> 42 equations for 5 AR coefficients
AR_ORDER = 5
BLEND = 0.2


def ar_one_step(chunks: np.ndarray, p: int = AR_ORDER) -> np.ndarray:
    """One-step ARIMA(p,1,0) forecast per row of ``chunks`` (S, m):
    d_k = c_k - c_{k-1};  d_k = sum_{i=1..p} phi_i d_{k-i} (least squares, tiny ridge so constant
    series give phi = 0);  c_{m} = c_{m-1} + sum_i phi_i d_{m-i}."""
    d = np.diff(chunks, axis=1)  # (S, m-1)
    S, m1 = d.shape
    # lagged design: X[:, k, i] = d[:, k + p - 1 - i] for targets d[:, k + p]
    X = np.stack([d[:, p - 1 - i : m1 - 1 - i] for i in range(p)], axis=2)  # (S, m1-p, p)
    yv = d[:, p:]
    xtx = np.einsum("ski,skj->sij", X, X)
    xty = np.einsum("ski,sk->si", X, yv)
    ridge = 1e-12 + 1e-8 * np.trace(xtx, axis1=1, axis2=2)
    phi = np.linalg.solve(xtx + ridge[:, None, None] * np.eye(p)[None], xty[..., None])[..., 0]
    recent = d[:, ::-1][:, :p]  # d_{m-1}, d_{m-2}, ...
    return chunks[:, -1] + np.einsum("si,si->s", phi, recent)


class IBMForecaster(GridForecaster):
    name = "ibm"
    min_bins = CHUNK_BINS * N_CHUNKS
    fallback = TrimaranForecaster  # same mean/std-of-window idea without the ARIMA term

    def rolling_points(self, grid: Grid, h: int) -> np.ndarray:
        raise NotImplementedError("ibm is a fixed baseline; it has no calibrated variant")

    # mean = 0.8 * mean(window) + 0.2 * ARIMA(5,1,0) one-step chunk mean;  std = std(window)
    def _predict(
        self, grid: Grid, h: int, series: Sequence[UtilisationSeries]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        v = grid.values
        window = v[:, -WINDOW_BINS:]
        chunks = v[:, -CHUNK_BINS * N_CHUNKS :].reshape(len(v), N_CHUNKS, CHUNK_BINS).mean(axis=2)
        mean = (1.0 - BLEND) * window.mean(axis=1) + BLEND * ar_one_step(chunks)
        std = window.std(axis=1)
        return mean, std, gaussian(mean, std)
