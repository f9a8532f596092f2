"""The cross-entropy's kernels by framework (:mod:`simulator.workload.loss`): torch's ``F.cross_entropy`` on fp32
logits is a cast, ``log_softmax`` and their backward passes [src: torch-autograd]; Megatron-LM's vocab-parallel
cross-entropy a cast, max, subtract, exp, sum and divide, and backward a scale and the cast back
[src: megatron-2021-cross-entropy, megatron-cross-entropy].

Hand-worked: Llama 3 8B's head (vocabulary 128,256) at micro-batch 1, sequence 8192 on one rank: N = 8192 ·
128,256 = 1,050,673,152 bf16 logits. torch: forward cast (2 + 4) and log_softmax (4 + 4), 14·N = 14,709,424,128 B;
backward nll_loss's dense gradient (4), log_softmax's backward (4 + 4 + 4) and the cast back (4 + 2), 22·N =
23,114,809,344 B. Megatron-LM: forward (2 + 4) + 4 + 8 + 8 + 4 + 8 = 38 per logit, 39,925,579,776 B; backward
8 + (4 + 2) = 14, 14,709,424,128 B; on fp32 logits 32 and 8. One pass: 4·N forward, 6·N backward."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.strategy.framework import Framework
from simulator.workload import get_preset
from simulator.workload.kinds import LossImpl
from simulator.workload.loss import loss_work, with_loss
from simulator.workload.ops import OpKind, edge_work

N = 8192 * 128_256


def _bytes(impl: LossImpl, e: int = 2) -> tuple[float, float]:
    work = loss_work(N, e, impl)
    return sum(k.bytes for k in work.fwd), sum(k.bytes for k in work.bwd)


def test_torch_fp32_by_hand():
    assert N == 1_050_673_152
    assert _bytes(LossImpl.TORCH_FP32) == (14 * N, 22 * N) == (14_709_424_128, 23_114_809_344)
    assert _bytes(LossImpl.TORCH_FP32, e=4) == (8 * N, 16 * N)  # fp32 logits: no casts


def test_torch_under_autocast_by_hand():
    """CUDA autocast's order [src: torch-autocast-cache]: bf16 ``log_softmax`` (2 + 2), the cast to fp32 for
    ``nll_loss`` (2 + 4): 10·N forward; backward the fp32 fill (4), the cast back (4 + 2) and the bf16
    ``log_softmax`` backward (2 + 2 + 2): 16·N. Fp32 logits: no cast, as ``TORCH_FP32``."""
    assert _bytes(LossImpl.TORCH_AUTOCAST) == (10 * N, 16 * N) == (10_506_731_520, 16_810_770_432)
    assert _bytes(LossImpl.TORCH_AUTOCAST, e=4) == _bytes(LossImpl.TORCH_FP32, e=4)
    names = [k.name for k in loss_work(N, 2, LossImpl.TORCH_AUTOCAST).fwd]
    assert names == ["cross_entropy.log_softmax", "cross_entropy.cast"]  # the cast after log_softmax


def test_autocast_changes_only_torchs_rule():
    from simulator.workload.loss import under_autocast

    assert under_autocast(LossImpl.TORCH_FP32, True) is LossImpl.TORCH_AUTOCAST
    assert under_autocast(LossImpl.TORCH_FP32, False) is LossImpl.TORCH_FP32
    for impl in (LossImpl.MEGATRON_VOCAB_PARALLEL, LossImpl.ONE_PASS):
        assert under_autocast(impl, True) is impl
    spec = get_preset("gpt3-1.3b")
    loss = next(w for w in with_loss(edge_work(spec, 8), LossImpl.TORCH_FP32, 2, autocast=True) if w.op is OpKind.LOSS)
    assert sum(k.bytes for k in loss.bwd) == 16 * 8 * spec.seq_len * spec.vocab


def test_megatron_vocab_parallel_by_hand():
    assert _bytes(LossImpl.MEGATRON_VOCAB_PARALLEL) == (38 * N, 14 * N) == (39_925_579_776, 14_709_424_128)
    assert _bytes(LossImpl.MEGATRON_VOCAB_PARALLEL, e=4) == (32 * N, 8 * N)  # fp32 logits: no casts
    assert Framework.MEGATRON.loss_impl is LossImpl.MEGATRON_VOCAB_PARALLEL


def test_one_pass_is_the_previous_rule():
    assert _bytes(LossImpl.ONE_PASS) == (4 * N, 6 * N)


def test_edge_work_takes_the_framework_rule():
    spec = get_preset("llama3-8b")
    loss = lambda impl: next(w for w in with_loss(edge_work(spec, 1, 8192), impl, 2) if w.op is OpKind.LOSS)
    assert sum(k.bytes for k in loss(Framework.FSDP2.loss_impl).fwd) == 14 * N
    assert sum(k.bytes for k in loss(Framework.MEGATRON.loss_impl).fwd) == 38 * N
    assert Framework.TORCH_DDP.loss_impl is Framework.DEEPSPEED.loss_impl is LossImpl.TORCH_FP32


@pytest.mark.parametrize("policy", ["bf16", "fp32"])
def test_the_eager_operator_count_survives_the_split(policy):
    """On a CPU (``inline`` dispatch) each kernel is charged its dispatched operators: torch's loss still
    dispatches the 5 forward and 5 backward operators ``eager_dispatch.CROSS_ENTROPY`` counts (measured exactly
    by tests/test_eager_dispatch.py), however many kernels its bytes are split into (fp32 logits: no casts)."""
    from simulator.workload.eager_dispatch import CROSS_ENTROPY
    from simulator.workload.kinds import DtypePolicy

    spec = get_preset("gpt3-125m")
    spec = spec if policy == "bf16" else dataclasses.replace(spec, dtype=DtypePolicy.FP32)
    e = spec.dtype.activation_bytes
    loss = next(w for w in with_loss(edge_work(spec, 2), LossImpl.TORCH_FP32, e) if w.op is OpKind.LOSS)
    assert len(loss.fwd) == (1 if e == 4 else 2) and len(loss.bwd) == (2 if e == 4 else 3)
    assert (sum(k.dispatches for k in loss.fwd), sum(k.dispatches for k in loss.bwd)) == (CROSS_ENTROPY,) * 2
