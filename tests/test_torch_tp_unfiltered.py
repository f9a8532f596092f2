"""torch tp's chunk calls (:func:`simulator.compile.torch_tp.calls`) skip the filter of absent calls when no call is
absent: the same calls in the same order as the filtered tuples, with and without absent ones (a message of 0 bytes,
a group of one), under SP or not, full recompute or not, first / last chunks, 0 to 96 blocks."""

from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import comm_part, torch_tp
from simulator.compile.costs import CostCache
from simulator.work import CommKind

CACHE = CostCache(load_preset("dgx-a100", 2))


def filtered(group, nbytes, logits_bytes, *, sp, layers, first, last, full_recompute, concurrent):
    """The calls as the formula lists them, every absent one dropped one by one."""
    def one(op, size):
        return comm_part.call(CACHE, CommKind.TP, op, group, size, concurrent)
    ar, ag, logits, rs = (one(Op.ALL_REDUCE, nbytes), one(Op.ALL_GATHER, nbytes), one(Op.ALL_GATHER, logits_bytes),
                          one(Op.REDUCE_SCATTER, nbytes))
    block, edge = ((ag, rs, ag, rs), (ag,)) if sp else ((ar, ar), ())
    fwd = (ar,) * first + block * layers + edge + (logits,) * last
    bwd = (ar,) * last + ((block if full_recompute else ()) + block) * layers + edge
    return tuple(c for c in fwd if c is not None), tuple(c for c in bwd if c is not None)


@settings(max_examples=200, deadline=None)
@given(group=st.sampled_from([(0,), (0, 1), (0, 1, 2, 3)]), nbytes=st.sampled_from([0, 1, 4096, 10 ** 8]),
       logits_bytes=st.sampled_from([0, 4096, 10 ** 9]), sp=st.booleans(), layers=st.integers(0, 96),
       first=st.booleans(), last=st.booleans(), full_recompute=st.booleans())
def test_calls_equal_the_filtered_calls(group, nbytes, logits_bytes, sp, layers, first, last, full_recompute):
    kw = dict(sp=sp, layers=layers, first=first, last=last, full_recompute=full_recompute, concurrent=2)
    got = torch_tp.calls(CACHE, group, nbytes, logits_bytes, **kw)
    want = filtered(group, nbytes, logits_bytes, **kw)
    assert got == want and all(None not in side for side in got)
