"""The calibration's records: :class:`FitRow` (one measured point against the fitted cluster's estimate) and
:class:`LinkFit` (the fitted parameters and how well they reproduce the measurements), as
:func:`executor.calibrate.fit_cluster` and :func:`executor.calibrate_run.calibrate` return them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class FitRow:
    """One measured point against the fitted cluster's estimate."""

    op: str
    algorithm: str
    ranks: int
    nbytes: int
    measured_s: float
    """The checked statistic of the measured times (their plain mean, :data:`executor.calibrate.TARGET`), seconds."""
    median_s: float
    p10_s: float
    p90_s: float
    estimate_s: float
    """The fitted cluster's ``registry.estimate`` time, seconds."""
    times_s: tuple[float, ...] = ()
    """Every timed call, seconds (the measurement's ``times_s``)."""

    @property
    def error_pct(self) -> float:
        """(estimate − measured) / measured × 100."""
        return (self.estimate_s - self.measured_s) / self.measured_s * 100


@dataclass(frozen=True, kw_only=True)
class LinkFit:
    """Fitted parameters and how well the fitted cluster reproduces the measurements."""

    call_latency_us: float
    latency_us: float
    bw_GBps: float
    hbm_bw_GBps: float
    fitted: tuple[str, ...]
    """Which of :data:`PARAMETERS` were fitted (the others kept the base cluster's value)."""
    rows: tuple[FitRow, ...]
    relinearised: int
    """Linearised fits performed (1 when the estimate is exactly linear in the parameters)."""
    spread: dict[str, tuple[float, float]] | None = None
    """Per parameter (``call_latency_us``, ``latency_us``, ``bw_GBps``, ``hbm_bw_GBps`` if fitted): its 10th and
    90th percentiles over bootstrap resamples of the measured calls (:mod:`executor.calibrate_spread`)."""
    machine: str = ""
    """How quiet the machine was while measuring (:func:`executor.calibrate_run.machine_note`); empty: not recorded."""
    replay_step_us: float | None = None
    """``comm.replay_step_us`` fitted to the replayed probe (:mod:`executor.calibrate_replay`); None: not measured."""
    probes: tuple[FitRow, ...] = ()
    """Points measured beside the fit and not in it (the native broadcast; the replays, which only set
    :attr:`replay_step_us`), each against the calibrated cluster."""
    blocking_wait_us: dict[int, float] | None = None
    """Expected wait for a core per blocking call, µs, per process count (``comm.blocking_wait_us``,
    :mod:`executor.calibrate_modes`); None: not measured (the parameters above were fitted to
    :data:`executor.calibrate.TARGET`)."""
    op_wait_us: dict | None = None
    """Per op measured (``Op`` → process count → µs), its own expected wait per blocking call (``comm.op_wait_us``,
    :func:`executor.calibrate_modes.op_waits`); None: not measured."""
    op_wait_spread: dict | None = None
    """Per op measured, per process count, the 10th and 90th percentiles of its own wait over bootstrap resamples."""
    wait_spread: dict[int, tuple[float, float]] | None = None
    """Per process count, the 10th and 90th percentiles of the wait over bootstrap resamples of the calls."""
    wait_moments: dict | None = None
    """Per process count taken at several moments (:mod:`executor.calibrate_moments`), its wait at each moment
    (:class:`~executor.calibrate_moments.Moments`, µs); :attr:`blocking_wait_us` holds their median. None or empty:
    taken once."""
    op_wait_moments: dict | None = None
    """The same per op (``Op`` → process count → ``Moments``) for :attr:`op_wait_us`."""

    @property
    def median_abs_error_pct(self) -> float:
        return statistics.median(abs(r.error_pct) for r in self.rows)

    @property
    def abs_error_spread_pct(self) -> tuple[float, float]:
        """(smallest, largest) absolute error over the rows, %."""
        errors = [abs(r.error_pct) for r in self.rows]
        return min(errors), max(errors)
