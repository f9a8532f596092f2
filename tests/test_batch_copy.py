"""``with_global_batch`` (:mod:`simulator.strategy.batch_copy`) is ``dataclasses.replace(s, global_batch=g)``: equal
strategies with the same field objects for generated strategies and batches, the same one-line error for a bad
batch; and the reason it may skip the checks holds (no check of combinations reads the global batch)."""

import inspect
from dataclasses import fields, replace

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from test_shared_stages import _strategies

from simulator.errors import SpecError
from simulator.strategy import Strategy, combinations
from simulator.strategy.batch_copy import with_global_batch


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(fields_=_strategies(), batch=st.integers(1, 10_000))
def test_equals_replace(fields_, batch):
    try:
        s = Strategy(**fields_)
    except (SpecError, ValueError):
        assume(False)
    got, want = with_global_batch(s, batch), replace(s, global_batch=batch)
    assert type(got) is Strategy and got == want and hash(got) == hash(want) and got.global_batch == batch
    assert all(getattr(got, f.name) is getattr(want, f.name) for f in fields(Strategy) if f.name != "global_batch")
    assert s.global_batch == fields_["global_batch"]  # the original is untouched


@pytest.mark.parametrize("batch", [0, -3, 2.0, True, "8", None])
def test_bad_batch_is_replaces_error(batch):
    s = Strategy(global_batch=8)
    with pytest.raises(SpecError) as want:
        replace(s, global_batch=batch)
    with pytest.raises(SpecError) as got:
        with_global_batch(s, batch)
    assert str(got.value) == str(want.value) and got.value.field == "global_batch"


def test_no_combination_reads_the_global_batch():
    assert "global_batch" not in inspect.getsource(combinations)
