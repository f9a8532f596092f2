"""A chunk's blocking-call sums read at C speed (:func:`simulator.analytical._chunk_numbers`: ``map`` over the
calls, and one sum of them all when no call is an expert all-to-all or an activation copy) are the
generator sums they replace, bit for bit: the same left-to-right float additions from 0. Hypothesis draws
tensor-parallel, expert and offload calls, repeated objects (a compiled chunk repeats one call per layer),
ZeRO gathers and prefetch depths; the reference is the function as it stood (commit 7d63521)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.analytical import _chunk_numbers, exposed_gathers
from simulator.collectives.base import Op
from simulator.work import ChunkWork, CollectiveAlgorithm, CommCall, CommKind, Transport


def _reference(ch: ChunkWork, sm_fraction: float = 0.0):
    """``_chunk_numbers`` before (7d63521), verbatim."""
    tp_f, tp_b = sum(c.time_s for c in ch.tp_fwd), sum(c.time_s for c in ch.tp_bwd)
    blocking = (*ch.tp_fwd, *ch.tp_bwd)
    ep = sum(c.time_s for c in blocking if c.kind is CommKind.EP)
    copies = sum(c.time_s for c in blocking if c.kind is CommKind.OFFLOAD)
    tp = sum(c.time_s for c in blocking if c.kind is not CommKind.EP and c.kind is not CommKind.OFFLOAD)
    zf = exposed_gathers(ch.zero_fwd, ch.fwd_s + tp_f, sm_fraction, ch.zero_prefetch_calls)
    zb = exposed_gathers(ch.zero_bwd, ch.recompute_s + ch.bwd_s + tp_b, sm_fraction, ch.zero_prefetch_calls)
    offload = bool(ch.zero_fwd) and ch.zero_fwd[0].kind is CommKind.OFFLOAD
    parts = [ch.fwd_s, ch.bwd_s, ch.recompute_s, tp, 0.0 if offload else zf + zb,
             (zf + zb if offload else 0.0) + copies, ep]
    return ch.fwd_s + tp_f + zf, ch.recompute_s + ch.bwd_s + tp_b + zb, parts


seconds = st.floats(1e-7, 3.0, allow_nan=False)


@st.composite
def calls(draw, kinds):
    """A call sequence drawn from a few call objects, each repeated (as a chunk repeats its layers' calls)."""
    pool = []
    for _ in range(draw(st.integers(1, 4))):
        transport = draw(st.sampled_from(list(Transport)))
        pool.append(CommCall(kind=draw(st.sampled_from(kinds)), op=Op.ALL_REDUCE, group=(0, 1), nbytes=1 << 20,
                             transport=transport, time_s=draw(seconds),
                             algorithm=CollectiveAlgorithm.RING if transport is Transport.COLLECTIVE else None))
    return tuple(draw(st.lists(st.sampled_from(pool), max_size=60)))


@st.composite
def chunks(draw):
    blocking = draw(st.sampled_from([[CommKind.TP], [CommKind.TP, CommKind.EP], [CommKind.TP, CommKind.OFFLOAD],
                                     [CommKind.EP, CommKind.OFFLOAD, CommKind.TP]]))
    gathers = draw(st.sampled_from([[CommKind.ZERO], [CommKind.OFFLOAD]]))
    return ChunkWork(chunk=0, layers=4, fwd_s=draw(seconds), bwd_s=draw(seconds), recompute_s=draw(seconds),
                     tp_fwd=draw(calls(blocking)), tp_bwd=draw(calls(blocking)), zero_fwd=draw(calls(gathers)),
                     zero_bwd=draw(calls(gathers)), zero_prefetch_calls=draw(st.integers(1, 3)))


@settings(max_examples=400, deadline=None)
@given(chunks(), st.sampled_from([0.0, 0.1, 0.25]))
def test_chunk_numbers_equal_the_generator_sums(ch, sm_fraction):
    assert repr(_chunk_numbers(ch, sm_fraction)) == repr(_reference(ch, sm_fraction))
