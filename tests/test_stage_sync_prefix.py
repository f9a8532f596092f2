"""A stage's bucket answer (:func:`simulator.analytical_sync.stage_sync`) reads the stretch's non-zero prefix from the
kept lists (:func:`stretch_prefix`) and adds only its buckets' excess: equal, to the bit, to the former reading (the
stretch of every bucket from the calls, summed, and every bucket's share of the excess added), over generated
buckets (kinds, transports, ready fractions, backwards short and long enough that the stretch outlasts the buckets)."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from test_analytical_shared import _TRANSPORTS, _calls, plain_sync_stretch

from simulator.analytical_formula import sync_exposure
from simulator.analytical_sync import stage_sync, sync_arrays
from simulator.work import CommKind

_KINDS = (CommKind.DP, CommKind.ZERO, CommKind.OFFLOAD)


def former_stage_sync(st_, b_last, sm_fraction):
    times, codes, _, fractions = sync_arrays(st_, {})[:4]
    tail, exposed = sync_exposure(np.array(b_last), times, fractions, codes)
    stretch = plain_sync_stretch(b_last, st_.grad_sync, st_.grad_ready_fraction, sm_fraction)
    if stretch.sum() > tail:
        excess = (stretch.sum() - tail) / stretch.sum()
        for j, s in enumerate(stretch):
            exposed[codes[j]] += s * excess
        tail = stretch.sum()
    return tail, exposed


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.sampled_from(_TRANSPORTS), st.integers(1, 10 ** 9)), max_size=60),
       st.lists(st.sampled_from(_KINDS), min_size=60, max_size=60), st.floats(0.0, 50.0),
       st.sampled_from([0.0, 0.1, 0.25, 1.0]), st.booleans())
def test_stage_sync_equals_the_former_reading(items, kinds, b_last, sm_fraction, overlap):
    calls, fractions = _calls(items)
    calls = tuple(c.__class__(**{**c.__dict__, "kind": k}) for c, k in zip(calls, kinds))
    if not overlap:
        fractions = (1.0,) * len(calls)
    stage = SimpleNamespace(grad_sync=calls, grad_ready_fraction=fractions)
    tail, exposed = stage_sync(stage, b_last, sm_fraction, {}, {})
    want_tail, want_exposed = former_stage_sync(stage, b_last, sm_fraction)
    assert np.float64(tail).tobytes() == np.float64(want_tail).tobytes()
    assert exposed.tobytes() == want_exposed.tobytes()


def test_stretch_outlasting_the_buckets():
    """Five collective buckets of 1 s ready 8, 6, 4, 2 and 0.5 s before the end of a 10 s backward, all of their SMs
    taken (f = 1): the stretch (1 + 1 + 1 + 1 + 0.5 s) outlasts the buckets' 0.5 s tail, and the excess is shared by
    every bucket of the prefix, the last (the one crossing the end) included."""
    from simulator.collectives.base import Op
    from simulator.work import CollectiveAlgorithm, CommCall, Transport

    calls = tuple(CommCall(kind=CommKind.DP, op=Op.ALL_REDUCE, group=(0, 1), nbytes=1, transport=Transport.COLLECTIVE,
                           time_s=1.0, algorithm=CollectiveAlgorithm.RING) for _ in range(6))
    fractions = (0.2, 0.4, 0.6, 0.8, 0.95, 1.0)  # the sixth starts after the backward: no stretch
    stage = SimpleNamespace(grad_sync=calls, grad_ready_fraction=fractions)
    tail, exposed = stage_sync(stage, 10.0, 1.0, {}, {})
    want_tail, want_exposed = former_stage_sync(stage, 10.0, 1.0)
    assert tail == want_tail == 4.5 and exposed.tobytes() == want_exposed.tobytes()


_CODES = st.integers(0, 3)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf − inf in both: NaN either way
@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.floats(0.0, 3.0), st.sampled_from([0.0, np.inf])), st.floats(0.0, 1.0), _CODES),
                max_size=50),
       st.lists(st.one_of(st.floats(0.0, 60.0), st.sampled_from([0.0, np.inf, np.nan])), min_size=1, max_size=4))
def test_exposure_equals_sync_exposure(items, backwards):
    """:class:`Exposure` of one tuple under several backwards against ``sync_exposure``, to the bit: one category or
    several, empty tuples, infinite seconds and backwards (every category then summed as the formula sums it)."""
    from simulator.analytical_sync import Exposure

    d = np.array([x[0] for x in items], dtype=float)
    f = np.sort(np.array([x[1] for x in items], dtype=float))
    k = np.array([x[2] for x in items], dtype=int)
    exposure = Exposure(d, f, k)
    for b_last in backwards:
        tail, kinds = exposure.at(b_last)
        want_tail, want_kinds = sync_exposure(np.array(b_last), d, f, k)
        assert np.asarray(tail).tobytes() == np.asarray(want_tail).tobytes()
        assert kinds.tobytes() == want_kinds.tobytes() and kinds.shape == want_kinds.shape


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.sampled_from(_TRANSPORTS), st.integers(1, 10 ** 9)), min_size=1,
                max_size=80), st.floats(0.0, 50.0), st.sampled_from([0.1, 0.25, 1.0]), st.floats(0.0, 1.0))
def test_stretch_within_bounds_the_stretch(items, b_last, sm_fraction, scale):
    """Where :func:`stretch_within` says the stretch is at most ``tail``, it is (the lemma ``stage_sync`` skips by),
    for tails from 0 to the bound's own value: the bound is never below the stretch it stands for."""
    from simulator.analytical_sync import stretch_within, sync_stretch
    from simulator.work import Transport

    calls, fractions = _calls(items)
    collective_s = float(sum(c.time_s for c in calls if c.transport is Transport.COLLECTIVE))
    total = sync_stretch(b_last, calls, fractions, sm_fraction).sum()
    tail = scale * 1.01 * sm_fraction * (min(b_last, collective_s) + 1e-6 * (b_last + collective_s))
    if stretch_within(b_last, sm_fraction, collective_s, tail):
        assert total <= tail
    assert not stretch_within(b_last, sm_fraction, None, tail) and not stretch_within(-1.0, sm_fraction, 1.0, 1e9)
