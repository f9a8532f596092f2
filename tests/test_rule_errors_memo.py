"""``check_rules`` remembers each rule verdict by the integers the rules read
(:func:`simulator.strategy.rule_errors.first_broken`): the remembered verdict is the one the rules give on
a fresh length-1 array, whatever was asked before (hypothesis, asked in random order, with repeats), and
strategies that differ only in fields no rule reads share it while still raising their own worded error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import SpecError
from simulator.schedules import ScheduleKind
from simulator.strategy import Strategy, ZeroStage
from simulator.strategy.rule_errors import check_rules, first_broken
from simulator.strategy.rules import Candidates, first_violation
from simulator.workload import Recompute

ints = st.sampled_from([1, 2, 3, 4, 6, 8, 16])
scalars = st.tuples(ints, ints, ints, st.sampled_from([1, 2, 3]), ints, st.sampled_from([1, 6, 8, 12, 16, 64, 100]),
                    st.booleans(), st.integers(0, 3), st.booleans(), st.sampled_from([1, 2, 4]),
                    st.sampled_from([1, 2]), st.sampled_from([8, 16, 32, 64]), st.sampled_from([None, 4, 12, 96]))


@settings(max_examples=400, deadline=None)
@given(st.lists(scalars, min_size=1, max_size=12))
def test_remembered_verdict_is_the_rules_verdict(asks):
    for dp, tp, pp, v, mbs, gbs, interleaved, zero, zero_with_pp, ep, cp, gpus, layers in asks + asks[::-1]:
        fresh = first_violation(Candidates.of(dp=dp, tp=tp, pp=pp, v=v, micro_batch=mbs, global_batch=gbs,
                                              interleaved=interleaved, zero=zero, zero_with_pp=zero_with_pp,
                                              ep=ep, cp=cp), gpus, layers)
        assert first_broken(dp, tp, pp, v, mbs, gbs, interleaved, zero, zero_with_pp, ep, cp, gpus, layers) == fresh


def test_strategies_sharing_the_rules_inputs_raise_their_own_errors():
    """Two strategies with the same rule inputs (they differ in recomputation) get the same verdict; each
    error is worded from its own strategy, and a passing one after a failing one still passes."""
    bad = Strategy(global_batch=12, tp=2, pp=2, micro_batch=4, recompute=Recompute.FULL)
    other = Strategy(global_batch=12, tp=2, pp=2, micro_batch=4, recompute=Recompute.NONE)
    for s in (bad, other):
        with pytest.raises(SpecError) as err:
            check_rules(s, 2, 8, 24)  # 12 / 2 = 6 samples per replica: micro-batch 4 does not divide them
        assert err.value.field == "micro_batch"
    check_rules(Strategy(global_batch=12, tp=2, pp=2, micro_batch=3), 2, 8, 24)
    interleaved = Strategy(global_batch=12, tp=2, pp=2, micro_batch=3, schedule=ScheduleKind.INTERLEAVED,
                           virtual_stages=2, zero=ZeroStage.ZERO1)
    with pytest.raises(SpecError) as err:  # m = 2 micro-batches: a multiple of pp, passes; pp·v = 4 > 3 layers
        check_rules(interleaved, 2, 8, 3)
    assert err.value.field == "pp"
