"""Activation memory per pipeline stage: the bytes kept between a layer's forward and its backward.

Per transformer block and micro-batch, Korthikanti et al. 2022 ("Reducing Activation Recomputation
in Large Transformer Models", §4.1, 16-bit activations, 1-byte dropout masks, f = 4h) count
``s·b·h·(34 + 5·a·s/h)`` bytes. We count the same tensors by name so that other shapes (GQA,
SwiGLU, other f) follow; for GPT shapes the sum is exactly 34 + 5as/h (tested). In elements::

    replicated under tp   two norm inputs 2sbh, QKV input sbh, MLP input sbh      (4 · 2 bytes)
    dropout masks         after attention and after the MLP, 2sbh                  (1 byte each)
    split over tp         Q, K, V sb(q + 2kv); output-projection input sbq;
                          MLP: GELU in and out 2sbf, or SwiGLU gate, up, product 3sbf
    attention scores      softmax output and its dropout output 2·a·s²·b, mask a·s²·b (split over tp)

Tensor parallelism divides the split terms by t (``10 + 24/t + 5as/(ht)`` for GPT); sequence
parallelism divides everything by t (``(34 + 5as/h)/t``). Selective recompute drops the attention
scores; full recompute keeps only the block input (2sbh, /t with sp). The masks are counted even
for models trained without dropout (Llama): an overestimate of 2sbh per block (~6%); the scores term
is what FlashAttention never stores, so ``--recompute selective`` also models FlashAttention.

Around the blocks (Korthikanti §4.3): the first stage keeps the embedding-dropout mask (sbh bytes),
the last the final-norm and output-projection inputs (2·2sbh) and fp32 logits for the loss (4sbV/t).
Recomputation runs one block at a time in backward, so one block's recomputed activations (one
micro-batch) are live on top of the checkpoints: counted as the recompute working set.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from simulator.memory.shapes import _kv_rows, stage_layers
from simulator.memory.strategy import MemoryStrategy, ScheduleKind
from simulator.workload.flops import Recompute
from simulator.workload.transformer import ActivationKind, TransformerSpec

MASK_BYTES = 1
"""Bytes per dropout-mask element (Korthikanti et al. 2022 assume 1-byte masks)."""
LOGITS_BYTES = 4
"""Bytes per logit kept for the loss: the cross-entropy upcasts logits to fp32 (Korthikanti §4.3)."""


@dataclass(frozen=True, kw_only=True)
class LayerActivation:
    """One block's activation bytes for one micro-batch on one rank, by part."""

    replicated_bytes: float
    """Norm, QKV and MLP inputs and dropout masks: split over tp only with sequence parallelism."""
    split_bytes: float
    """Q, K, V, the output-projection input and the MLP's inner activations: split over tp."""
    scores_bytes: float
    """Attention scores (softmax and its dropout output and mask): split over tp."""
    input_bytes: float
    """The block input, what full recompute keeps as its checkpoint."""

    @property
    def full_bytes(self) -> float:
        return self.replicated_bytes + self.split_bytes + self.scores_bytes

    def kept_bytes(self, recompute: Recompute) -> float:
        """Bytes kept until backward under ``recompute``."""
        if recompute is Recompute.FULL:
            return self.input_bytes
        if recompute is Recompute.SELECTIVE:
            return self.replicated_bytes + self.split_bytes
        return self.full_bytes

    def working_bytes(self, recompute: Recompute) -> float:
        """Extra bytes live while one block is recomputed in backward."""
        return self.full_bytes - self.kept_bytes(recompute)


def layer_activation(spec: TransformerSpec, *, seq: int, mbs: int, tp: int = 1, sp: bool = False) -> LayerActivation:
    """Per-block activation bytes (module docstring), with the spec's activation element size."""
    e = spec.dtype.activation_bytes
    sb, h, a = seq * mbs, spec.hidden, spec.heads
    q, kv, f = spec.q_dim / tp, _kv_rows(spec, tp), spec.ffn_size / tp
    rep_div = tp if sp else 1
    mlp = (3 if spec.activation is ActivationKind.SWIGLU else 2) * f
    return LayerActivation(
        replicated_bytes=sb * h * (4 * e + 2 * MASK_BYTES) / rep_div,
        split_bytes=sb * (q + 2 * kv + q + mlp) * e,
        scores_bytes=(a / tp) * seq * seq * mbs * (2 * e + MASK_BYTES),
        input_bytes=sb * h * e / rep_div,
    )


def in_flight(strategy: MemoryStrategy, stage: int) -> tuple[float, float, float]:
    """Micro-batches' worth of activations stage ``stage`` holds at peak: (blocks, embedding, head).

    pp = 1: one (accumulation steps run one after another). GPipe: all m. 1F1B: min(p - k, m).
    Interleaved with v chunks: Megatron-LM's warm-up count, min(m·v, 2(p - k - 1) + (v - 1)·p + 1)
    chunk-micro-batches of l/(p·v) blocks each, i.e. that count / v micro-batches of the stage's
    blocks (p·(1 + (p - 1)/(p·v)) on the first stage, Korthikanti §4.2.3); its embedding chunk holds
    min(p, m) (an approximation) and its head chunk one, as under 1F1B.
    """
    p, m, k, v = strategy.pp, strategy.microbatches, stage, strategy.virtual_stages
    if p == 1:
        return 1.0, 1.0, 1.0
    if strategy.schedule is ScheduleKind.GPIPE:
        return float(m), float(m), float(m)
    if strategy.schedule is ScheduleKind.ONE_F_ONE_B:
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
    """Embedding-dropout masks (first stage)."""
    head_bytes: float
    """Final-norm and output-projection inputs and fp32 logits (last stage)."""
    host_checkpoint_bytes: float
    """Block checkpoints moved to host memory (``offload_activations``)."""
    scores_bytes: float
    """Of ``blocks_bytes``, the attention-score part (what FlashAttention or selective recompute drop)."""
    micro_batches_in_flight: float

    @property
    def gpu_bytes(self) -> float:
        return self.blocks_bytes + self.recompute_working_bytes + self.embedding_bytes + self.head_bytes


def stage_activations(spec: TransformerSpec, strategy: MemoryStrategy, stage: int) -> StageActivations:
    """Activation bytes of one rank of pipeline stage ``stage`` under ``strategy``."""
    s = strategy
    layer = layer_activation(spec, seq=s.seq, mbs=s.mbs, tp=s.tp, sp=s.sp)
    n_blocks = len(stage_layers(spec.layers, s.pp)[stage])
    n_layers, n_embed, n_head = in_flight(s, stage)
    kept = layer.kept_bytes(s.recompute) * n_blocks * n_layers
    scores = layer.scores_bytes * n_blocks * n_layers if s.recompute is Recompute.NONE else 0.0
    rep_div = s.tp if s.sp else 1
    sbh = s.seq * s.mbs * spec.hidden
    e = spec.dtype.activation_bytes
    embedding = sbh * MASK_BYTES / rep_div * n_embed if stage == 0 else 0.0
    head = 0.0
    if stage == s.pp - 1:
        head = (2 * sbh * e / rep_div + s.seq * s.mbs * ceil(spec.vocab / s.tp) * LOGITS_BYTES) * n_head
    return StageActivations(
        blocks_bytes=0.0 if s.offload_activations else kept,
        recompute_working_bytes=layer.working_bytes(s.recompute) if s.recompute is not Recompute.NONE else 0.0,
        embedding_bytes=embedding, head_bytes=head,
        host_checkpoint_bytes=kept if s.offload_activations else 0.0,
        scores_bytes=scores, micro_batches_in_flight=n_layers)
