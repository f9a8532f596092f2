"""What the analytical closed form needs to know about a pipeline schedule, read from its action lists.

The closed form (:mod:`simulator.analytical_formula`) has a formula for three families of
schedules. :func:`schedule_shape` reads a :class:`~simulator.schedules.PipelineSchedule` (built in,
or loaded with :func:`~simulator.schedules.from_csv`) and says which family it belongs to and how
many micro-batches each rank takes in before its first backward; a schedule of none of them raises
SpecError (simulate it with the discrete-event engine, which runs any valid action list).

- :attr:`PipelineFamily.ALL_FORWARDS_FIRST`: every rank runs the forwards of micro-batches
  0 … m−1, then their backwards in the same order (GPipe).
- :attr:`PipelineFamily.ONE_F_ONE_B`: exactly the action lists of
  :func:`~simulator.schedules.one_f_one_b` (rank r: d_r = min(p − r, m) forwards, then one forward
  one backward). Other warm-up depths are not taken: with d_0 = d_1 a path runs up to rank 0 and
  back down every micro-batch (p = 4, m = 8, d = (3, 3, 2, 1), F = 1, B = 2: dry run 48 against the
  33 of 1F1B), which the closed form does not follow.
- :attr:`PipelineFamily.INTERLEAVED`: exactly the action lists of
  :func:`~simulator.schedules.interleaved_1f1b` for its (p, m, v).

:func:`builtin_shape` gives a built-in generator's shape from its formula, in O(p) whatever m is
(tested equal to reading the built schedule); :func:`shape_of` remembers it per (kind, p, m, v) in a
:class:`~simulator.compile.CostCache`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.schedules import (Action, ActionKind, PipelineSchedule, ScheduleKind, chained, interleaved_1f1b,
                                 interleaved_ok, make_schedule, max_in_flight, micro_batches_ok, one_f_one_b)


class PipelineFamily(Kind):
    """The schedule families the closed form has a formula for (module docstring)."""

    ALL_FORWARDS_FIRST = "all-forwards-first"
    """Every rank: all forwards, then all backwards, micro-batches in order (GPipe)."""
    ONE_F_ONE_B = "1f1b"
    """One chunk per rank: a warm-up of min(p − r, m) forwards, then one forward one backward (PipeDream-Flush)."""
    INTERLEAVED = "interleaved"
    """Megatron-LM's interleaved 1F1B with v > 1 chunks per rank."""


@dataclass(frozen=True)
class ScheduleShape:
    """The closed form's view of one schedule: its family, size and per-rank warm-up depth."""

    family: PipelineFamily
    p: int
    m: int
    v: int
    in_flight: tuple[int, ...]
    """Per rank: micro-batches it holds at most (:func:`~simulator.schedules.max_in_flight`); for
    the 1F1B family, the forwards it runs before its first backward (d_r)."""
    schedules: int = 1
    """Runs of this schedule chained per optimizer step (:func:`~simulator.schedules.chained`); ``m`` is one run's
    micro-batches. The closed form charges ``schedules`` pipelines back to back."""


def _all_forwards_first(r: int, m: int) -> tuple[Action, ...]:
    return tuple([Action(r, ActionKind.F, j) for j in range(m)] + [Action(r, ActionKind.B, j) for j in range(m)])


def _family(schedule: PipelineSchedule) -> PipelineFamily | None:
    p, m, v, ranks = schedule.p, schedule.m, schedule.v, schedule.ranks
    if v == 1 and all(acts == _all_forwards_first(r, m) for r, acts in enumerate(ranks)):
        return PipelineFamily.ALL_FORWARDS_FIRST
    if v == 1 and ranks == one_f_one_b(p, m).ranks:
        return PipelineFamily.ONE_F_ONE_B
    if v > 1 and m % p == 0 and ranks == interleaved_1f1b(p, m, v).ranks:
        return PipelineFamily.INTERLEAVED
    return None


def schedule_shape(schedule: PipelineSchedule) -> ScheduleShape:
    """Read ``schedule``'s family and warm-up depths from its action lists (module docstring)."""
    if len(schedule.ranks) != schedule.p:
        raise SpecError("schedule", f"has {len(schedule.ranks)} rank lists for pp={schedule.p}")
    k = schedule.schedules
    if k > 1:  # one run's lists, if the whole is that run chained k times
        one = PipelineSchedule(tuple(acts[:len(acts) // k] for acts in schedule.ranks), schedule.p, schedule.m // k,
                               schedule.v, schedule.kind)
        if chained(one, k).ranks == schedule.ranks:
            return replace(schedule_shape(one), schedules=k)
    in_flight = tuple(max_in_flight(schedule, r) for r in range(schedule.p))
    family = _family(schedule)
    if family is None:
        raise SpecError("schedule", "the analytical engine has closed forms for the GPipe, 1F1B and "
                        "interleaved 1F1B action lists; this schedule is none of them: "
                        "simulate it with the discrete-event engine")
    return ScheduleShape(family=family, p=schedule.p, m=schedule.m, v=schedule.v, in_flight=in_flight)


def _positive_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def builtin_shape(kind: ScheduleKind, p: int, m: int, v: int, schedules: int = 1) -> ScheduleShape:
    """What :func:`schedule_shape` reads from ``make_schedule(kind, p, m, v)``, from the generators'
    formulas (:mod:`simulator.schedules`) without building the action lists:

    - GPipe: all forwards first; every rank holds all m.
    - 1F1B (and interleaved with v = 1, the same lists): rank r runs w_r = min(p − r − 1, m) warm-up
      forwards, then one forward one backward, so it holds min(w_r + 1, m) = min(p − r, m). With
      m = 1 every rank runs F0 B0: the all-forwards-first family (checked first by :func:`_family`).
    - Interleaved, v > 1: w_r = min(2·(p − r − 1) + (v − 1)·p, m·v) warm-up forwards of m·v, so rank r
      holds min(2·(p − r − 1) + (v − 1)·p + 1, m·v).

    Inputs the generators refuse are passed to them, so the error is theirs. ``schedules`` > 1: that many runs of
    m / schedules micro-batches chained (:func:`~simulator.schedules.chained`)."""
    if schedules > 1:
        return replace(builtin_shape(kind, p, m // schedules, v), schedules=schedules)
    valid = _positive_int(p) and _positive_int(m) and micro_batches_ok(m) and isinstance(kind, ScheduleKind)
    if valid and kind is ScheduleKind.INTERLEAVED:
        valid = _positive_int(v) and (v == 1 or p > 1 and interleaved_ok(m, p))
    if not valid:
        return schedule_shape(make_schedule(kind, p, m, v))
    if kind is ScheduleKind.INTERLEAVED and v > 1:
        total = m * v
        return ScheduleShape(PipelineFamily.INTERLEAVED, p, m, v,
                             tuple(min(2 * (p - r - 1) + (v - 1) * p + 1, total) for r in range(p)))
    if kind is ScheduleKind.GPIPE or m == 1:
        return ScheduleShape(PipelineFamily.ALL_FORWARDS_FIRST, p, m, 1, (m,) * p)
    return ScheduleShape(PipelineFamily.ONE_F_ONE_B, p, m, 1, tuple(min(p - r, m) for r in range(p)))


def shape_of(cache, kind: ScheduleKind, p: int, m: int, v: int, schedules: int = 1) -> ScheduleShape:
    """The shape of the built-in ``kind``'s schedule (:func:`builtin_shape`), kept in ``cache`` (a
    :class:`~simulator.compile.CostCache`) per (kind, p, m, v, schedules)."""
    return cache.memo(("schedule_shape", kind, p, m, v, schedules), lambda: builtin_shape(kind, p, m, v, schedules))
