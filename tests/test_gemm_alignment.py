"""Misaligned GEMMs on Hopper (simulator/gemm_alignment.py) and Megatron's vocabulary padding.

Figures: our H200 measurements of 2026-11-24 (docs/hardware_measured.md): the GPT-3 1.3B logits GEMMs
(vocab 50257, odd) at 90-146 TFLOP/s, the 50257 // 4 = 12564 shapes at 235-274 TFLOP/s; and of
2026-11-25: token counts that are no multiple of 8 (16,383 tokens; MoE experts of 1,092 and 3,276 rows)
at full rate (docs/measured/h200-2026-11-25/call2/gpu_extra-extra2.json)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, strategies as st

from simulator.cluster.io import load_cluster
from simulator.compute import rates_for, edge_times
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


@given(st.integers(1, 1 << 16), st.integers(1, 1 << 16), st.integers(1, 1 << 16), st.sampled_from([1, 2, 4]),
       st.booleans())
def test_alignment_divides_both_leading_dimensions_and_ignores_the_tokens(m, n, k, e, weight_grad):
    shape = GemmShape(m, n, k, 1, weight_grad)
    a = alignment_bytes(shape, e)
    lead = (m, n) if weight_grad else (n, k)
    assert a % e == 0 and a <= max(ALIGNED_BYTES, e)
    assert all((d * e) % a == 0 for d in lead)
    tokens = dataclasses.replace(shape, **({"k": 8 * k} if weight_grad else {"m": 8 * m}))
    assert alignment_bytes(tokens, e) == a  # the token count never decides


def test_the_token_count_is_no_leading_dimension():
    """An odd token count keeps the full rate; the vocabulary's weight gradient (m = vocab) is still capped."""
    assert misaligned_cap(GemmShape(16383, 6144, 2048), 2, 9.0) == 1.0
    assert misaligned_cap(GemmShape(1092, 2816, 2048, 15), 2, 9.0) == 1.0  # an MoE expert's rows
    assert misaligned_cap(GemmShape(2048, 2816, 1092, 15, True), 2, 9.0) == 1.0  # its weight gradient
    assert misaligned_cap(GemmShape(50257, 2048, 16384, 1, True), 2, 9.0) == pytest.approx(0.14)
    assert misaligned_cap(GemmShape(50257, 2048, 16384), 2, 9.0) == 1.0  # plain torch.mm: 780 measured


def test_backward_marks_the_weight_gradient():
    from simulator.workload.ops import backward
    fwd = gemm("logits", 16384, 50257, 2048, 2)
    dgrad, wgrad = backward(fwd, (16384, 50257, 2048, 2, 1))
    assert not dgrad.shape.weight_grad and wgrad.shape.weight_grad
    assert (wgrad.shape.m, wgrad.shape.n, wgrad.shape.k) == (2048, 50257, 16384)
    assert all(misaligned_cap(k.shape, 2, 9.0) == pytest.approx(0.14) for k in (fwd, dgrad, wgrad))


def test_only_hopper_bf16_is_capped():
    odd = GemmShape(16384, 50257, 2048)
    assert misaligned_cap(odd, 2, 9.0) == pytest.approx(0.14)
    assert misaligned_cap(odd, 2, 8.0) == 1.0 and misaligned_cap(odd, 2, None) == 1.0
    assert misaligned_cap(odd, 4, 9.0) == 1.0
    assert misaligned_cap(GemmShape(16384, 50304, 2048), 2, 9.0) == 1.0


def test_h200_logits_gemm_runs_at_the_measured_rate():
    """16384 x 50257 x 2048 bf16 on hgx-h200: 0.14 x 989 = 138 TFLOP/s (measured 140 median, trace of
    2026-11-24), where the padded 50304 runs on the curve, near 790 TFLOP/s."""
    rates = rates_for(DtypePolicy.BF16_MIXED, load_cluster("hgx-h200").device)
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
    rates = rates_for(spec.dtype, load_cluster("hgx-h200").device)

    def logits_s(multiple):
        work = next(w for w in edge_work(spec, 8, vocab_multiple=multiple) if w.op is OpKind.LOGITS)
        return sum(rates.time(k)[0] for k in work.fwd + work.bwd)
    assert logits_s(1) > 4 * logits_s(128)
    assert dataclasses.replace(spec).vocab == 50257  # the spec itself is unchanged
    assert edge_times(spec, load_cluster("dgx-a100").device, 8)  # off Hopper, still timed
