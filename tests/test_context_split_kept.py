"""simulator.workload.context.context_split: one ContextSplit object per distinct value, equal to a new one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from simulator.strategy import Strategy
from simulator.workload.context import ContextKind, ContextSplit, context_split


@given(degree=st.integers(1, 64), kind=st.sampled_from(ContextKind), balanced=st.booleans())
def test_kept_split_equals_a_new_one(degree, kind, balanced):
    kept = context_split(degree, kind, balanced)
    assert kept == ContextSplit(degree, kind, balanced) and vars(kept) == vars(ContextSplit(degree, kind, balanced))
    assert context_split(degree, kind, balanced) is kept


def test_values_that_compare_equal_keep_their_types():
    assert type(context_split(1, ContextKind.RING, True).balanced) is bool
    assert type(context_split(1, ContextKind.RING, 1).balanced) is int  # not the bool's object
    assert context_split(2, ContextKind.RING, True) != context_split(2, ContextKind.ALL_TO_ALL, True)


def test_strategy_context_is_the_kept_split():
    a = Strategy(global_batch=8, micro_batch=1, dp=8)
    assert a.context is Strategy(global_batch=16, micro_batch=2, dp=8).context == ContextSplit()
