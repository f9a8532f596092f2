"""The built-in schedules' closed-form shapes (:func:`simulator.schedule_shape.builtin_shape`) equal what
:func:`schedule_shape` reads from the built action lists, errors included, over a generated grid."""

import pytest
from hypothesis import given, settings, strategies as st

from simulator.compile import CostCache
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.schedule_shape import PipelineFamily, builtin_shape, schedule_shape, shape_of
from simulator.schedules import MAX_MICRO_BATCHES, ScheduleKind, make_schedule


def _read(kind, p, m, v):
    try:
        return schedule_shape(make_schedule(kind, p, m, v))
    except SpecError as err:
        return (err.field, err.problem)


def _formula(kind, p, m, v):
    try:
        return builtin_shape(kind, p, m, v)
    except SpecError as err:
        return (err.field, err.problem)


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(list(ScheduleKind)), p=st.integers(0, 12), m=st.integers(0, 40), v=st.integers(0, 5))
def test_formula_equals_the_built_schedule(kind, p, m, v):
    assert _formula(kind, p, m, v) == _read(kind, p, m, v)


@pytest.mark.parametrize("kind,p,m,v", [
    (ScheduleKind.ONE_F_ONE_B, 4, 1, 1),      # m = 1: every rank F0 B0, all forwards first
    (ScheduleKind.INTERLEAVED, 4, 1, 1),
    (ScheduleKind.INTERLEAVED, 4, 8, 3),      # warm-up capped by m·v on no rank, by it on none
    (ScheduleKind.INTERLEAVED, 2, 2, 4),      # warm-up 2·(p − r − 1) + (v − 1)·p ≥ m·v on rank 0
    (ScheduleKind.GPIPE, 3, 7, 2),            # GPipe ignores v
    (ScheduleKind.INTERLEAVED, 1, 4, 2),      # refused: interleaving needs pp ≥ 2
    (ScheduleKind.INTERLEAVED, 4, 6, 2),      # refused: m not a multiple of p
    (ScheduleKind.ONE_F_ONE_B, 4, MAX_MICRO_BATCHES + 1, 1),  # refused: past the guard
])
def test_formula_on_the_edges(kind, p, m, v):
    assert _formula(kind, p, m, v) == _read(kind, p, m, v)


def test_family_and_in_flight_by_hand():
    """1F1B p = 4, m = 8: rank r holds p − r = 4, 3, 2, 1. Interleaved p = 2, m = 4, v = 2: rank 0 warms up
    2·1 + 1·2 = 4 forwards and holds 5, rank 1 warms up 2 and holds 3 (of m·v = 8)."""
    one = builtin_shape(ScheduleKind.ONE_F_ONE_B, 4, 8, 1)
    assert (one.family, one.in_flight) == (PipelineFamily.ONE_F_ONE_B, (4, 3, 2, 1))
    inter = builtin_shape(ScheduleKind.INTERLEAVED, 2, 4, 2)
    assert (inter.family, inter.in_flight) == (PipelineFamily.INTERLEAVED, (5, 3))


def test_shape_of_is_independent_of_the_micro_batch_count():
    """A count no schedule could be built for quickly (its lists would hold 2·65,536 actions per rank) is
    answered by the formula: the same shape as a small count's, with every in-flight depth p − r."""
    cache = CostCache(load_cluster("dgx-h100", nodes=1))
    big = shape_of(cache, ScheduleKind.ONE_F_ONE_B, 8, MAX_MICRO_BATCHES, 1)
    assert big.in_flight == tuple(8 - r for r in range(8)) and big.m == MAX_MICRO_BATCHES
