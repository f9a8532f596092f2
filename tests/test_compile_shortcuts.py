"""The compiler's shortcuts give what the long way gives: a bucketed sync built from runs of equal
buckets equals one call per bucket; the stages compiled alone (what the closed form's structures read)
equal compile_step's, and their summary equals the step's."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.analytical import summarize, summarize_stages
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import CostCache, compile_stages, compile_step
from simulator.compile.comm_part import MAX_BUCKETS, bucketed, buckets, call
from simulator.errors import SpecError
from simulator.strategy import (AllReduceSync, Offload, Recompute, ScheduleKind, Strategy, ZeroStage,
                                build_layout)
from simulator.work import CommKind
from simulator.workload import get_preset

CLUSTER = load_preset("dgx-a100", 2)
GROUP = tuple(range(0, 16, 2))


@settings(max_examples=60, deadline=None)
@given(total=st.integers(0, 10**9), bucket=st.one_of(st.none(), st.integers(10**5, 4 * 10**8)))
def test_bucketed_is_one_call_per_bucket(total, bucket):
    cache = CostCache(CLUSTER)
    long_way = tuple(c for c in (call(cache, CommKind.DP, Op.ALL_REDUCE, GROUP, size, 2)
                                 for size in buckets(total, bucket)) if c is not None)
    assert bucketed(cache, CommKind.DP, Op.ALL_REDUCE, GROUP, total, bucket, "auto", 2) == long_way
    if bucket is not None and 0 < bucket < total:
        full, rest = divmod(total, bucket)
        assert len(long_way) == full + (rest > 0)


def test_too_many_buckets_is_the_same_error():
    cache = CostCache(CLUSTER)
    with pytest.raises(SpecError) as err:
        bucketed(cache, CommKind.DP, Op.ALL_REDUCE, GROUP, MAX_BUCKETS * 10 + 1, 10, "auto", 1)
    assert err.value.field == "bucket_bytes"


STRATEGIES = [
    Strategy(global_batch=16),
    Strategy(global_batch=16, tp=2, pp=4, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2,
             sequence_parallel=True, recompute=Recompute.FULL),
    Strategy(global_batch=16, tp=2, pp=2, zero=ZeroStage.ZERO1, dp_sync=AllReduceSync(bucket_bytes=4 << 20)),
    Strategy(global_batch=16, zero=ZeroStage.ZERO3, offload=Offload.OPTIMIZER),
]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=range(len(STRATEGIES)))
def test_stages_alone_equal_the_step(strategy):
    workload = get_preset("megatron-1.7b")
    layout = build_layout(strategy, CLUSTER, workload)
    step = compile_step(CLUSTER, workload, strategy, cache=CostCache(CLUSTER), memory=False, layout=layout)
    stages = compile_stages(CostCache(CLUSTER), workload, layout)
    assert stages == step.stages
    alone, whole = summarize_stages(stages, layout.v, step.overlap_sm_fraction), summarize(step)
    for name in ("F", "B", "parts", "cf", "cb", "tail", "sync_exposed", "opt", "after", "data"):
        np.testing.assert_array_equal(getattr(alone, name), getattr(whole, name))


def test_stages_alone_check_the_fetch():
    workload = get_preset("megatron-1.7b")
    layout = build_layout(STRATEGIES[0], CLUSTER, workload)
    with pytest.raises(SpecError) as err:
        compile_stages(CostCache(CLUSTER), workload, layout, fetch="infinity")
    assert err.value.field == "fetch"


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 2 ** 40), max_size=40), overlap=st.booleans())
def test_ready_fractions_are_each_bucket_s_cumulative_byte_fraction(sizes, overlap):
    """Against the plain loop: Python's int / int of the bytes done so far over the total."""
    from simulator.compile.comm_part import ready_fractions
    from simulator.work import CollectiveAlgorithm, CommCall, Transport

    calls = tuple(CommCall(kind=CommKind.DP, op=Op.ALL_REDUCE, group=GROUP, nbytes=n, transport=Transport.COLLECTIVE,
                           algorithm=CollectiveAlgorithm.RING,
                           time_s=1e-3) for n in sizes)
    done, expected = 0, []
    for n in sizes:
        done += n
        expected.append(done / sum(sizes) if overlap else 1.0)
    got = ready_fractions(calls, overlap)
    assert got == tuple(expected) and all(type(f) is float for f in got)


def _dense_models():
    from simulator.workload.presets import get_preset, model_names

    return [m for m in (get_preset(n) for n in model_names()) if m.moe is None]


@st.composite
def _slice(draw, layers):
    from simulator.workload import ChunkSlice

    count = draw(st.integers(1, min(layers, 12)))
    index = draw(st.integers(0, count - 1))
    size = draw(st.integers(1, max(1, layers // count)))
    start = draw(st.integers(0, layers - size))
    return ChunkSlice(index=index, count=count, start=start, layers=size)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_dense_chunk_s_load_is_its_stand_in_s(data):
    """Every dense preset (tied embeddings or not), any slice: the stand-in slice the compute cache keys
    on has the very load of the slice itself; a MoE model keeps its own slice (its blocks differ)."""
    from simulator.compile.compute_part import load_slice
    from simulator.workload import ComputeOptions, Recompute as R

    model = data.draw(st.sampled_from(_dense_models()))
    chunk = data.draw(_slice(model.layers))
    tp = data.draw(st.sampled_from([t for t in (1, 2, 4, 8) if model.heads % t == 0]))
    options = ComputeOptions(micro_batch=data.draw(st.integers(1, 4)), tp=tp, recompute=data.draw(st.sampled_from(R)),
                             sequence_parallel=tp > 1 and data.draw(st.booleans()))
    stand_in = load_slice(model, chunk)
    assert (stand_in.first, stand_in.last, stand_in.layers) == (chunk.first, chunk.last, chunk.layers)
    assert model.chunk_load(stand_in, options) == model.chunk_load(chunk, options)


def test_a_moe_chunk_keeps_its_slice():
    from simulator.compile.compute_part import load_slice
    from simulator.workload import ChunkSlice

    mixtral = get_preset("mixtral-8x7b")
    chunk = ChunkSlice(index=1, count=4, start=8, layers=8)
    assert load_slice(mixtral, chunk) is chunk
