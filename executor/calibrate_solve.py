"""The calibration's solver: a non-negative fit minimising the sum of |relative error|.

Fit: minimise the sum of |relative error| (iteratively reweighted least squares towards the L1
fit, which tracks the median absolute error reported), with every parameter >= 0, by solving the
small non-negative problem exactly over all active sets. :func:`executor.calibrate.fit_cluster` calls it on the
linearised estimate; :mod:`executor.calibrate_spread` on bootstrap resamples.
"""

from __future__ import annotations

import itertools

import numpy as np

IRLS_ITERATIONS = 40
"""Reweighting rounds from the least-squares to the least-absolute-relative-error fit."""
IRLS_FLOOR = 1e-3
"""Smallest |relative residual| a weight is computed from (0.1 %), so weights stay finite."""


def solve_relative_l1(A: np.ndarray, target: np.ndarray, scale: np.ndarray,
                      must_be_positive: list[int]) -> np.ndarray | None:
    """θ >= 0 minimising Σ|A·θ − target| / scale (IRLS); None if no solution keeps the listed θ_k > 0."""
    weights = np.ones(len(target))
    theta = None
    for _ in range(IRLS_ITERATIONS):
        w = np.sqrt(weights) / scale
        theta = _nnls_exhaustive(A * w[:, None], target * w, must_be_positive)
        if theta is None:
            return None
        residual = np.abs(A @ theta - target) / scale
        weights = 1 / np.maximum(residual, IRLS_FLOOR)
    return theta


def _nnls_exhaustive(A: np.ndarray, b: np.ndarray, must_be_positive: list[int]) -> np.ndarray | None:
    """Non-negative least squares by trying every active set (fine for a handful of columns)."""
    n = A.shape[1]
    best, best_cost = None, np.inf
    for size in range(1, n + 1):
        for cols in itertools.combinations(range(n), size):
            if not set(must_be_positive) <= set(cols):
                continue
            sol, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
            if np.any(sol < 0) or any(sol[cols.index(k)] <= 0 for k in must_be_positive):
                continue
            theta = np.zeros(n)
            theta[list(cols)] = sol
            cost = float(np.sum((A @ theta - b) ** 2))
            if cost < best_cost:
                best, best_cost = theta, cost
    return best
