"""How many steps a timed run takes: a fixed count, or enough to fill a time budget (``--measure-s``).

Why a budget: on a 2-core VM a step that waits for a core waits a whole scheduler tick (~4 ms,
``benchmarks/gloo_step_stalls.py``), so a short step's times are bimodal (fast, or fast + a tick) and
the median of 20 of them jumps by a tick when the share of slow steps crosses one half. Measured on the
two quiet suite runs of 2026-11-25 (``benchmarks/step_spread.py``, [src: own-step-spread-2026-11-25]): with 20 measured steps the bootstrap
p10..p90 of a case's median spans 17 % of it (median over the 21 cases), 34 % for ps-async. The
sampling spread of a median falls as ``1/sqrt(n)``, so a case gets ``n`` measured steps with
``n · t_step ≥ measure_s``: short cases many, long cases the minimum, and the suite's length grows by
at most ``measure_s`` per case.

The count (:func:`total_steps`), from ``t_w``, the median over the warm-up steps after the first of the
slowest rank's time (:func:`warm_step_s`; rank 0 has every rank's record; it broadcasts the count so all
ranks run the same number of steps)::

    total = min(max_steps, max(steps, warmup + ceil(measure_s / t_w)))

The first step is left out (first-call costs: 2-6× the others in the suite's runs), and a median rather than
the last step alone, since one step that waited for a core under load (30-50 ms against 10, seen on the loaded
VM, 2026-11-25) would cut the count to ``steps``.
"""

from __future__ import annotations

import math
import statistics

DEFAULT_MAX_STEPS = 400
"""Most steps (warm-up included) a budgeted run takes: a guard on work (a 1 ms step would otherwise run
thousands), not a statistical choice."""


def total_steps(*, steps: int, warmup: int, measure_s: float | None, warm_step_s: float,
                max_steps: int = DEFAULT_MAX_STEPS) -> int:
    """Steps to run in all, warm-up included (module docstring); ``measure_s`` None: ``steps``."""
    if measure_s is None or not warm_step_s > 0:
        return steps
    wanted = warmup + math.ceil(measure_s / warm_step_s)
    return max(steps, min(max_steps, wanted))


def warm_step_s(slowest_s: list[float]) -> float:
    """``t_w`` from the slowest rank's time of each warm-up step so far: the median of those after the first
    (the first alone when it is the only one)."""
    return statistics.median(slowest_s[1:] or slowest_s)


def decision_step(warmup: int) -> int:
    """Index of the step after which the count is decided: the last warm-up step (the first step without one)."""
    return max(warmup, 1) - 1
