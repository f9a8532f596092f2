"""The workload protocol (simulator.workload.protocol): every kind implements it, consumers call it,
and a new kind needs nothing else to be compiled into a step."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.compile.compute_part import step_flops
from simulator.errors import SpecError
from simulator.strategy import AttentionKind, Strategy
from simulator.workload import (ChunkLoad, ChunkSlice, ComputeOptions, DtypePolicy, LayerListWorkload, LayerSpec,
                                ParamCountModel, Recompute, WorkUnit, Workload, get_preset, model_flops_per_token,
                                train_flops_per_token)
from simulator.workload.ops import Kernel

TINY = LayerListWorkload(name="tiny", layers=(
    LayerSpec(name="a", params=100, fwd_flops=1000.0, activation_bytes=40, output_bytes=8),
    LayerSpec(name="b", params=50, fwd_flops=0.0, activation_bytes=20, output_bytes=4),
))


@pytest.mark.parametrize("workload", [get_preset("gpt3-125m"), TINY, ParamCountModel(params=7_000_000_000)],
                         ids=["transformer", "layer-list", "param-count"])
def test_every_kind_satisfies_the_protocol(workload):
    assert isinstance(workload, Workload)


def test_not_a_workload():
    assert not isinstance(object(), Workload)
    with pytest.raises(SpecError, match="a step time needs a transformer"):
        compile_step(load_preset("dgx-a100"), object(), Strategy(global_batch=8))


def test_transformer_answers():
    gpt = get_preset("gpt3-125m")  # 12 layers, 12 heads, s 2048
    assert (gpt.layer_count, gpt.seq_len, gpt.has_compute, gpt.has_activation_shapes) == (12, 2048, True, True)
    gpt.check_tp(4)  # 12 heads split 4 ways
    with pytest.raises(SpecError, match="5 does not divide 12 attention heads; use 1, 2, 3, 4, 6 or 12"):
        gpt.check_tp(5)
    assert gpt.with_seq(1024).seq_len == 1024
    # selective recomputation with flash attention recomputes nothing: hardware FLOPs = model FLOPs
    model, hw = gpt.step_flops(10, Recompute.SELECTIVE, flash_attention=True)
    assert model == hw == model_flops_per_token(gpt, 2048) * 10
    assert gpt.step_flops(10, Recompute.SELECTIVE, flash_attention=False)[1] == \
        train_flops_per_token(gpt, Recompute.SELECTIVE, 2048) * 10
    assert gpt.summary()["shape"]["layers"] == 12 and gpt.describe().startswith("gpt3-125m")


def test_transformer_chunk_load_holds_its_edges():
    gpt = get_preset("gpt3-125m")  # h 768, V 50257, tied embeddings, learned positions 2048
    options = ComputeOptions(micro_batch=2, tp=2)
    first = gpt.chunk_load(ChunkSlice(index=0, count=2, start=0, layers=6), options)
    last = gpt.chunk_load(ChunkSlice(index=1, count=2, start=6, layers=6), options)
    vh = 50257 * 768
    assert first.blocks == last.blocks == 6 and first.block_params == gpt.layer_params / 2
    assert first.edge_params == vh / 2 + 2048 * 768  # vocabulary-parallel embedding + position table
    assert last.edge_params == 2 * 768 + vh / 2  # final LayerNorm + the tied copy on the last stage
    assert first.boundary_bytes == 2 * 2048 * 768 * 2  # b·s·h bf16
    assert [count for count, _ in first.units] == [6, 1] and [count for count, _ in last.units] == [6, 1]


def test_layer_list_answers():
    assert (TINY.layer_count, TINY.seq_len, TINY.has_compute, TINY.has_activation_shapes) == (2, 1, True, False)
    TINY.check_tp(1)
    with pytest.raises(SpecError, match="no heads to split"):
        TINY.check_tp(2)
    with pytest.raises(SpecError, match="no sequence length"):
        TINY.with_seq(128)
    # per sample 3 × 1000 FLOPs; full recomputation adds one forward: 1000
    assert TINY.step_flops(4, Recompute.FULL, flash_attention=True) == (12000.0, 16000.0)
    assert TINY.step_flops(4, Recompute.SELECTIVE, flash_attention=False) == (12000.0, 12000.0)


def test_layer_list_chunk_load():
    load = TINY.chunk_load(ChunkSlice(index=1, count=2, start=1, layers=1),
                           ComputeOptions(micro_batch=3, recompute=Recompute.FULL))
    (count, unit), = load.units
    # layer b, fp32: forward reads 50·4 B of weights and writes 3·20 B of activations; backward 2×
    assert count == 1 and unit.fwd == ((Kernel(name="b", flops=0.0, bytes=260, gemm=False),),)
    assert unit.bwd == ((Kernel(name="b", flops=0.0, bytes=520, gemm=False),),)
    assert unit.recompute == unit.fwd
    assert (load.blocks, load.block_params, load.edge_params, load.boundary_bytes) == (0, 0.0, 50.0, 12)


def test_param_count_answers_what_it_can():
    m = ParamCountModel(params=1000)
    assert (m.layer_count, m.has_compute, m.has_activation_shapes) == (None, False, False)
    m.check_tp(8)
    assert m.with_seq(4096) is m
    with pytest.raises(SpecError, match="no compute to time"):
        m.step_flops(1, Recompute.NONE, flash_attention=True)
    with pytest.raises(SpecError, match="no compute to time"):
        compile_step(load_preset("dgx-a100"), m, Strategy(global_batch=8))
    assert m.summary() == {"name": "1e+03 params", "params": 1000, "dtype": "bf16"}


@dataclass(frozen=True, kw_only=True)
class StreamWorkload:
    """A kind this repository does not have: a memory-bound model (an embedding-bag, say) that reads
    ``bytes_per_sample`` per sample and cannot be split into layers. It implements the protocol and
    nothing else — no consumer knows its class."""

    name: str
    params: int
    bytes_per_sample: int
    dtype: DtypePolicy = DtypePolicy.FP32
    layer_count = None
    seq_len = 1
    has_compute = True
    has_activation_shapes = False

    def check_tp(self, tp: int) -> None:
        if tp != 1:
            raise SpecError("tp", "a stream workload has nothing to split")

    def check_ep(self, ep: int) -> None:
        if ep != 1:
            raise SpecError("ep", "a stream workload has no experts")

    def with_seq(self, seq_len: int) -> "StreamWorkload":
        return self

    def chunk_load(self, chunk: ChunkSlice, options: ComputeOptions) -> ChunkLoad:
        fwd = ((Kernel(name="read", flops=0.0, bytes=options.micro_batch * self.bytes_per_sample, gemm=False),),)
        bwd = ((Kernel(name="read.bwd", flops=0.0, bytes=2 * options.micro_batch * self.bytes_per_sample,
                       gemm=False),),)
        return ChunkLoad(units=((1, WorkUnit(fwd=fwd, bwd=bwd)),), blocks=0, block_params=0.0,
                         edge_params=float(self.params), boundary_bytes=0)

    def step_flops(self, tokens: int, recompute: Recompute, *, flash_attention: bool) -> tuple[float, float]:
        return 0.0, 0.0

    def summary(self) -> dict:
        return {"name": self.name, "params": self.params}

    def describe(self) -> str:
        return self.name


def test_a_new_kind_only_implements_the_protocol():
    stream = StreamWorkload(name="stream", params=1_000_000, bytes_per_sample=1_610_810_000)
    assert isinstance(stream, Workload)
    cluster = load_preset("dgx-a100")  # 8 GPUs, HBM 2039 GB/s × hbm_efficiency 0.790 = 1610.81 GB/s
    work = compile_step(cluster, stream, Strategy(global_batch=16, micro_batch=2))
    chunk, = work.stages[0].chunks
    # memory-bound roofline: 2 samples × 1.61081 GB / 1610.81 GB/s = 2 ms forward, twice that backward
    assert chunk.fwd_s == pytest.approx(2e-3, rel=1e-12)
    assert chunk.bwd_s == pytest.approx(4e-3, rel=1e-12)
    # its 1e6 fp32 gradients are all-reduced over the 8 data-parallel ranks: 4 MB in all
    assert sum(call.nbytes for call in work.stages[0].grad_sync) == 4_000_000
    assert work.tokens_per_step == 16 and step_flops(stream, 16, Recompute.NONE, AttentionKind.FLASH) == (0.0, 0.0)


def test_divisors_by_pairs_equal_the_definition():
    """divisors pairs d with n/d up to √n (a 1e19-sequence batch hung the error message that lists them)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from simulator.workload.protocol import divisors

    @settings(max_examples=200, deadline=None)
    @given(st.integers(1, 5000), st.none() | st.integers(1, 64))
    def check(n, up_to):
        assert divisors(n, up_to) == [d for d in range(1, n + 1) if n % d == 0 and (up_to is None or d <= up_to)]

    check()
    assert divisors(10**19, up_to=8) == [1, 2, 4, 5, 8]
