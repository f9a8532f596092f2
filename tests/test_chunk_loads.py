"""A dense transformer chunk's load built from its one-block stand-in's units (:mod:`simulator.compile.chunk_loads`)
equals the workload's own load of the chunk, field by field and unit by unit, over generated chunks and compute
options (recompute kinds with selective per-op, sequence parallelism, fusion, FP8 recipes, autocast,
gradient-accumulation adds, tied and untied embeddings); a MoE model and a chunk without blocks take the
workload's own path."""

from dataclasses import fields, replace

from hypothesis import given, settings, strategies as st

from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.compile.chunk_loads import chunk_load, shares_units
from simulator.workload import ChunkSlice, ComputeOptions, Recompute, get_preset
from simulator.attention_efficiency import AttentionBackend
from simulator.workload.chunks import EDGE_OPTIONS
from simulator.workload.fp8 import Fp8Recipe
from simulator.workload.grad_accum import GradAdd
from simulator.workload.kinds import KernelFusion, LossImpl

MODELS = {name: get_preset(name).with_seq(512) for name in ("gpt3-125m", "llama2-7b")}
CLUSTER = load_preset("dgx-h100", 1)


@st.composite
def _case(draw):
    name = draw(st.sampled_from(sorted(MODELS)))
    spec = MODELS[name]
    count = draw(st.integers(1, 6))
    index = draw(st.integers(0, count - 1))
    layers = draw(st.integers(1, spec.layers))
    start = draw(st.integers(0, spec.layers - layers))
    tp = draw(st.sampled_from((1, 2, 4)))
    options = ComputeOptions(
        micro_batch=draw(st.integers(1, 4)), tp=tp, recompute=draw(st.sampled_from(tuple(Recompute))),
        sequence_parallel=tp > 1 and draw(st.booleans()), flash_attention=draw(st.booleans()),
        fusion=draw(st.sampled_from(tuple(KernelFusion))), fp8=draw(st.sampled_from((None, *Fp8Recipe))),
        fp8_weight_shards=draw(st.sampled_from((1, 8))), vocab_multiple=draw(st.sampled_from((1, 128))),
        loss=draw(st.sampled_from(tuple(LossImpl))), autocast=draw(st.booleans()),
        grad_add=draw(st.sampled_from((None, GradAdd(4, 2), GradAdd(2, 2)))))
    return name, ChunkSlice(index=index, count=count, start=start, layers=layers), options


@settings(max_examples=60, deadline=None)
@given(case=_case(), other_layers=st.integers(1, 12))
def test_the_shared_units_give_the_workloads_own_load(case, other_layers):
    """Asked after the same chunk under every option but tp, ep, micro-batch and context changed, chunks of another
    layer count, another micro-batch and another place in the model (so its units and fields come from the cache,
    among others'), the load is the workload's own."""
    name, chunk, options = case
    spec = MODELS[name]
    cache = CostCache(CLUSTER)
    assert shares_units(spec, chunk)
    chunk_load(cache, spec, chunk, replace(options, micro_batch=options.micro_batch + 1))
    chunk_load(cache, spec, chunk, _others_changed(options))  # the fields' key must hold what they read
    chunk_load(cache, spec, replace(chunk, layers=min(other_layers, spec.layers)), options)
    chunk_load(cache, spec, replace(chunk, index=(chunk.index + 1) % chunk.count), options)
    assert chunk_load(cache, spec, chunk, options) == spec.chunk_load(chunk, options)


def _others_changed(options: ComputeOptions) -> ComputeOptions:
    """``options`` with every field the load's fields do not read (``transformer_fields_options``) changed."""
    return replace(options, recompute=next(r for r in Recompute if r is not options.recompute),
                   sequence_parallel=not options.sequence_parallel, flash_attention=not options.flash_attention,
                   fusion=next(f for f in KernelFusion if f is not options.fusion),
                   fp8=None if options.fp8 is not None else Fp8Recipe.TE, fp8_weight_shards=9 - options.fp8_weight_shards,
                   vocab_multiple=129 - options.vocab_multiple, loss=next(x for x in LossImpl if x is not options.loss),
                   autocast=not options.autocast, grad_add=None if options.grad_add is not None else GradAdd(4, 2))


def test_moe_and_empty_chunks_take_the_workloads_own_path():
    assert not shares_units(MODELS["gpt3-125m"], ChunkSlice(index=0, count=2, start=0, layers=0))
    assert not shares_units(get_preset("mixtral-8x7b"), ChunkSlice(index=0, count=2, start=0, layers=4))


def test_chunks_at_every_place_share_one_block_unit():
    """The block's unit is built once per options, whatever the chunk's place in the model or its layer count (what
    makes a search's chunks cheap; fails if each place builds its own)."""
    spec, options = MODELS["gpt3-125m"], ComputeOptions(micro_batch=1, tp=2)
    cache = CostCache(CLUSTER)
    places = [ChunkSlice(index=i, count=n, start=0, layers=layers)
              for n in (1, 2, 4) for i in range(n) for layers in (1, 3)]
    blocks = {id(chunk_load(cache, spec, chunk, options).units[0][1]) for chunk in places}
    assert len(blocks) == 1


_BLOCK_ONLY = ("recompute", "ep", "routing_skew", "fp8", "fp8_weight_shards", "fp8_transpose", "attention_backend")
"""The fields of ComputeOptions outside ``EDGE_OPTIONS``, each changed by :func:`_block_only_changed`."""


def _block_only_changed(options: ComputeOptions) -> ComputeOptions:
    return replace(options, recompute=next(r for r in Recompute if r is not options.recompute), ep=options.ep + 1,
                   routing_skew=options.routing_skew + 0.5,
                   fp8=None if options.fp8 is not None else Fp8Recipe.TE,
                   fp8_weight_shards=9 - options.fp8_weight_shards, fp8_transpose=not options.fp8_transpose,
                   attention_backend=next(b for b in AttentionBackend if b is not options.attention_backend))


def test_every_option_is_an_edge_option_or_changed_below():
    """A new ComputeOptions field must be classified: read by the edges (EDGE_OPTIONS, in their memo key) or changed by
    the property below (fails until it is)."""
    assert set(EDGE_OPTIONS) | set(_BLOCK_ONLY) == {f.name for f in fields(ComputeOptions)}
    assert not set(EDGE_OPTIONS) & set(_BLOCK_ONLY)


@settings(max_examples=40, deadline=None)
@given(case=_case())
def test_edges_shared_across_the_options_they_do_not_read_are_the_chunks_own(case):
    """Asked first under every option outside EDGE_OPTIONS changed (so the edges come from that entry), the load is
    the workload's own: fails if the edges read a field their key leaves out."""
    name, chunk, options = case
    spec = MODELS[name]
    cache = CostCache(CLUSTER)
    chunk_load(cache, spec, chunk, _block_only_changed(options))
    assert chunk_load(cache, spec, chunk, options) == spec.chunk_load(chunk, options)
