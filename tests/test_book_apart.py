"""A folded run's booking by category apart (simulator/engine/rank_compute.py ``_book_apart``): the accounts it leaves
are those of the item-by-item pass of ``_book_fold``, to the bit and in key order, or it declines and touches
nothing; a whole DES step books the same with and without it."""

import math
from collections import defaultdict
from types import SimpleNamespace

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import simulator.engine.rank_compute as rc
from simulator.cluster.presets import load_preset
from simulator.engine.step import simulate
from simulator.results import Category
from simulator.strategy import Strategy
from simulator.workload.presets import get_preset
from compiled_work import compiled

CATS = [Category.FORWARD, Category.TP, Category.EP, Category.BACKWARD]
seconds = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)


def _booked(apart: bool, first, start_s, steps, played, kinds, seg_s, category, known):
    """The account after ``_book_fold`` of a fold whose items end at ``start_s`` + the running sum of ``steps``."""
    ends, t = [], start_s
    for d in steps:
        t = t + d
        ends.append(t)
    account = defaultdict(float, {c: v for c, v in known})
    rec = SimpleNamespace(trace=False, accounts={"who": account})
    ctx = SimpleNamespace(rec=rec, env=SimpleNamespace(now=ends[-1]),
                          folder=SimpleNamespace(categories=lambda calls: kinds))
    fold = SimpleNamespace(first=first, start_s=start_s, ends=ends)
    with pytest.MonkeyPatch.context() as m:
        if not apart:
            m.setattr(rc, "_book_apart", lambda *a: False)
        rc._book_fold(ctx, "who", 0, None, "", fold, played, list(range(len(kinds))), seg_s, category)
    return [(c, v.hex()) for c, v in account.items()]


@settings(max_examples=200, deadline=None)
@given(first=st.integers(0, 7), start_s=seconds, steps=st.lists(seconds, min_size=1, max_size=40),
       kinds=st.lists(st.sampled_from(CATS[1:3] + [Category.FORWARD]), min_size=24, max_size=24),
       seg_s=st.one_of(st.just(0.0), seconds), category=st.sampled_from([Category.FORWARD, Category.BACKWARD]),
       known=st.lists(st.tuples(st.sampled_from(CATS), seconds), max_size=4), cut=st.integers(0, 40))
def test_the_same_accounts_as_item_by_item(first, start_s, steps, kinds, seg_s, category, known, cut):
    played = min(len(steps), max(cut, 1))  # played < len(steps): the run was cut, the item in progress booked too
    if not all(math.isfinite(x) for x in (start_s, *steps)):
        return
    args = (first, start_s, steps, played, kinds, seg_s, category, dict(known).items())
    assert _booked(True, *args) == _booked(False, *args)


def test_it_declines_untouched_on_a_new_category_or_a_shared_one():
    account = defaultdict(float, {Category.FORWARD: 1.0})
    assert not rc._book_apart(account, 0, 0.0, [1.0, 2.0, 3.0], 3, [Category.TP], 1.0, Category.FORWARD)
    assert dict(account) == {Category.FORWARD: 1.0}  # TP is new: its key's place is the item pass's to decide
    account[Category.TP] = 0.5
    assert rc._book_apart(account, 0, 0.0, [1.0, 2.0, 3.0], 3, [Category.TP], 1.0, Category.FORWARD)
    assert dict(account) == {Category.FORWARD: 3.0, Category.TP: 1.5}
    shared = defaultdict(float, {Category.FORWARD: 1.0})
    assert not rc._book_apart(shared, 0, 0.0, [1.0, 2.0, 3.0], 3, [Category.FORWARD], 1.0, Category.FORWARD)
    assert dict(shared) == {Category.FORWARD: 1.0}


def test_a_step_books_the_same_with_and_without_it(monkeypatch):
    cluster = load_preset("dgx-h100").with_nodes(2)
    work = compiled(cluster, Strategy(global_batch=16, tp=4, pp=2, micro_batch=1, sequence_parallel=True),
                    get_preset("gpt3-1.3b"))
    calls = []
    monkeypatch.setattr(rc, "_book_apart", lambda *a, f=rc._book_apart: calls.append(f(*a)) or calls[-1])
    apart = simulate(work, cluster, trace=False)
    assert calls.count(True) > 10  # the path is taken
    monkeypatch.setattr(rc, "_book_apart", lambda *a: False)
    item_by_item = simulate(work, cluster, trace=False)
    assert apart.step_time_s == item_by_item.step_time_s
    assert {c: v.hex() for c, v in apart.breakdown.items()} == {c: v.hex() for c, v in item_by_item.breakdown.items()}
    pd.testing.assert_frame_equal(apart.per_rank, item_by_item.per_rank, check_exact=True)
