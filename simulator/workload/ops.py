"""The kernels one transformer block (and the embedding and output head) runs, with FLOPs and bytes.

Each operation of the block is a short list of kernels (a GEMM or a memory-bound kernel, and the
backward of each: :mod:`simulator.workload.kernels`). ``T = b·s`` tokens per micro-batch,
``e`` bytes per element (the dtype policy's activation size), ``t`` tensor-parallel ranks
(Megatron layout: QKV and MLP-in split by columns, output projection and MLP-out by rows, heads
split, logits split by vocabulary). Forward, per block, per device:

    norm         2 kernels, each reads and writes T·h               (÷t with sequence parallel)
    qkv          GEMM  T × h → (q + 2·kv)/t
    attention    flash: one fused kernel, 4·b·s²·q/t FLOPs, reads Q, K, V and writes O
                 unfused: batched GEMMs QKᵀ and A·V over b·a/t heads, softmax reads+writes b·a/t·s²
    out_proj     GEMM  T × q/t → h
    mlp          GELU: GEMM h → f/t, GEMM f/t → h;  SwiGLU: GEMM h → 2f/t (gate and up), GEMM f/t → h
    elementwise  residual adds (read 2, write 1 of T·h, twice), activation (GELU read/write T·f/t,
                 SwiGLU read 2 write 1, or two kernels in eager torch: :func:`activation_kernels`), rotary on
                 Q and K (read+write T·(q + kv)/t)

Dropout (a model with ``dropout > 0``) and the eager-attention softmax depend on the framework's
kernel fusion (:class:`~simulator.workload.kinds.KernelFusion`), with ``n = 1`` mask byte per element:

    residual dropouts   eager: a dropout kernel per residual (reads T·h, writes T·h and the mask);
                        megatron/compiled: fused into the residual add, which also writes the mask
    softmax (eager)     eager: scale, mask, softmax as three read+write passes; megatron/compiled: one
    attention dropout   eager attention only (flash fuses it): eager/megatron a kernel (reads and
                        writes b·a/t·s², writes the mask); compiled: fused, writes the mask
    embedding dropout   first stage: eager/megatron a kernel; compiled: fused into the lookup
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from simulator.attention_efficiency import AttentionBackend, AttentionCall, AttentionPass
from simulator.checks import positive_int
from simulator.errors import SpecError
from simulator.gemm_alignment import padded_vocab
from simulator.workload.context import NO_CONTEXT_SPLIT, ContextKind, ContextSplit
from simulator.workload.eager_dispatch import block_dispatches, edge_dispatches, with_dispatches
from simulator.workload.eager_rates import EagerKernel, at_eager_rate, norm_kernel
from simulator.workload.kernels import (MEMORY_BWD_FACTOR, Kernel, OpKind, OpWork, Scope, backward,  # noqa: F401
                                        gemm, memory, op_work)
from simulator.workload.kinds import ActivationKind, BiasKind, KernelFusion, PositionKind
from simulator.workload.ring_steps import ring_step_kernels, with_torch_ring

if TYPE_CHECKING:
    from simulator.workload.transformer import TransformerSpec

CAUSAL_ATTENTION = True
"""Whether the fused attention core runs with a causal mask: every :class:`TransformerSpec` here is a
decoder-only language model (GPT, Llama, Mixtral, DeepSeek), whose self-attention is causal. Its FLOPs are
still counted over the full ``s × s`` (module docstring); :mod:`simulator.attention_efficiency` halves them
for the kernel's time."""

DROPOUT_MASK_BYTES = 1
"""Bytes per element of a dropout mask: ATen ``native_dropout`` returns a bool mask."""


def _g(name: str, m: float, n: float, k: float, e: int, batch: float = 1) -> tuple[Kernel, tuple]:
    return gemm(name, m, n, k, e, batch), (m, n, k, e, batch)


def _check(spec: TransformerSpec, micro_batch: int, seq: int, tp: int) -> None:
    for name, value in (("micro_batch", micro_batch), ("seq", seq), ("tp", tp)):
        positive_int(name, value)
    if spec.heads % tp or spec.n_kv_heads % tp and tp % spec.n_kv_heads:
        raise SpecError("tp", f"{tp} tensor-parallel ranks do not divide {spec.heads} heads / "
                        f"{spec.n_kv_heads} KV heads of {spec.name}")


def _dropout(name: str, nbytes: float, elems: float, fused: bool) -> list[tuple[Kernel, None]]:
    """A dropout over ``elems`` elements of ``nbytes`` bytes: its own kernel (read, write, mask), or
    nothing but the mask write when fused into the neighbouring kernel (returned as a mask kernel)."""
    if fused:
        return [(memory(name + ".mask", elems * DROPOUT_MASK_BYTES), None)]
    return [(memory(name, 2 * nbytes + elems * DROPOUT_MASK_BYTES), None)]


def _local_tokens(s: int, context: ContextSplit) -> int:
    """Tokens of a sample on one context-parallel rank, ``s/cp`` (the layout checks divisibility)."""
    if s % context.chunks():
        raise SpecError("cp", f"sequence {s} does not split into {context.chunks()} equal chunks")
    return s // context.degree


def _flash_core(spec: TransformerSpec, b: int, s: int, tp: int, e: int, kv_t: float,
                context: ContextSplit, backend: AttentionBackend) -> tuple[Kernel, ...]:
    """The fused attention core of one rank. Without cp: ``4·b·s²·q/t`` FLOPs, reads Q, K, V, writes O.
    Context-parallel (:mod:`simulator.workload.context`): ``1/cp`` of those FLOPs (× the causal imbalance
    of an unbalanced ring); a ring rank reads its ``s/cp`` queries and every KV block once (one kernel call
    per KV block of ``s/cp``: its causal diagonal block and the off-diagonal steps' non-causal kernel,
    :func:`simulator.workload.ring_steps.ring_step_kernels`), an all-to-all rank the whole sequence for
    ``heads/cp`` heads. ``backend``: the kernel the framework runs
    (:class:`~simulator.attention_efficiency.AttentionBackend`)."""
    q, cp = spec.q_dim, context.degree
    flops = 4.0 * b * s * s * q / tp
    ring = cp > 1 and context.kind is ContextKind.RING
    call = AttentionCall(backend=backend, direction=AttentionPass.FWD, seq_len=s // cp if ring else s,
                         head_dim=spec.d_head, causal=CAUSAL_ATTENTION)
    if cp == 1:
        return (Kernel(name="flash_attn", flops=flops, bytes=float(e * b * s * (2 * q / tp + 2 * kv_t)), gemm=True,
                       attention=call),)
    if ring:
        nbytes = e * b * (s / cp * 2 * q / tp + s * 2 * kv_t)
    else:
        kv_c = spec.kv_dim / (tp * cp) if spec.n_kv_heads >= tp * cp else spec.d_head  # one KV head, replicated
        nbytes = e * b * s * (2 * q / (tp * cp) + 2 * kv_c)
    kernel = Kernel(name="flash_attn", flops=flops / cp * context.imbalance, bytes=float(nbytes), gemm=True,
                    attention=call)
    return ring_step_kernels(kernel, call, b, s, q / tp, kv_t, e, context) if ring else (kernel,)


def layer_work(spec: TransformerSpec, micro_batch: int, seq: int | None = None, tp: int = 1, *,
               flash_attention: bool = True, sequence_parallel: bool = False,
               fusion: KernelFusion = KernelFusion.EAGER, context: ContextSplit = NO_CONTEXT_SPLIT,
               attention_backend: AttentionBackend = AttentionBackend.FLASH_ATTENTION_2) -> list[OpWork]:
    """The operations of one transformer block on one tensor-parallel (and context-parallel) rank (a
    dense MLP; a MoE block is :func:`simulator.workload.moe_ops.moe_layer_work`); ``attention_backend``:
    the fused-attention kernel the framework runs."""
    s_full = spec.seq_len if seq is None else seq
    _check(spec, micro_batch, s_full, tp)
    s = _local_tokens(s_full, context)
    b, h, q, kv, f, d = micro_batch, spec.hidden, spec.q_dim, spec.kv_dim, spec.ffn_size, spec.d_head
    e, T = spec.dtype.activation_bytes, micro_batch * s
    kv_t = kv / tp if spec.n_kv_heads >= tp else kv  # KV heads replicated when fewer than ranks
    res = T * h * e / (tp if sequence_parallel else 1)
    swiglu = spec.activation is ActivationKind.SWIGLU
    if flash_attention:
        attention = [(k, None) for k in _flash_core(spec, b, s_full, tp, e, kv_t, context, attention_backend)]
    else:
        if context.degree > 1:
            raise SpecError("attention", "context parallelism runs the attention core as flash attention; "
                            "use attention flash")
        heads_t = spec.heads / tp
        scores = b * heads_t * s * s
        passes = 3 if fusion is KernelFusion.EAGER else 1  # scale, mask, softmax: separate or fused
        attention = [_g("scores", s, s, d, e, b * heads_t), (memory("softmax", passes * 2 * e * scores), None)]
        if spec.dropout > 0:
            attention += _dropout("attn_dropout", e * scores, scores, fusion is KernelFusion.COMPILED)
        attention.append(_g("attn_v", s, d, s, e, b * heads_t))
    rotary = 2 * T * (q / tp + kv_t) * e if spec.position is PositionKind.ROTARY else 0
    elementwise = [(memory("residual", 2 * 3 * res), None), *activation_kernels(T * f / tp, e, swiglu, fusion)]
    if spec.dropout > 0:  # after the attention output and after the MLP
        elementwise += at_eager_rate(_dropout("resid_dropout", 2 * res, 2 * res / e, fusion is not KernelFusion.EAGER),
                                     EagerKernel.DROPOUT, fusion)
    if rotary:
        elementwise.append((memory("rotary", rotary), None))
    mlp_in = _g("mlp_in", T, (2 if swiglu else 1) * f / tp, h, e)
    ops = [
        op_work(OpKind.NORM, Scope.LAYER, at_eager_rate([(memory("norm", 2 * 2 * res), None)], norm_kernel(spec.norm),
                                                    fusion)),
        op_work(OpKind.QKV, Scope.LAYER, [_g("qkv", T, q / tp + 2 * kv_t, h, e)]),
        with_torch_ring(op_work(OpKind.ATTENTION, Scope.LAYER, attention), context, T * q / tp, T * kv_t, e, fusion),
        op_work(OpKind.OUT_PROJ, Scope.LAYER, [_g("out_proj", T, h, q / tp, e)]),
        op_work(OpKind.MLP, Scope.LAYER, [mlp_in, _g("mlp_out", T, h, f / tp, e)]),
        op_work(OpKind.ELEMENTWISE, Scope.LAYER, elementwise),
    ]
    if fusion is not KernelFusion.EAGER:
        return ops
    return with_dispatches(_bias_grads(ops, spec, e, res / e), block_dispatches(spec) if flash_attention else {})


def activation_kernels(elems: float, e: int, swiglu: bool, fusion: KernelFusion) -> list[tuple[Kernel, None]]:
    """The MLP activation over ``elems`` hidden elements (``T·f/t``), ``e`` bytes each: GELU one kernel reading
    and writing them; SwiGLU one kernel reading gate and up and writing their product where the framework fuses
    it (Megatron-LM's ``bias_swiglu``, torch.compile), and two in eager torch, ``F.silu(gate) * up``: the SiLU
    (read and write ``elems``) then the multiply (read 2, write 1) — 5·elems·e bytes. Measured on the H200:
    eager SwiGLU over 2^28 bf16 elements takes 638 µs, 4208 GB/s on those 5 passes, the speed of a plain
    copy (4196 GB/s) [src: own-h200-2026-11-24]. Every name starts with ``activation`` (MoE layers rescale
    them by name, :func:`simulator.workload.moe_ops.with_experts`)."""
    if not swiglu:  # F.gelu at its measured fraction of a copy in eager torch (simulator.workload.eager_rates)
        return at_eager_rate([(memory("activation", 2 * elems * e), None)], EagerKernel.GELU, fusion)
    if fusion is KernelFusion.EAGER:
        return [(memory("activation.silu", 2 * elems * e), None), (memory("activation.mul", 3 * elems * e), None)]
    return [(memory("activation", 3 * elems * e), None)]


def biased_ops(bias: BiasKind) -> tuple[OpKind, ...]:
    """The operations whose linear layers carry a bias vector under ``bias``."""
    return {BiasKind.NONE: (), BiasKind.QKV: (OpKind.QKV,),
            BiasKind.ALL: (OpKind.QKV, OpKind.OUT_PROJ, OpKind.MLP)}[bias]


def _bias_grads(ops: list[OpWork], spec: TransformerSpec, e: int, row_elems: float) -> list[OpWork]:
    """Eager autograd's bias gradients: a linear's ``grad_bias = grad_output.sum(0)`` is a reduction kernel of
    its own, reading the output gradient once (``e`` bytes per element; the bias written is negligible) — 96
    ``sum`` reductions per step for GPT-3 1.3B's 24 × 4 biased linears in the H200 trace [src:
    own-h200-2026-11-24]. Column-parallel outputs (Q/K/V, MLP in) are this rank's ``m × n/t``; row-parallel
    ones (output projection, MLP out) the block's ``T × h`` (÷t with sequence parallelism), ``row_elems``. They
    join the element-wise operation's backward (memory-bound rows). Megatron's and torch.compile's fusions
    are left as they were (not measured here)."""
    biased = biased_ops(spec.bias)
    grads = tuple(memory(f"{k.name}.bias_grad", e * (row_elems if k.name in ("out_proj", "mlp_out")
                                                    else k.shape.m * k.shape.n))
                  for w in ops if w.op in biased for k in w.fwd if k.gemm and k.shape is not None)
    # memory-bound kernels: reported with the block's element-wise operations
    return [replace(w, bwd=w.bwd + grads) if w.op is OpKind.ELEMENTWISE else w for w in ops]


def edge_work(spec: TransformerSpec, micro_batch: int, seq: int | None = None, tp: int = 1, *,
              sequence_parallel: bool = False, fusion: KernelFusion = KernelFusion.EAGER,
              context: ContextSplit = NO_CONTEXT_SPLIT, vocab_multiple: int = 1) -> list[OpWork]:
    """Embedding (first stage) and final norm, logits and loss (last stage), per tensor-parallel rank
    (on the ``s/cp`` tokens of a context-parallel rank); the logits and loss over the vocabulary padded to
    ``vocab_multiple`` (:meth:`simulator.strategy.framework.Framework.vocab_multiple`). The loss is one pass
    over the logits here; :func:`simulator.workload.loss.with_loss` replaces it by the framework's kernels."""
    s = spec.seq_len if seq is None else seq
    _check(spec, micro_batch, s, tp)
    s = _local_tokens(s, context)
    h, v, e, T = spec.hidden, padded_vocab(spec.vocab, vocab_multiple), spec.dtype.activation_bytes, micro_batch * s
    res = T * h * e / (tp if sequence_parallel else 1)
    lookups = 2 if spec.position is PositionKind.LEARNED else 1
    embedding = [(memory("embedding", (lookups + 1) * T * h * e), None)]
    if spec.dropout > 0:
        embedding += _dropout("embed_dropout", T * h * e, T * h, fusion is KernelFusion.COMPILED)
    ops = [
        op_work(OpKind.EMBEDDING, Scope.FIRST, embedding),
        op_work(OpKind.NORM, Scope.LAST, at_eager_rate([(memory("final_norm", 2 * res), None)], norm_kernel(spec.norm),
                                                   fusion)),
        op_work(OpKind.LOGITS, Scope.LAST, [_g("logits", T, v / tp, h, e)]),
        op_work(OpKind.LOSS, Scope.LAST, [(memory("cross_entropy", 2 * T * v / tp * e), None)]),
    ]
    return with_dispatches(ops, edge_dispatches(spec)) if fusion is KernelFusion.EAGER else ops
