"""Matmul FLOPs of a transformer: per token, per layer, forward, backward and recomputation.

Counting convention: a multiply-add is 2 FLOPs; only matmuls count (norms, softmax and other
element-wise work are memory-bound and timed by bytes, see :mod:`simulator.workload.ops`).
Forward FLOPs per token of one block at sequence length ``s``::

    QKV projections       2·h·(q + 2·kv)
    scores QKᵀ and A·V    4·s·q          (full s×s, no causal halving, as Narayanan et al. count)
    output projection     2·q·h
    MLP                   GELU 4·h·f, SwiGLU 6·h·f
and once per token the logits, 2·h·V. A mixture-of-experts layer (:mod:`simulator.workload.moe`)
replaces the MLP by the ``k`` experts a token visits and the shared experts,
``2·mats·h·(k·f_e + n_s·f_s)``, plus the router ``2·h·E`` (and Qwen's shared-expert gate, ``2·h``):
the active parameters, as for a dense block (Fedus et al. 2022 count FLOPs per token this way
[src: fedus-2022]). Backward is 2× forward (gradient w.r.t. the input and
w.r.t. the weights, each a matmul of the forward's size). Recomputation adds forward work:
selective recomputes the attention core (4·s·q per token per block), full recomputes whole blocks,
selective-op (torchtitan's op-level policy) the matmuls of :mod:`simulator.workload.op_sac`.

For GPT shapes (MHA, f = 4h) a block is 24h² + 4sh per token, so a training iteration of B
sequences costs 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) without recomputation and
96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with full recomputation (Narayanan et al. SC'21,
Korthikanti et al. 2022 App. A) — :func:`narayanan_flops_per_iteration` is that closed form, used
as a cross-check in the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.workload.kinds import ActivationKind
from simulator.workload.op_sac import op_sac_recompute_flops_per_token

if TYPE_CHECKING:
    from simulator.workload.transformer import TransformerSpec


class Recompute(Kind):
    """Activation recomputation (checkpointing) policy of the transformer blocks."""

    NONE = "none"
    """Keep every activation backward needs; no extra forward work."""
    SELECTIVE = "selective"
    """Recompute the attention core (QKᵀ, softmax, A·V) in backward (Korthikanti et al. 2022)."""
    FULL = "full"
    """Keep only each block's input; rerun the whole block's forward in backward."""
    SELECTIVE_OP = "selective-op"
    """torchtitan's op-level selective checkpointing (``selective_ac_option = "op"``): keep the block
    input and the outputs of every other matmul and of the fused attention kernel, recompute the
    rest in backward (:mod:`simulator.workload.op_sac`)."""


def layer_fwd_flops_per_token(spec: TransformerSpec, seq: int | None = None, *,
                              moe_layer: bool = False) -> dict[str, float]:
    """Forward matmul FLOPs of one block per token, by operation (keys as in the module docstring);
    ``moe_layer``: a mixture-of-experts block of ``spec`` (its MLP is the experts, plus a ``router`` key)."""
    s = spec.seq_len if seq is None else seq
    h, q, kv, f = spec.hidden, spec.q_dim, spec.kv_dim, spec.ffn_size
    mats = 3 if spec.activation is ActivationKind.SWIGLU else 2
    out = {
        "qkv": 2.0 * h * (q + 2 * kv),
        "attention": 4.0 * s * q,
        "out_proj": 2.0 * q * h,
        "mlp": 2.0 * mats * h * f,
    }
    if spec.mla is not None:  # Multi-head Latent Attention: its projections and head widths
        out.update(spec.mla.fwd_flops_per_token(h, spec.heads, s))
    moe = spec.moe
    if moe_layer and moe is not None:
        out["mlp"] = 2.0 * mats * h * (moe.top_k * moe.expert_ffn + moe.shared_width)
        out["router"] = 2.0 * h * (moe.experts + (1 if moe.shared_gate else 0))
    return out


def layer_fwd_flops(spec: TransformerSpec, seq: int | None = None, *, moe_layer: bool = False) -> float:
    """Forward matmul FLOPs of one block per token."""
    return sum(layer_fwd_flops_per_token(spec, seq, moe_layer=moe_layer).values())


def blocks_fwd_flops(spec: TransformerSpec, seq: int | None = None) -> float:
    """Forward matmul FLOPs of all blocks per token: dense and MoE blocks each counted as what they are."""
    if spec.moe is None:
        return spec.layers * layer_fwd_flops(spec, seq)
    moe_layers = spec.moe.moe_layers(spec.layers)
    return ((spec.layers - moe_layers) * layer_fwd_flops(spec, seq)
            + moe_layers * layer_fwd_flops(spec, seq, moe_layer=True))


def logits_fwd_flops(spec: TransformerSpec) -> float:
    """Forward FLOPs of the output projection per token, 2·h·V."""
    return 2.0 * spec.hidden * spec.vocab


def fwd_flops_per_token(spec: TransformerSpec, seq: int | None = None) -> float:
    """Forward FLOPs per token of the whole model: ``l · block + logits``."""
    return blocks_fwd_flops(spec, seq) + logits_fwd_flops(spec)


def recompute_flops_per_token(spec: TransformerSpec, recompute: Recompute, seq: int | None = None) -> float:
    """Extra forward FLOPs per token that recomputation adds (all blocks)."""
    if recompute is Recompute.NONE:
        return 0.0
    if recompute is Recompute.SELECTIVE:
        return spec.layers * layer_fwd_flops_per_token(spec, seq)["attention"]
    if recompute is Recompute.FULL:
        return blocks_fwd_flops(spec, seq)
    if recompute is Recompute.SELECTIVE_OP:
        return spec.layers * op_sac_recompute_flops_per_token(spec)
    raise SpecError("recompute", f"unknown policy {recompute!r}; known: {', '.join(r.value for r in Recompute)}")


def train_flops_per_token(spec: TransformerSpec, recompute: Recompute = Recompute.NONE,
                          seq: int | None = None) -> float:
    """FLOPs per token of one training step: 3 × forward (fwd + 2× bwd) + recomputation."""
    return 3.0 * fwd_flops_per_token(spec, seq) + recompute_flops_per_token(spec, recompute, seq)


def model_flops_per_token(spec: TransformerSpec, seq: int | None = None) -> float:
    """Model FLOPs per token (no recomputation): the numerator of MFU (Chowdhery et al. 2022)."""
    return train_flops_per_token(spec, Recompute.NONE, seq)


def narayanan_flops_per_iteration(spec: TransformerSpec, batch: int, full_recompute: bool) -> float:
    """Narayanan et al. SC'21 closed form for GPT shapes (MHA, f = 4h), B = ``batch`` sequences.

    72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) without recomputation, 96·…·(… + V/(16·l·h)) with full.
    Only exact for GPT-shaped specs; kept as an independent cross-check of the per-op count.
    """
    s, l, h, v = spec.seq_len, spec.layers, spec.hidden, spec.vocab
    if full_recompute:
        return 96.0 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72.0 * batch * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
