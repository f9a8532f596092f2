"""A context-parallel ring's attention as its steps run: one kernel per KV block, and torch's merges.

A ring rank runs its attention core as cp kernel calls, one per KV block it holds in turn (torch's
``_templated_ring_attention``, Transformer Engine's ``p2p``). With the balanced head-tail split (rank r holds
chunks r and 2cp − 1 − r of 2·cp, :mod:`simulator.workload.context`) and a causal mask, torch's loop does
[src: torch-context-parallel]:

- step 0, its own block: one **causal** kernel, ``s/cp`` queries × ``s/cp`` keys;
- steps 1 … cp − 1: one **non-causal** kernel on half a block — all ``s/cp`` queries against the first half of
  the visiting keys (``i ≤ rank``), or the second half of the queries against all visiting keys (``i > rank``):
  ``s/cp × s/(2cp)`` either way.

So a rank's work is ``½ + (cp − 1)·½ = cp/2`` block units (the balanced mean), but only 1/cp of it runs at
the causal kernel's rate; the rest runs at the non-causal rate, on kernels whose shorter side is
``s/(2cp)`` (the published curves are square; a kernel reads them at its shorter side, an assumption:
:data:`SHORTER_SIDE`). A contiguous (unbalanced) causal ring's slowest rank, the last, runs the causal
diagonal and cp − 1 full non-causal blocks of ``s/cp``. trainplan counts the rank's attention as twice its
causal work (``4·b·s²·q/t ÷ cp`` × the imbalance, :mod:`simulator.workload.ops`, halved for a causal kernel's
time); the diagonal kernel keeps one block's count ``F0 = 4·b·(s/cp)²·q/t`` (causal: ½·F0 computed) and the
off-diagonal kernel the rest, of which it computes ``work_fraction`` ½
(:class:`~simulator.attention_efficiency.AttentionCall`) — balanced ``(cp − 1)·F0/2``, unbalanced
``(cp − 1)·F0``, the work of the steps above, and the rank's total unchanged.

**torch's runtime** (:attr:`~simulator.workload.context.RingRuntime.TORCH`) adds torch operators around the
kernels (torch ``_attention.py``: ``_SDPAMerger`` with ``convert_to_f32`` True by default, and
``_templated_ring_attention_backward`` with ``accum_dtype`` float32) [src: torch-context-parallel]. Per
element of the rank's output ``O = b·(s/cp)·q/t`` and of its K or V ``KV = b·(s/cp)·kv/t``, ``e`` bytes
per activation, fp32 4 B; the slowest rank is the last, which takes the whole-output path at every step:

    forward, each of the cp − 1 merges ``out − sigmoid(lse_i − lse)·(out − out_i)`` into the fp32 output
      eager     out_i.to(fp32) e+4, (out − out_i) 12, · sigmoid 8, out − … 12          = 36 + e per O
                + step 0's upcast e+4 and the final cast 4+e per O (once)
                + ``torch.cat`` of K and V for the hand-on at each of the cp − 1 sends    2e per 2·KV
      compiled  one fused pass: read the running output 4, read out_i e, write 4      = 8 + e per O
                + one ``torch.cat`` of K and V (the all-gather's, the default rotation)  2e per 2·KV
    backward, each of the cp steps sums the kernel's bf16 dQ, dK, dV into fp32 buffers
      eager     dq += dq_i, dk += dk_i, dv += dv_i  8 + e per (O + 2·KV); ``torch.cat`` of dK, dV to send
                8 per 2·KV; cp − 1 K/V cats 2e per 2·KV; fp32 zeros 4 per (O + 2·KV) and the final casts
                4 + e per (O + 2·KV) once
      compiled  the sums 8 + e per (O + 2·KV) (written into the send buffer), one K/V cat 2e per 2·KV, the
                final dK/dV cast 4 + e per 2·KV (after the last receive; dQ's is fused into its last sum)

The log-sum-exp terms (``b·(s/cp)·heads/t`` fp32, 1/d of the output) are left out (under 1 % of a merge).
Whether torch.compile traces the ring: torchtitan compiles each block with ``fullgraph=True``
(``apply_compile`` [src: torchtitan-apply-compile]), which refuses graph breaks, and its published table runs
CP with torch.compile, so the SDPA call and its ring ran inside the compiled graph.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.attention_efficiency import AttentionCall
from simulator.workload.context import ContextKind, ContextSplit, RingRuntime
from simulator.workload.kernels import Kernel, OpWork, memory
from simulator.workload.kinds import KernelFusion

__all__ = ["OFF_DIAGONAL_FRACTION", "SHORTER_SIDE", "ring_step_kernels", "torch_ring_bytes", "with_torch_ring"]

FP32 = 4
"""Bytes of the fp32 buffers torch's ring merges and sums into."""

OFF_DIAGONAL_FRACTION = 0.5
"""The off-diagonal kernel's computed work over its share of trainplan's count, which counts causal work twice
(module docstring): ½, balanced or not."""

SHORTER_SIDE = True
"""(assumption) A non-square ring-step kernel (``s/cp`` × ``s/(2cp)``) reads the published square-kernel curve at
its shorter side: the curves are flat beyond 8-16k tokens, so it matters only for short local blocks."""


def ring_step_kernels(kernel: Kernel, call: AttentionCall, b: int, s: int, q_t: float, kv_t: float, e: int,
                      context: ContextSplit) -> tuple[Kernel, ...]:
    """The rank's ring attention ``kernel`` (all its FLOPs on one causal call) as its step kernels: the causal
    diagonal block and the off-diagonal steps as one non-causal kernel (module docstring). Unchanged when the
    mask is not causal (every step a full non-causal block already)."""
    cp = context.degree
    if cp == 1 or not call.causal:
        return (kernel,)
    local = s // cp
    diag_flops = 4.0 * b * local * local * q_t
    diag_bytes = e * b * local * (2 * q_t + 2 * kv_t)
    side = local // 2 if context.balanced else local
    off = replace(call, causal=False, seq_len=side if SHORTER_SIDE else local, work_fraction=OFF_DIAGONAL_FRACTION)
    return (replace(kernel, flops=diag_flops, bytes=float(diag_bytes)),
            Kernel(name="flash_attn.ring_steps", flops=kernel.flops - diag_flops, bytes=kernel.bytes - diag_bytes,
                   gemm=True, attention=off))


def torch_ring_bytes(out_elems: float, kv_elems: float, cp: int, e: int, fusion: KernelFusion) -> tuple[float, float]:
    """(forward, backward) bytes of torch's ring operators on the slowest rank (module docstring's table):
    ``out_elems`` the rank's output elements, ``kv_elems`` its K (or V) elements."""
    o, kv2 = out_elems, 2 * kv_elems
    if fusion is KernelFusion.EAGER:
        fwd = (cp - 1) * (36 + e) * o + ((e + FP32) + (FP32 + e)) * o + (cp - 1) * 2 * e * kv2
        bwd = (cp * ((8 + e) * (o + kv2) + 8 * kv2) + (cp - 1) * 2 * e * kv2
               + (FP32 + (FP32 + e)) * (o + kv2))
        return float(fwd), float(bwd)
    fwd = (cp - 1) * (8 + e) * o + 2 * e * kv2
    bwd = cp * (8 + e) * (o + kv2) + 2 * e * kv2 + (FP32 + e) * kv2
    return float(fwd), float(bwd)


def with_torch_ring(work: OpWork, context: ContextSplit, out_elems: float, kv_elems: float, e: int,
                    fusion: KernelFusion) -> OpWork:
    """The attention operation ``work`` with torch's merges (forward) and fp32 gradient sums (backward) as one
    memory-bound kernel each, when torch runs the ring (:attr:`RingRuntime.TORCH`, cp > 1); else ``work``."""
    if context.degree == 1 or context.kind is not ContextKind.RING or context.runtime is not RingRuntime.TORCH:
        return work
    fwd, bwd = torch_ring_bytes(out_elems, kv_elems, context.degree, e, fusion)
    return replace(work, fwd=work.fwd + (memory("ring_merge", fwd),), bwd=work.bwd + (memory("ring_grad_sum", bwd),))
