"""Volatile calibration probes read at several moments of one calibration: the median of the moments written, their
range beside it.

Why: a probe read once reads the machine's state at that moment as much as the quantity. On the 2-core VM
``host.step_after_save_us`` (retired 2026-11-26, cal19, with the executor's between-step rewrite it priced) read 72 µs
in one quiet calibration and 695 µs in the next, four minutes later (the first launch after an idle minute reads
lowest), and ``comm.blocking_wait_us`` at 2 processes 588-1,043 µs over five
calibrations, with one run's bootstrap band not reaching the others' (docs/validation.md, "Quiet, after fsdp16 and
save16"; docs/calibration.md, save16): more samples inside one launch cannot fix a swing that is the moment's.
So each volatile probe is taken :data:`MOMENTS` times, the takes spread through the calibration between its other
launches (:func:`launch_order`), and

    written value = median over the moments of the probe's value at each moment
    its range     = (min, max) over the moments, recorded in the cluster file's ``source`` and printed

With three moments one reading far off either way cannot move the written value outside the other two's range
(the median's breakdown point). The network sweep's volatile process counts (:data:`MOMENT_PROCESSES`) are launched
:data:`MOMENTS` times with a third of the calls each (:func:`calls_per_moment`, so the calls in total stay as
before); the fit is made on every call of every moment pooled (:func:`pooled`), and only the waits are read per
moment (:func:`moment_waits`). Which probes are volatile: docs/calibration.md, "Volatile probes at several moments".
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

MOMENTS = 3
"""Takes of each volatile probe per calibration (odd: the median is one of the takes): the network sweep's
:data:`MOMENT_PROCESSES` counts."""
MOMENT_PROCESSES = (2,)
"""Process counts of the network sweep whose waits swing between calibrations (docs/calibration.md, "Volatile
probes at several moments": 2 processes on the 2-core VM, where a call waits for a core least often and each wait
is a whole scheduler tick)."""


@dataclass(frozen=True)
class Moments:
    """One probe's value at each moment it was taken, in the order taken."""

    values: tuple[float, ...]

    def __post_init__(self):
        if not self.values:
            raise ValueError("Moments needs at least one value")

    @property
    def median(self) -> float:
        """The value written: the median of the moments (the middle one for an odd count)."""
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def text(self, unit: str = "us") -> str:
        """``695 us (moments 72, 695, 710; min..max 72..710)``: as the source field and the CLI record it."""
        return (f"{self.median:.0f} {unit} (moments {', '.join(f'{v:.0f}' for v in self.values)}; "
                f"min..max {self.low:.0f}..{self.high:.0f})")


def calls_per_moment(calls: int, moments: int = MOMENTS) -> int:
    """Timed calls per point in each of ``moments`` launches that together time at least ``calls``: ⌈calls / k⌉."""
    return math.ceil(calls / moments)


def launch_order(nprocs: Sequence[int], volatile: Sequence[int] = MOMENT_PROCESSES,
                 moments: int = MOMENTS) -> tuple[tuple[int, int], ...]:
    """The launches of a sweep as ``(process count, moment)``: every count of ``nprocs`` not in ``volatile`` once
    (moment 0), each volatile one ``moments`` times, its takes separated by the others, e.g. (2, 3, 4) with 2 volatile:
    2, 3, 2, 4, 2. Without a volatile count: ``nprocs`` in order."""
    takes = [p for p in nprocs if p in volatile]
    others = [p for p in nprocs if p not in volatile]
    if not takes:
        return tuple((p, 0) for p in nprocs)
    gaps = [others[i::moments] for i in range(moments)]  # the others spread over the gaps after each take
    order = []
    for k in range(moments):
        order += [(p, k) for p in takes]
        order += [(p, 0) for p in gaps[k]]
    return tuple(order)


def pooled(measurements) -> list:
    """Measurements of the same (op, algorithm, processes, size) from several moments merged into one with every call
    (in moment order), in the order first seen; a point taken once stays as it is."""
    from executor.collective_bench import Measurement

    groups: dict = {}
    for m in measurements:
        groups.setdefault((m.op, m.algorithm, m.ranks, m.nbytes), []).append(m)
    return [ms[0] if len(ms) == 1 else
            Measurement.from_times(*key, [t for m in ms for t in m.times_s]) for key, ms in groups.items()]


def moment_waits(fast, by_moment: Sequence[list], estimate: Callable, probes=()) -> tuple[dict, dict]:
    """The waits per process count (``comm.blocking_wait_us``: the fitted series) and per op (``comm.op_wait_us``: with
    the checked probes, not the replays) of each moment's measurements against the same fast fit, as
    :func:`executor.calibrate_run.fit_measured` reads them from all calls: ``({p: Moments}, {op: {p: Moments}})``."""
    from executor.calibrate_modes import blocking_waits, op_waits
    from executor.calibrate_replay import split_probes

    whole: dict = {}
    per_op: dict = {}
    for measured in by_moment:
        fitted, _, checked = split_probes(measured, probes)
        for p, us in blocking_waits(fast, fitted, estimate).items():
            whole.setdefault(p, []).append(us)
        for op, table in op_waits(fast, fitted + checked, estimate).items():
            for p, us in table.items():
                per_op.setdefault(op, {}).setdefault(p, []).append(us)
    return ({p: Moments(tuple(v)) for p, v in whole.items()},
            {op: {p: Moments(tuple(v)) for p, v in t.items()} for op, t in per_op.items()})


def with_medians(waits: dict, per_op: dict, wait_moments: dict, op_moments: dict) -> tuple[dict, dict]:
    """``waits`` (process count → µs) and ``per_op`` (op → process count → µs) with every entry taken at several
    moments replaced by the median of its moments (module docstring); the others as they are."""
    waits = {**waits, **{p: m.median for p, m in wait_moments.items()}}
    per_op = {op: {**table, **{p: m.median for p, m in op_moments.get(op, {}).items()}} for op, table in per_op.items()}
    return waits, per_op


def moments_text(table: dict, unit: str = "us") -> str:
    """``2 processes 695 us (moments ...)``, per process count of a ``{p: Moments}`` table."""
    return ", ".join(f"{p} processes {m.text(unit)}" for p, m in sorted(table.items()))


def moments_source_text(wait_moments: dict | None, op_moments: dict | None) -> str:
    """The source field's record of the waits taken at several moments (each the median written, every moment and
    their range), ending ``; ``; empty where none was."""
    if not wait_moments:
        return ""
    per_op = "; ".join(f"{op.value}: {moments_text(t)}" for op, t in sorted((op_moments or {}).items(),
                                                                         key=lambda kv: kv[0].value))
    return (f"taken at {len(next(iter(wait_moments.values())).values)} moments, the median written "
            f"(executor.calibrate_moments): blocking_wait_us {moments_text(wait_moments)}"
            + (f"; op_wait_us {per_op}" if per_op else "") + "; ")
