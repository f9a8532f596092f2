"""The kernels of Multi-head Latent Attention on one tensor-parallel rank, in place of a dense block's
Q/K/V projection, attention core and output projection (:func:`simulator.workload.ops.layer_work`).

``T = b·s`` tokens, ``n_t = n/t`` heads on the rank, ``e`` bytes per element (shapes:
:mod:`simulator.workload.mla`). Forward:

    qkv        GEMMs of the projections (the q / q-up and kv-up by columns ÷ t, the down-projections
               replicated), RMSNorm of each latent (reads and writes T·d_c, T·d_q)
    attention  flash: one kernel of ``2·b·s²·n_t·(d_qk + d_v)`` FLOPs reading Q, K (d_qk per head) and
               V and writing O (d_v per head); eager: batched GEMMs QKᵀ (k = d_qk) and A·V (n = d_v)
               with the dense block's softmax (and dropout) kernels, which depend on heads and s only
    out_proj   GEMM T × n_t·d_v → h
    rotary     on the rotary part of each query head and on the shared rotary key: reads and writes
               T·(n_t + 1)·d_rope

Assembling each head's key from its non-rotary part and the shared rotary key is a copy we do not
count (an underestimate of T·n_t·d_qk elements moved per block).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from simulator.workload.kernels import Kernel, OpKind, OpWork, Scope, gemm, memory, op_work

if TYPE_CHECKING:
    from simulator.workload.transformer import TransformerSpec

__all__ = ["mla_layer_work"]

_SPLIT = ("q", "q_up", "kv_up")
"""Projections split by heads over the tensor-parallel ranks; the others are replicated."""


def _items(work: OpWork, e: int) -> list[tuple[Kernel, tuple | None]]:
    """An operation's forward kernels with the shapes :func:`simulator.workload.kernels.op_work` needs again."""
    return [(k, (k.shape.m, k.shape.n, k.shape.k, e, k.shape.batch) if k.shape is not None else None)
            for k in work.fwd]


def _g(name: str, m: float, n: float, k: float, e: int, batch: float = 1) -> tuple[Kernel, tuple]:
    return gemm(name, m, n, k, e, batch), (m, n, k, e, batch)


def mla_layer_work(spec: TransformerSpec, dense: list[OpWork], micro_batch: int, seq: int, tp: int) -> list[OpWork]:
    """``dense`` (one block's operations from :func:`layer_work`) with MLA's attention (module docstring)."""
    mla, e, h, n_t = spec.mla, spec.dtype.activation_bytes, spec.hidden, spec.heads / tp
    T, s, b = micro_batch * seq, seq, micro_batch
    qkv = [_g(f"mla_{name}", T, o / tp if name in _SPLIT else o, i, e)
           for name, (i, o) in mla.projections(h, spec.heads).items() if name != "out"]
    qkv += [(memory("latent_norm", 2 * T * mla.norm_params() * e), None)]
    out = []
    for work in dense:
        if work.op is OpKind.QKV:
            out.append(op_work(OpKind.QKV, Scope.LAYER, qkv))
        elif work.op is OpKind.ATTENTION:
            out.append(op_work(OpKind.ATTENTION, Scope.LAYER, _attention(work, mla, b, s, n_t, e)))
        elif work.op is OpKind.OUT_PROJ:
            out.append(op_work(OpKind.OUT_PROJ, Scope.LAYER, [_g("out_proj", T, h, n_t * mla.v_head_dim, e)]))
        elif work.op is OpKind.ELEMENTWISE:
            rotary = memory("rotary", 2 * T * (n_t + 1) * mla.qk_rope_head_dim * e)
            out.append(op_work(OpKind.ELEMENTWISE, Scope.LAYER, [(rotary if k.name == "rotary" else k, shape)
                                                             for k, shape in _items(work, e)]))
        else:
            out.append(work)
    return out


def _attention(work: OpWork, mla, b: int, s: int, n_t: float, e: int) -> list:
    dqk, dv = mla.qk_head_dim, mla.v_head_dim
    items = []
    for k, shape in _items(work, e):
        if k.name == "flash_attn":
            k = replace(k, flops=2.0 * b * s * s * n_t * (dqk + dv), bytes=float(e * b * s * n_t * (2 * dqk + 2 * dv)))
        elif k.name == "scores":
            k, shape = _g("scores", s, s, dqk, e, b * n_t)
        elif k.name == "attn_v":
            k, shape = _g("attn_v", s, dv, s, e, b * n_t)
        items.append((k, shape))
    return items
