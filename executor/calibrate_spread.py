"""Each fitted link parameter's spread: the fit repeated on bootstrap resamples of the measured calls.

Efron's bootstrap (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 6 and 13): draw each
point's calls again with replacement (as many as were timed), take the statistic the parameters were fitted to
(the calibration's: the 10th percentile, :func:`executor.collective_bench.percentile`), solve the same relative-L1
problem (:func:`executor.calibrate_solve.solve_relative_l1`) on the design matrix linearised at the fitted values (the
executed schedules' replay is exactly linear in them), and report the 10th and 90th percentiles of each
parameter over :data:`RESAMPLES` resamples. A wide interval says the measurements do not pin that parameter
down; it is the spread of one run's sample, not of the machine from one run to the next (which the three
consecutive runs of docs/calibration.md show).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from executor.calibrate import PARAMETERS, base_values, design_matrix
from executor.calibrate_solve import solve_relative_l1
from executor.collective_bench import percentile
from simulator.cluster.spec import Cluster

RESAMPLES = 100
"""Bootstrap resamples (the percentiles of 100 resamples move by a few % of the interval between seeds)."""
SEED = 0
"""Seed of the resampling: the same measurements give the same spread."""
_NAMES = {"call_latency_us": ("call_latency_us", 1.0), "latency_us": ("latency_us", 1.0),
          "inv_bw": ("bw_GBps", -1.0), "inv_hbm_bw": ("hbm_bw_GBps", -1.0)}
"""Fitted quantity → (reported name, power): bandwidths are reported as 1 / the fitted inverse."""


def p10(times) -> float:
    """The 10th percentile of ``times``: the statistic the calibration fits the network to."""
    return percentile(times, 0.10)


def parameter_spread(fitted: Cluster, measurements, fitted_names: tuple[str, ...], estimate: Callable, *,
                     statistic: Callable = p10, resamples: int = RESAMPLES,
                     seed: int = SEED) -> dict[str, tuple[float, float]]:
    """``{name: (p10, p90)}`` of each fitted parameter over bootstrap resamples (module docstring).

    ``fitted``: the fitted cluster (the linearisation point, without waits); ``fitted_names``: ``LinkFit.fitted``;
    ``statistic``: what each resample's point is reduced to (the one the parameters were fitted to).
    Measurements with a single call contribute their one time to every resample.
    """
    A, t0 = design_matrix(fitted, measurements, estimate)
    theta0 = base_values(fitted)
    cols = [PARAMETERS.index(name) for name in fitted_names]
    fixed = [k for k in range(len(PARAMETERS)) if k not in cols]
    offset = t0 - A @ theta0 + A[:, fixed] @ theta0[fixed]
    positive = [cols.index(k) for k in (2, 3) if k in cols]
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        target = np.array([statistic(rng.choice(m.times_s, size=len(m.times_s))) for m in measurements])
        theta = solve_relative_l1(A[:, cols], target - offset, target, positive)
        if theta is not None:
            draws.append(theta)
    if not draws:
        return {}
    values = np.array(draws)
    out = {}
    for j, k in enumerate(cols):
        name, power = _NAMES[PARAMETERS[k]]
        column = values[:, j] ** power if power < 0 else values[:, j]
        lo, hi = np.percentile(column, [10, 90])
        out[name] = (float(lo), float(hi))
    return out

