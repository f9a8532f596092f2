"""The shared value checks: one wording, bool is not a count, NaN is not a number that passes."""

import math

import pytest

from simulator.checks import non_negative_number, positive_int, positive_number
from simulator.errors import SpecError


@pytest.mark.parametrize("value", [0, -1, 1.0, True, None, "2"])
def test_positive_int_rejects(value):
    with pytest.raises(SpecError) as err:
        positive_int("tp", value)
    assert str(err.value) == f"tp: must be a positive integer, got {value!r}"


@pytest.mark.parametrize("check, value", [(positive_number, 0), (positive_number, -0.5), (positive_number, math.nan),
                                          (positive_number, True), (non_negative_number, -1e-9),
                                          (non_negative_number, math.nan), (non_negative_number, False),
                                          (non_negative_number, "0"), (positive_number, math.inf),
                                          (non_negative_number, math.inf), (non_negative_number, -math.inf)])
def test_number_checks_reject(check, value):
    """Infinity too: an infinite fusion_cycle_s in a plan file was accepted and overflowed later (review)."""
    with pytest.raises(SpecError, match="^x: must be a (positive|non-negative) number, got "):
        check("x", value)


def test_valid_values_pass_through_unchanged():
    assert positive_int("tp", 8) == 8
    assert positive_number("bw_GBps", 0.5) == 0.5 and positive_number("n", 3) == 3
    assert non_negative_number("latency_us", 0) == 0 and non_negative_number("x", 2.5) == 2.5


def test_enum_member_reads_values_names_and_spellings():
    """The one rule every enum read from text follows: member, value or name, after the field's spellings."""
    from simulator.checks import enum_member
    from simulator.collectives.base import Op
    from simulator.schedules import ScheduleKind
    from simulator.strategy import AllReduceAlgorithm, PlacementOrder

    assert enum_member(ScheduleKind, "1F1B", "schedule") is ScheduleKind.ONE_F_ONE_B
    assert enum_member(ScheduleKind, "one_f_one_b", "schedule") is ScheduleKind.ONE_F_ONE_B
    assert Op.parse("all_reduce") is Op.parse("ALL-REDUCE") is Op.ALL_REDUCE
    assert AllReduceAlgorithm.parse("recursive-doubling") is AllReduceAlgorithm.RECURSIVE_DOUBLING
    assert PlacementOrder.parse("tp,dp,pp") is PlacementOrder.parse("TP_DP_PP") is PlacementOrder.TP_DP_PP
    with pytest.raises(SpecError, match=r"^schedule: unknown schedule 'zb'; known: gpipe, 1f1b, interleaved$"):
        enum_member(ScheduleKind, "zb", "schedule", "schedule")
