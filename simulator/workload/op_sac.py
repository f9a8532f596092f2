"""torchtitan's op-level selective activation checkpointing (``Recompute.SELECTIVE_OP``).

torchtitan wraps each Llama block in a non-reentrant ``checkpoint`` whose selective policy marks
``MUST_SAVE`` the outputs of the ops in its save list — ``aten.mm``, the fused SDPA kernels
(flash, memory-efficient) and ``_c10d_functional.reduce_scatter_tensor`` — except every second
``mm`` of the block (a per-block counter, odd counts saved), and ``PREFER_RECOMPUTE`` for everything
else (``torchtitan/parallelisms/parallelize_llama.py``, ``_save_list`` lines 197-203 and
``_custom_policy`` lines 230-246 at commit 004b3148a92b565ef0ce7a7bcc61e0159c7ec930) [src: torchtitan-op-sac].

Its Llama block runs the matmuls in this order (``Attention.forward``: ``wq``, ``wk``, ``wv``, then
SDPA, then ``wo``; ``FeedForward.forward``: ``w2(silu(w1(x)) * w3(x))``), so the counter saves

    mm 1 wq (q/t per token)   mm 3 wv (kv/t)   mm 5 w1 (f/t)   mm 7 w2 (SwiGLU; h, a row-parallel
                                                                 partial sum, unsplit under tp)
    recomputed: mm 2 wk, mm 4 wo, mm 6 w3 (SwiGLU) — a GELU MLP (fc1 = mm 5 saved, fc2 = mm 6) has
    nothing left to recompute in its MLP matmuls: fc2's output feeds only the residual add, and the
    checkpoint's early stop ends the recomputation once fc2's saved input exists

plus the SDPA kernel's output (q/t) and log-sum-exp (fp32, a/t per token), the block input the
checkpoint holds (h, /t with sequence parallelism) and, under sequence parallelism, the two
reduce-scatter outputs (h/t each). Everything else — both norms, rotary, the residual adds, the
MLP activation — is recomputed in backward. Per token and block, the recomputed forward work is

    GEMMs   wk 2·h·kv, wo 2·q·h, and w3 2·h·f with SwiGLU          (÷ t on a tensor-parallel rank)
    memory  both norms, the residual adds, the MLP activation, rotary (their forward kernels)

The tensor-parallel forward collectives the recompute re-issues (sequence parallelism's all-gathers
are not in the save list) are not charged (not modelled yet). The policy is defined for dense blocks
with fused (flash) attention, as torchtitan runs it: :func:`op_sac_problem` refuses the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.workload.kinds import ActivationKind
from simulator.workload.ops import Kernel, OpKind, OpWork, Scope, gemm

if TYPE_CHECKING:
    from simulator.workload.transformer import TransformerSpec

__all__ = ["op_sac_kernels", "op_sac_problem", "op_sac_recompute", "op_sac_recompute_flops_per_token"]

_RECOMPUTED_WHOLE = (OpKind.NORM, OpKind.OUT_PROJ, OpKind.ELEMENTWISE)
"""Block operations whose whole forward the op-level policy reruns (no output in the save list)."""


def op_sac_problem(spec, flash_attention: bool) -> str | None:
    """Why op-level selective checkpointing cannot be modelled for ``spec`` (None: it can)."""
    if not flash_attention:
        return "op-level selective recompute saves the fused attention kernel's output; use attention flash"
    if getattr(spec, "moe", None) is not None or getattr(spec, "mla", None) is not None:
        return (f"op-level selective recompute is modelled for dense blocks with Q, K, V projections "
                f"(torchtitan's Llama), not {spec.name}'s experts or latent attention; use selective or full")
    if not hasattr(spec, "ffn_size"):
        return "op-level selective recompute applies to transformer blocks; use full or none"
    return None


def op_sac_recompute_flops_per_token(spec: TransformerSpec) -> float:
    """Matmul FLOPs per token one block's recomputation adds (module docstring): 2·h·kv + 2·q·h, plus
    2·h·f for SwiGLU's w3."""
    h = spec.hidden
    w3 = 2.0 * h * spec.ffn_size if spec.activation is ActivationKind.SWIGLU else 0.0
    return 2.0 * h * spec.kv_dim + 2.0 * spec.q_dim * h + w3


def op_sac_kernels(work: OpWork, spec: TransformerSpec, tokens: float, tp: int) -> tuple[Kernel, ...]:
    """The forward kernels of ``work`` (one block operation on ``tokens`` tokens per rank, b·s/cp, and
    ``tp`` ranks) that backward repeats: the whole norm, output-projection and element-wise operations,
    the K slice of the QKV GEMM and, with SwiGLU, the up (w3) half of the MLP's input GEMM; () for the
    rest (the attention kernel's outputs are saved)."""
    if work.scope is not Scope.LAYER:
        return ()
    if work.op in _RECOMPUTED_WHOLE:
        return work.fwd
    e, h = spec.dtype.activation_bytes, spec.hidden
    if work.op is OpKind.QKV:
        kv_t = spec.kv_dim / tp if spec.n_kv_heads >= tp else spec.kv_dim
        return (gemm("qkv.k", tokens, kv_t, h, e),)
    if work.op is OpKind.MLP and spec.activation is ActivationKind.SWIGLU:
        return (gemm("mlp_in.w3", tokens, spec.ffn_size / tp, h, e),)
    return ()


def op_sac_recompute(works: list[OpWork], spec: TransformerSpec, tokens: float, tp: int) -> tuple[tuple[Kernel, ...], ...]:
    """A block's recompute phase (:class:`~simulator.workload.protocol.WorkUnit`): :func:`op_sac_kernels`
    of each of ``works`` that repeats any."""
    return tuple(k for k in (op_sac_kernels(w, spec, tokens, tp) for w in works) if k)
