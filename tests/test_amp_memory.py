"""What torch AMP allocates in the executor's DDP step (gloo, 1 rank, CPU, torch 2.13.0), against the memory
model's torch-DDP mixed-precision terms (:mod:`simulator.memory.autocast`), byte for byte.

Measured by :func:`executor.amp_memory.measure_amp_step` (four launches, a few seconds each): model states
and DDP buckets by storage, the bf16 weight casts by a dispatch mode plus the CPU allocator's events, the
optimizer step's temporaries by the allocator's peak. Two tiny models: GPT (LayerNorm with biases, GELU,
learned positions, tied embeddings) and Llama-like (RMSNorm, SwiGLU, rotary, untied head).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from executor.amp_memory import measure_amp_step
from simulator.memory.autocast import SINGLE_TENSOR_ADAM_COPIES, cast_weight_bytes, optimizer_step_bytes
from simulator.strategy.formats import autocast_of
from simulator.strategy.kinds import OptimizerImpl
from simulator.memory.buffers import buffer_bytes
from simulator.memory.shapes import transformer_param_shapes
from simulator.memory.states import model_state_bytes
from simulator.strategy.framework import Framework
from simulator.strategy.kinds import ZeroStage
from simulator.workload import (ActivationKind, BiasKind, DtypePolicy, NormKind, PositionKind, Recompute,
                                TransformerSpec)

pytestmark = pytest.mark.multiproc

GPT = TransformerSpec(name="gpt-tiny-amp", layers=2, hidden=64, heads=4, vocab=126, seq_len=16,
                      dtype=DtypePolicy.BF16_MIXED)
LLAMA = replace(GPT, name="llama-tiny-amp", norm=NormKind.RMSNORM, activation=ActivationKind.SWIGLU, ffn=96,
                position=PositionKind.ROTARY, bias=BiasKind.NONE, tied_embeddings=False)
TORCH = Framework.TORCH_DDP
CASES = {"gpt": (GPT, Recompute.NONE, True), "llama-full": (LLAMA, Recompute.FULL, True),
         "gpt-cpu-default": (GPT, Recompute.NONE, None), "llama-cpu-default": (LLAMA, Recompute.NONE, None)}
"""name: (model, recompute, AdamW foreach: True as on CUDA, None = the default, single-tensor on CPU)."""


class _Runs(dict):
    def __missing__(self, name: str) -> dict:
        spec, recompute, foreach = CASES[name]
        self[name] = measure_amp_step(spec, recompute=recompute, foreach=foreach)[0]
        return self[name]


@pytest.fixture(scope="module")
def runs() -> _Runs:
    return _Runs()


def _shapes(spec):
    return transformer_param_shapes(spec)


@pytest.mark.parametrize("name", ["gpt", "llama-full"])
def test_states_are_the_fp32_layout(runs, name):
    """fp32 parameters, gradients, moments and buckets: 4 + 4 + 8 + 4 bytes per parameter, as modelled."""
    spec = CASES[name][0]
    got = runs[name]
    model = model_state_bytes(_shapes(spec), dp=1, zero=ZeroStage.ZERO0, dtype=spec.dtype, framework=TORCH)
    assert (got["params_bytes"], got["grads_bytes"], got["moments_bytes"]) == \
        (model.params_bytes, model.grads_bytes, model.optimizer_bytes) == (4 * spec.params, 4 * spec.params,
                                                                            8 * spec.params)
    buckets = buffer_bytes(local_params=spec.params, largest_block=0, zero=ZeroStage.ZERO0, dtype=spec.dtype,
                           framework=TORCH).grad_buckets_bytes
    assert got["grad_buckets_bytes"] == buckets == 4 * spec.params


@pytest.mark.parametrize("name", ["gpt", "llama-full"])
def test_every_matmul_weight_is_cast_once_and_held_to_the_end_of_the_forward(runs, name):
    """autocast's cache: one cast per weight (the tied embedding too, for the head), none for norms and
    embedding tables; all of them allocated when the forward returns inside the region, as modelled."""
    spec = CASES[name][0]
    got = runs[name]
    assert got["casts"] == got["cast_params"]
    assert not any(".norm" in n or "norm_f" in n or n == "embed.pos.weight" for n in got["cast_names"])
    assert ("embed.tok.weight" in got["cast_names"]) is spec.tied_embeddings
    assert got["cast_bytes_in_region"] == cast_weight_bytes(_shapes(spec), dtype=spec.dtype, autocast=True) > 0


def test_saved_casts_outlive_the_region_without_recompute(runs):
    """Without recomputation autograd keeps the weight casts for backward (not the biases': addmm's
    backward does not read its bias); under full recomputation only the head's, outside the checkpoints."""
    gpt, llama = runs["gpt"], runs["llama-full"]
    biases = GPT.layers * (3 * GPT.hidden + GPT.hidden + 4 * GPT.hidden + GPT.hidden)  # qkv, out, up, down
    assert gpt["cast_bytes_in_region"] - gpt["cast_bytes_after_region"] == 2 * biases
    assert llama["cast_bytes_after_region"] == 2 * LLAMA.vocab * LLAMA.hidden  # head.weight


@pytest.mark.parametrize("name", ["gpt", "llama-full"])
def test_foreach_step_temporary_is_one_copy_of_the_second_moments(runs, name):
    """foreach AdamW: ``_foreach_sqrt(exp_avg_sqs)``, 4 bytes per parameter, + a 0-d step increment."""
    got = runs[name]
    model = optimizer_step_bytes(impl=OptimizerImpl.FOREACH, moment_bytes=got["moments_bytes"], largest_moment_bytes=0)
    assert model == 4 * CASES[name][0].params
    assert model <= got["step_peak_bytes"] <= model + 64


@pytest.mark.parametrize("name", ["gpt-cpu-default", "llama-cpu-default"])
def test_single_tensor_step_holds_two_copies_of_the_largest_moment(runs, name):
    """The CPU default: two moment-sized temporaries of the largest tensor at a time (+ per-tensor scalars, <2 %)."""
    got = runs[name]
    model = optimizer_step_bytes(impl=OptimizerImpl.FOR_LOOP, moment_bytes=got["moments_bytes"],
                                 largest_moment_bytes=4 * got["largest_param_numel"])
    assert model == SINGLE_TENSOR_ADAM_COPIES * 4 * got["largest_param_numel"]
    assert model <= got["step_peak_bytes"] <= 1.02 * model


def test_other_frameworks_keep_their_layout():
    """The autocast layout is torch DDP's default alone: DeepSpeed, Megatron and FSDP2 keep 16-bit weights (their
    default mixed precision is param-dtype), and a fused Adam allocates no step temporary."""
    for framework, zero in ((Framework.DEEPSPEED, ZeroStage.ZERO0), (Framework.MEGATRON, ZeroStage.ZERO0),
                            (Framework.FSDP2, ZeroStage.ZERO3)):
        states = model_state_bytes(_shapes(GPT), dp=1, zero=zero, dtype=GPT.dtype, framework=framework)
        assert states.params_bytes == 2 * GPT.params
        assert cast_weight_bytes(_shapes(GPT), dtype=GPT.dtype, autocast=autocast_of(framework)) == 0
        impl = framework.optimizer_impl(foreach_device=True)
        assert optimizer_step_bytes(impl=impl, moment_bytes=1e9, largest_moment_bytes=1e9) == (
            0 if impl is OptimizerImpl.FUSED else 5e8)
    fp32 = replace(GPT, dtype=DtypePolicy.FP32)
    assert cast_weight_bytes(_shapes(fp32), dtype=fp32.dtype, autocast=True) == 0


def _runner_states(rank, world):
    from executor.strategies.data_parallel import DataParallelRunner
    from parallel_runs import GPT_TINY, context, plan_for

    runner = DataParallelRunner(context(plan_for(GPT_TINY, {"dp": 2}), rank, world))
    for step in range(2):  # DDP rebuilds its buckets in the second step's forward
        runner.train_step(step)
    return runner.model_state_bytes()


def test_executor_counts_the_buckets_of_the_last_step_only():
    """The DDP runner's ``buffers_bytes`` is one copy of the gradients (DDP's default), not the buckets
    of the first step too, which DDP frees when it rebuilds them."""
    from executor.launch import run

    for states in run(_runner_states, 2, timeout_s=240):
        assert states.buffers_bytes == states.grads_bytes > 0


def test_block_under_autocast_saves_fp32_norm_inputs():
    """A GPT block under autocast on its fp32 residual-stream input (CPU autocast; the ops it runs have the
    CUDA policy too: linear/SDPA 16-bit, LayerNorm fp32): block input and norm2 input saved fp32, the rest
    16-bit; the model with :func:`residual_bytes` equals it, without it does not. Parameter casts are left
    out (counted apart, above)."""
    from executor.memory_measure import block_saved_bytes
    from simulator.memory import layer_activation
    from simulator.memory.autocast import residual_bytes

    residual = residual_bytes(GPT.dtype, autocast_of(TORCH))
    assert residual == 4
    for seq in (16, 64):
        got = block_saved_bytes(GPT, batch=2, seq=seq, autocast=True)["saved_bytes"]
        assert got == layer_activation(GPT, seq=seq, mbs=2, residual=residual).full_bytes
        assert got > layer_activation(GPT, seq=seq, mbs=2).full_bytes


def test_cross_entropy_of_bf16_logits_under_autocast():
    """CUDA autocast's cross_entropy on bf16 logits: keeps bf16 log-probabilities + nll_loss's fp32 input
    (6 bytes per logit) and works in nll_loss_backward's fp32 gradient (4), as modelled (+ a few bytes of
    0-d tensors)."""
    from executor.loss_memory import measure_loss_working
    from simulator.memory.activations import LOGITS_BYTES, loss_working_bytes
    from simulator.memory.autocast import loss_kept_bytes_per_logit

    tokens, vocab = 64, 1000
    got = measure_loss_working(tokens=tokens, vocab=vocab, autocast=True)[0]
    logits = tokens * vocab
    spec = replace(GPT, vocab=vocab, seq_len=tokens)
    assert loss_kept_bytes_per_logit(spec.dtype, autocast_of(TORCH), LOGITS_BYTES) == 6
    assert 0 <= got["kept_bytes"] - 6 * logits <= 16
    working = max(got["forward_peak_bytes"] + 2 * logits - got["kept_bytes"], got["backward_peak_bytes"])
    model = loss_working_bytes(spec, seq=tokens, mbs=1, framework=TORCH)
    assert model == 4 * logits and 0 <= working - model <= 16
