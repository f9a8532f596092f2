"""Activation memory per pipeline stage: the bytes kept between a layer's forward and its backward.

Per transformer block and micro-batch, Korthikanti et al. 2022 ("Reducing Activation Recomputation
in Large Transformer Models", §4.1, 16-bit activations, 1-byte dropout masks, f = 4h, eager
attention) count ``s·b·h·(34 + 5·a·s/h)`` bytes. We count the tensors autograd saves by name so
that other shapes (GQA, SwiGLU, rotary, other f), dropout off and FlashAttention follow; for GPT
shapes with dropout and eager attention the O(sbh) and O(as²b) terms are exactly 34 + 5as/h
(tested). Per token, in elements (e bytes each unless said)::

    replicated under tp   the two norm inputs 2h, the two norm outputs (QKV and MLP inputs) 2h,
                          dropout masks after attention and after the MLP 2h (1 byte; dropout only)
    split over tp         QKV output q + 2kv (Q, K, V are views of it); rotated Q and K q + kv
                          (rotary only: new tensors); attention output q (output-projection input);
                          MLP: GELU input and output 2f, or SwiGLU 4f (the fused gate+up output 2f,
                          SiLU(gate) f, the product f: the down projection's input)
    attention scores      eager only: softmax output a·s, plus with dropout its mask (1 byte) and
                          output a·s (split over tp); FlashAttention / SDPA keeps none of them
    row statistics        fp32: LayerNorm mean and rstd (2 per norm), RMSNorm rstd (1 per norm),
                          FlashAttention's log-sum-exp (a per token, split over tp)

Sources: ``torchgen/packaged/autograd/derivatives.yaml`` in site-packages (what each op saves:
``native_layer_norm`` saves input, mean, rstd; ``_fused_rms_norm``, the CUDA RMSNorm, saves input
and rstd; ``_scaled_dot_product_flash_attention`` saves q, k, v, output, logsumexp and an RNG state
rather than a dropout mask; ``native_dropout`` returns a bool mask). Measured on CPU with torch
2.13 (``executor.memory_measure.block_saved_bytes``, docs/memory_measured.md): a GPT block exactly,
a Llama block up to three CPU-only extras.

Tensor parallelism divides the split terms by t (``10 + 24/t + 5as/(ht)`` for GPT); sequence
parallelism divides everything by t (``(34 + 5as/h)/t``) in Megatron-LM; torch's DTensor sequence
parallelism (FSDP2 + tp, torchtitan) saves the column-parallel matmuls' inputs gathered, 2h per token
instead of 2h/t (:mod:`simulator.memory.dtensor_tp`). Selective recompute drops the attention
scores (nothing to drop under FlashAttention); full recompute keeps only the block input
(h per token, /t with sp).

Context parallelism (cp ranks per sample, :mod:`simulator.workload.context`) divides every term by
cp: each rank keeps the activations of its own ``s/cp`` tokens (under FlashAttention no term is
quadratic in s; context parallelism requires it). The ring's KV blocks in flight (two per rank,
transient) are not counted.

Around the blocks (Korthikanti §4.3): the first stage keeps the embedding-dropout mask (sbh bytes,
dropout only), the last the final-norm and output-projection inputs (2·2sbh) and fp32 logits for
the loss (4sbV/t), plus the cross-entropy's transient logits (one micro-batch, by framework:
:func:`loss_working_bytes`). Recomputation runs one block at a time in backward, so one block's
recomputed activations (one micro-batch) are live on top of the checkpoints: the recompute working
set. The two working sets are never live together; the peak holds the larger.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from simulator.memory.autocast import loss_working_bytes_per_logit
from simulator.memory.dtensor_tp import (gathered_block_input_elements, loss_parallel_working_bytes,
                                        uses_dtensor_tp)
from simulator.memory.moe import moe_activation_elements
from simulator.memory.shapes import _kv_rows
from simulator.schedules import ScheduleKind
from simulator.strategy.framework import Framework
from simulator.strategy.formats import autocast_of
from simulator.strategy.layout import ParallelLayout
from simulator.workload.flops import Recompute
from simulator.workload.ops import DROPOUT_MASK_BYTES
from simulator.workload.transformer import ActivationKind, NormKind, PositionKind, TransformerSpec

MASK_BYTES = DROPOUT_MASK_BYTES
"""Bytes per dropout-mask element, the one figure the compute side reads too (``workload.ops``):
torch's ``native_dropout`` mask is bool (Korthikanti et al. 2022 assume 1-byte masks too)."""
STAT_BYTES = 4
"""Bytes per row statistic (norm mean/rstd, attention log-sum-exp): fp32 even for 16-bit inputs
(the CUDA LayerNorm/RMSNorm and flash kernels accumulate and save these in fp32)."""
LOGITS_BYTES = 4
"""Bytes per logit kept for the loss: the cross-entropy upcasts logits to fp32 (Korthikanti §4.3); what
autograd keeps is ``log_softmax``'s fp32 output (its derivative reads ``result`` only,
``torchgen/packaged/autograd/derivatives.yaml``) [src: torch-autograd]."""
SWIGLU_SAVED = 4
"""Elements of f per token a SwiGLU MLP saves: gate+up output (2), SiLU output (1), product (1)."""
GELU_SAVED = 2
"""Elements of f per token a GELU MLP saves: the GELU input and output."""


@dataclass(frozen=True, kw_only=True)
class LayerActivation:
    """One block's activation bytes for one micro-batch on one rank, by part."""

    replicated_bytes: float
    """Norm inputs and outputs, dropout masks: split over tp only with sequence parallelism."""
    split_bytes: float
    """Q, K, V, rotated Q and K, the output-projection input, the MLP's inner activations: split over tp."""
    scores_bytes: float
    """Eager attention scores (softmax output, and with dropout its mask and output): split over tp."""
    stats_bytes: float
    """Per-row fp32 statistics: norm mean/rstd and FlashAttention's log-sum-exp (O(s·b); not in
    Korthikanti's count, which keeps only O(sbh) and O(as²b) terms)."""
    input_bytes: float
    """The block input, what full recompute keeps as its checkpoint."""
    op_saved_bytes: float = 0.0
    """What torchtitan's op-level selective policy keeps (:func:`op_sac_saved_bytes`)."""
    op_extra_bytes: float = 0.0
    """Of ``op_saved_bytes``, the tensors autograd itself would not keep (the w2 output, the
    reduce-scatter outputs): live on top of the recomputed ones during a block's recomputation."""

    @property
    def full_bytes(self) -> float:
        return self.replicated_bytes + self.split_bytes + self.scores_bytes + self.stats_bytes

    def kept_bytes(self, recompute: Recompute) -> float:
        """Bytes kept until backward under ``recompute``."""
        if recompute is Recompute.FULL:
            return self.input_bytes
        if recompute is Recompute.SELECTIVE:
            return self.full_bytes - self.scores_bytes
        if recompute is Recompute.SELECTIVE_OP:
            return self.op_saved_bytes
        return self.full_bytes

    def working_bytes(self, recompute: Recompute) -> float:
        """Extra bytes live while one block is recomputed in backward."""
        shared = self.op_saved_bytes - self.op_extra_bytes if recompute is Recompute.SELECTIVE_OP else None
        return max(self.full_bytes - (self.kept_bytes(recompute) if shared is None else shared), 0.0)


def layer_activation(spec: TransformerSpec, *, seq: int, mbs: int, tp: int = 1, sp: bool = False,
                     flash_attention: bool = True, moe_layer: bool = False, skew: float = 1.0,
                     ep: int = 1, dtensor: bool = False, residual: int | None = None) -> LayerActivation:
    """Per-block activation bytes (module docstring), with the spec's activation element size and
    dropout; ``flash_attention=False`` is eager attention (Korthikanti's count); ``moe_layer``: the MLP
    terms are a MoE block's (:func:`simulator.memory.moe.moe_activation_elements`, routing ``skew``);
    ``dtensor``: torch's tensor parallelism, whose sequence-parallel matmuls save their gathered inputs
    (:func:`simulator.memory.dtensor_tp.gathered_block_input_elements`); ``residual``: bytes per element
    of the block input and the two norms' inputs when they differ from the activations' (autocast's fp32
    residual stream, :func:`simulator.memory.autocast.residual_bytes`)."""
    e = spec.dtype.activation_bytes
    r = e if residual is None else residual
    sb, h, a = seq * mbs, spec.hidden, spec.heads
    q, kv, f = spec.q_dim / tp, _kv_rows(spec, tp), spec.ffn_size / tp
    rep_div = tp if sp else 1
    dropout = spec.dropout > 0
    rotary = q + kv if spec.position is PositionKind.ROTARY else 0
    mlp = (SWIGLU_SAVED if spec.activation is ActivationKind.SWIGLU else GELU_SAVED) * f
    if moe_layer and spec.moe is not None:
        mlp = moe_activation_elements(spec, tp, skew, ep)
    attention = q + 2 * kv + rotary + q
    if spec.mla is not None:  # Multi-head Latent Attention's widths (simulator.workload.mla)
        attention = spec.mla.saved_elements(spec.heads / tp)
    norm_stats = 2 * (2 if spec.norm is NormKind.LAYERNORM else 1)
    scores = 0.0
    if not flash_attention:
        scores = (a / tp) * seq * seq * mbs * (e + ((MASK_BYTES + e) if dropout else 0))
    return LayerActivation(
        replicated_bytes=sb * (gathered_block_input_elements(h, tp, sp, dtensor) * e + 2 * h * (r - e) / rep_div
                               + h * (2 * MASK_BYTES if dropout else 0) / rep_div),
        split_bytes=sb * (attention + mlp) * e,
        scores_bytes=scores,
        stats_bytes=sb * STAT_BYTES * (norm_stats / rep_div + (a / tp if flash_attention else 0)),
        input_bytes=sb * h * r / rep_div,
        op_saved_bytes=op_sac_saved_bytes(spec, seq=seq, mbs=mbs, tp=tp, sp=sp),
        op_extra_bytes=sb * e * (h if spec.activation is ActivationKind.SWIGLU else 0) + (2 * sb * h * e / tp if sp else 0),
    )


def op_sac_saved_bytes(spec: TransformerSpec, *, seq: int, mbs: int, tp: int = 1, sp: bool = False) -> float:
    """Bytes one block keeps under torchtitan's op-level selective checkpointing
    (:mod:`simulator.workload.op_sac`: every other matmul's output and the fused attention kernel's),
    per micro-batch on one rank, with e-byte activations and T = s·b tokens::

        T·e·(h/r + q/t + kv/t + q/t + f/t + [SwiGLU] h + [sp] 2h/t) + T·4·a/t

    block input (r = t with sequence parallelism, else 1), wq, wv, the attention output, w1 (fc1), w2's
    row-parallel output (SwiGLU: the 7th matmul, unsplit), the two reduce-scatter outputs under
    sequence parallelism, and flash attention's fp32 log-sum-exp [src: torchtitan-op-sac]."""
    e, sb, h = spec.dtype.activation_bytes, seq * mbs, spec.hidden
    q, kv, f = spec.q_dim / tp, _kv_rows(spec, tp), spec.ffn_size / tp
    swiglu = spec.activation is ActivationKind.SWIGLU
    elements = h / (tp if sp else 1) + 2 * q + kv + f + (h if swiglu else 0) + (2 * h / tp if sp else 0)
    return sb * (elements * e + STAT_BYTES * spec.heads / tp)


def in_flight(layout: ParallelLayout, stage: int) -> tuple[float, float, float]:
    """Micro-batches' worth of activations stage ``stage`` holds at peak: (blocks, embedding, head).

    pp = 1: one (accumulation steps run one after another). GPipe: all m. 1F1B, and the interleaved
    schedule with one chunk per rank (which is 1F1B): min(p - k, m). Interleaved with v > 1 chunks: Megatron-LM's warm-up count, min(m·v, 2(p - k - 1) + (v - 1)·p + 1)
    chunk-micro-batches of l/(p·v) blocks each, i.e. that count / v micro-batches of the stage's
    blocks (p·(1 + (p - 1)/(p·v)) on the first stage, Korthikanti §4.2.3); its embedding chunk holds
    min(p, m) (an approximation) and its head chunk one, as under 1F1B. Chained schedules
    (``schedules_per_step`` k): m is one run's m / k (each run drains before the next fills).
    """
    p, m, k, v = layout.pp, layout.micro_batches // layout.strategy.schedules_per_step, stage, layout.v  # one run's
    if p == 1:
        return 1.0, 1.0, 1.0
    if layout.strategy.schedule is ScheduleKind.GPIPE:
        return float(m), float(m), float(m)
    if layout.strategy.schedule is ScheduleKind.ONE_F_ONE_B or v == 1:
        n = float(min(p - k, m))
        return n, n, n
    chunks = min(m * v, 2 * (p - k - 1) + (v - 1) * p + 1)
    return chunks / v, float(min(p, m)), 1.0


@dataclass(frozen=True, kw_only=True)
class StageActivations:
    """Activation bytes one rank of a pipeline stage holds at its peak."""

    blocks_bytes: float
    """Kept block activations on the GPU (checkpoints offloaded to the host excluded)."""
    recompute_working_bytes: float
    """One block's recomputed activations during backward (0 without recomputation)."""
    embedding_bytes: float
    """Embedding-dropout masks (first stage; 0 without dropout)."""
    head_bytes: float
    """Final-norm and output-projection inputs and fp32 logits (last stage)."""
    loss_working_bytes: float
    """The loss's transient logits on the last stage (:func:`loss_working_bytes`; 0 elsewhere)."""
    host_checkpoint_bytes: float
    """Block checkpoints moved to host memory (``offload_activations``)."""
    scores_bytes: float
    """Of ``blocks_bytes``, the eager attention-score part (what FlashAttention or selective recompute drop)."""
    micro_batches_in_flight: float

    @property
    def gpu_bytes(self) -> float:
        """Kept activations plus the larger of the two working sets, which are never live together:
        the loss's runs before the first block's backward, a recomputed block's after it."""
        return (self.blocks_bytes + self.embedding_bytes + self.head_bytes
                + max(self.recompute_working_bytes, self.loss_working_bytes))


def loss_working_bytes(spec: TransformerSpec, *, seq: int, mbs: int, tp: int = 1,
                       framework: Framework = Framework.TORCH_DDP, autocast: bool | None = None) -> float:
    """Bytes the cross-entropy holds on top of the saved fp32 probabilities (``head_bytes``), per
    micro-batch on the last stage, s·b·ceil(V/t) logits each, with e-byte activations:

    - eager PyTorch (``F.cross_entropy(logits.float(), ...)``: ``log_softmax`` + ``nll_loss``, as
      torchtitan and DeepSpeed's examples call it): in forward the e-byte logits and their fp32 copy
      (4 + e; 4 when the logits are already fp32, as ``.float()`` returns the same tensor); in
      backward ``nll_loss_backward`` returns a dense fp32 gradient of the log-probabilities and
      ``_log_softmax_backward_data(grad, result, ...)`` a dense fp32 gradient of the logits while both
      are alive (``derivatives.yaml`` lines 2095-2096 and 2188-2189 in torch 2.13): 8. The larger,
      8 bytes per logit for e <= 4, is the working set [src: torch-autograd];
    - Megatron-LM's vocab-parallel cross-entropy works in place on its fp32 copy (which becomes the
      saved softmax) and computes the gradient in place in it: only the e-byte logits (forward) or
      the gradient's e-byte cast (backward), 0 when e = 4 [src: megatron-cross-entropy];
    - FSDP2 with tp > 1 (torchtitan): torch's ``loss_parallel``, 12 bytes per logit
      (:mod:`simulator.memory.dtensor_tp`) [src: torch-loss-parallel];
    - torch DDP's autocast on 16-bit logits (``cross_entropy`` with no ``.float()``, as the executor
      calls it): 4 (:func:`simulator.memory.autocast.loss_working_bytes_per_logit`).
    """
    e = spec.dtype.activation_bytes
    if uses_dtensor_tp(framework, tp):
        return loss_parallel_working_bytes(tokens=seq * mbs, local_vocab=ceil(spec.vocab / tp), activation_bytes=e)
    amp = loss_working_bytes_per_logit(spec.dtype, autocast_of(framework) if autocast is None else autocast)
    if amp is not None:
        return seq * mbs * ceil(spec.vocab / tp) * amp
    cast = e if e != LOGITS_BYTES else 0
    eager = max(LOGITS_BYTES + cast, 2 * LOGITS_BYTES)
    per_logit = cast if framework is Framework.MEGATRON else eager
    return seq * mbs * ceil(spec.vocab / tp) * per_logit
