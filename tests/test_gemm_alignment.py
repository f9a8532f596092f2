"""Misaligned GEMMs on Hopper (simulator/gemm_alignment.py) and Megatron's vocabulary padding.

Figures: our H200 measurements of 2026-11-24 (docs/hardware_measured.md): the GPT-3 1.3B logits GEMMs
(vocab 50257, odd) at 90-146 TFLOP/s, the 50257 // 4 = 12564 shapes at 235-274 TFLOP/s."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, strategies as st

from simulator.cluster.io import load_cluster
from simulator.compute import _rates, edge_times
from simulator.gemm_alignment import ALIGNED_BYTES, alignment_bytes, misaligned_cap, padded_vocab
from simulator.gemm_shape import GemmShape
from simulator.strategy.framework import Framework
from simulator.workload import get_preset
from simulator.workload.kinds import DtypePolicy
from simulator.workload.ops import OpKind, gemm


def test_alignment_classes():
    assert alignment_bytes(GemmShape(16384, 50257, 2048), 2) == 2
    assert alignment_bytes(GemmShape(2048, 12564, 12288), 2) == 8
    assert alignment_bytes(GemmShape(2048, 12288 / 5, 128), 2) == 2  # an uneven tp split
    assert alignment_bytes(GemmShape(2048, 6144, 2048), 2) == ALIGNED_BYTES
    assert alignment_bytes(GemmShape(2048, 6148, 2048), 4) == ALIGNED_BYTES  # fp32: 4 elements are 16 bytes


@given(st.integers(1, 1 << 16), st.integers(1, 1 << 16), st.integers(1, 1 << 16), st.sampled_from([1, 2, 4]))
def test_alignment_divides_every_dimension(m, n, k, e):
    a = alignment_bytes(GemmShape(m, n, k), e)
    assert a % e == 0 and a <= max(ALIGNED_BYTES, e)
    assert all((d * e) % a == 0 for d in (m, n, k))


def test_only_hopper_bf16_is_capped():
    odd = GemmShape(16384, 50257, 2048)
    assert misaligned_cap(odd, 2, 9.0) == pytest.approx(0.14)
    assert misaligned_cap(odd, 2, 8.0) == 1.0 and misaligned_cap(odd, 2, None) == 1.0
    assert misaligned_cap(odd, 4, 9.0) == 1.0
    assert misaligned_cap(GemmShape(16384, 50304, 2048), 2, 9.0) == 1.0


def test_h200_logits_gemm_runs_at_the_measured_rate():
    """16384 x 50257 x 2048 bf16 on hgx-h200: 0.14 x 989 = 138 TFLOP/s (measured 140 median, trace of
    2026-11-24), where the padded 50304 runs on the curve, near 790 TFLOP/s."""
    rates = _rates(DtypePolicy.BF16_MIXED, load_cluster("hgx-h200").device)
    odd, padded = gemm("g", 16384, 50257, 2048, 2), gemm("g", 16384, 50304, 2048, 2)
    odd_tflops = odd.flops / rates.time(odd)[0] / 1e12
    assert odd_tflops == pytest.approx(0.14 * 989, rel=0.02)
    assert padded.flops / rates.time(padded)[0] / 1e12 > 4 * odd_tflops


def test_megatron_pads_the_vocabulary_per_tp_rank():
    assert Framework.MEGATRON.vocab_multiple(4) == 512 and Framework.TORCH_DDP.vocab_multiple(4) == 1
    assert padded_vocab(50257, 512) == 50688 and padded_vocab(50688, 512) == 50688


def test_padding_removes_the_penalty_of_an_odd_vocabulary():
    """GPT-3 1.3B on hgx-h200, micro-batch 8: the unpadded logits take > 4x the padded ones."""
    from simulator.workload.ops import edge_work
    spec = get_preset("gpt3-1.3b")
    rates = _rates(spec.dtype, load_cluster("hgx-h200").device)

    def logits_s(multiple):
        work = next(w for w in edge_work(spec, 8, vocab_multiple=multiple) if w.op is OpKind.LOGITS)
        return sum(rates.time(k)[0] for k in work.fwd + work.bwd)
    assert logits_s(1) > 4 * logits_s(128)
    assert dataclasses.replace(spec).vocab == 50257  # the spec itself is unchanged
    assert edge_times(spec, load_cluster("dgx-a100").device, 8)  # off Hopper, still timed
