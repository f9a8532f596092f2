"""Tensor shapes read once (simulator/memory/partition.py ``ShapeCounts``): every function that reads a stage's shapes
gives the same answer from its :func:`shape_counts` as from the named shapes, under every partitioning, framework,
ZeRO stage and dp (cold21, docs/planner.md); a stage's memory report is unchanged (the memory tests' figures)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from simulator.memory.partition import ShapeCounts, dim0_real_numels, partition_numels, shape_counts
from simulator.memory.states import model_state_bytes, step_tensors
from simulator.strategy.framework import Framework, Partitioning
from simulator.strategy.kinds import ZeroStage
from simulator.workload.kinds import DtypePolicy

_SHAPES = st.lists(st.tuples(st.sampled_from(["layers.0.attn.qkv.weight", "norm_f.weight", "embed.tok.weight", "w"]),
                             st.lists(st.integers(1, 5000), min_size=0, max_size=3).map(tuple)),
                   min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(_SHAPES, st.integers(1, 9), st.sampled_from(tuple(Partitioning)), st.sampled_from(tuple(Framework)),
       st.sampled_from(tuple(ZeroStage)), st.sampled_from((DtypePolicy.BF16_MIXED, DtypePolicy.FP32)))
def test_counts_read_once_answer_as_the_shapes(shapes, dp, partitioning, framework, zero, dtype):
    counts = shape_counts(shapes)
    assert counts == ShapeCounts([tuple(d) for _, d in shapes], [_numel(d) for _, d in shapes])
    assert shape_counts(counts) is counts
    bare = [d for _, d in shapes]
    assert shape_counts(bare) == counts
    assert partition_numels(counts, dp, partitioning) == partition_numels(shapes, dp, partitioning)
    assert dim0_real_numels(counts, dp) == dim0_real_numels(shapes, dp)
    assert step_tensors(counts, dp, zero, framework) == step_tensors(shapes, dp, zero, framework)
    try:
        expected = model_state_bytes(shapes, dp=dp, zero=zero, dtype=dtype, partitioning=partitioning,
                                     framework=framework)
    except Exception as err:  # a combination the framework rules refuse: the same refusal from the counts
        try:
            model_state_bytes(counts, dp=dp, zero=zero, dtype=dtype, partitioning=partitioning, framework=framework)
        except type(err) as again:
            assert str(again) == str(err)
            return
        raise AssertionError("the counts were accepted where the shapes were refused")
    assert model_state_bytes(counts, dp=dp, zero=zero, dtype=dtype, partitioning=partitioning,
                             framework=framework) == expected


def _numel(shape) -> int:
    out = 1
    for n in shape:
        out *= n
    return out
