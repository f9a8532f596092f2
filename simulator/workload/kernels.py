"""The vocabulary of the compute model: operations, kernels, and the backward kernels of a forward one.

A kernel is either a GEMM (m×k by k×n, ``2·m·n·k`` FLOPs, reading both inputs and writing the output once:
``e·(m·k + k·n + m·n)`` bytes, ``e`` bytes per element) or a memory-bound element-wise kernel (bytes only).
Backward of a GEMM is two GEMMs of the forward's FLOPs (input gradient m×n·n×k, weight gradient k×m·m×n);
backward of a memory kernel moves 1.5× its forward bytes (it reads the output gradient and the saved input
and writes the input gradient: three tensors where forward touched two). A GEMM kernel carries its
(m, n, k, batch) so the device can time it by shape (tile and wave quantisation, :mod:`simulator.gemm_shape`).

Which kernels a transformer block, the embedding and the head run: :mod:`simulator.workload.ops`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.attention_efficiency import AttentionCall, AttentionPass
from simulator.dtypes import Dtype
from simulator.enum_kind import Kind
from simulator.gemm_shape import GemmShape

MEMORY_BWD_FACTOR = 1.5
"""Backward bytes / forward bytes of an element-wise kernel (3 tensors touched instead of 2)."""


class OpKind(Kind):
    """Operations the compute table reports, in execution order."""

    EMBEDDING = "embedding"
    """Token (and learned position) embedding lookup; first pipeline stage."""
    NORM = "norm"
    """LayerNorm/RMSNorm (two per block; the final norm on the last stage)."""
    QKV = "qkv"
    """Q, K, V projections."""
    ATTENTION = "attention"
    """Attention core: scores QKᵀ, softmax, A·V (fused with flash attention)."""
    OUT_PROJ = "out_proj"
    """Attention output projection."""
    MLP = "mlp"
    """The MLP's matmuls (a MoE layer: the experts' grouped GEMMs and the shared experts)."""
    ROUTER = "router"
    """A MoE layer's router GEMM, top-k, and the token permutations around the experts
    (:mod:`simulator.workload.moe_ops`)."""
    ELEMENTWISE = "elementwise"
    """Residual adds, the MLP activation, rotary embedding."""
    CAST = "cast"
    """Dtype conversions a framework adds around the kernels: eager autocast's weight casts and norm-output
    casts, forward and backward (:mod:`simulator.workload.autocast`)."""
    LOGITS = "logits"
    """Output projection to the vocabulary; last pipeline stage."""
    LOSS = "loss"
    """Softmax cross-entropy over the logits; last pipeline stage."""


class Scope(Kind):
    """Where an operation runs: once per block, or once per model on the first or last stage."""

    LAYER = "layer"
    """In every transformer block."""
    FIRST = "first"
    """Once, before the first block (first pipeline stage)."""
    LAST = "last"
    """Once, after the last block (last pipeline stage)."""


@dataclass(frozen=True, kw_only=True)
class Kernel:
    """One kernel: its FLOPs (0 for memory-bound kernels), bytes moved, and whether it is a GEMM."""

    name: str
    flops: float
    bytes: float
    gemm: bool
    """True: timed on the matmul-efficiency curve; False: memory-bound, bytes only."""
    shape: GemmShape | None = None
    """A GEMM's (m, n, k, batch), for tile and wave quantisation (:mod:`simulator.gemm_shape`);
    None for memory kernels and for compute kernels known by FLOPs only (flash attention, a layer list)."""
    dtype: Dtype | None = None
    """The format a GEMM runs in when it is not the workload's compute format (FP8 linears,
    :mod:`simulator.workload.fp8`); None: the workload's."""
    attention: AttentionCall | None = None
    """A fused-attention kernel's backend, pass, sequence length, head dim and mask, for the device's
    published attention rates (:mod:`simulator.attention_efficiency`); None for every other kernel."""
    dispatches: int = 1
    """Operators the framework dispatches for the kernel (views, ``.grad`` accumulation; eager torch:
    :mod:`simulator.workload.eager_dispatch`): its host calls on an ``inline`` device."""
    copy_fraction: float = 1.0
    """A memory-bound kernel's rate over a plain copy's (the device's achievable HBM bandwidth): below 1 for
    eager torch's norms, GELU and dropout (:mod:`simulator.workload.eager_rates`); 1 otherwise."""
    block_scaled: bool = False
    """An FP8 GEMM on block-scaled operands (``te-blockwise``): on Hopper it takes longer than a per-tensor-scaled
    one (:mod:`simulator.workload.fp8_block_gemm`); False for every other kernel."""


def gemm(name: str, m: float, n: float, k: float, e: int, batch: float = 1, weight_grad: bool = False) -> Kernel:
    """A (batched) GEMM producing m×n from m×k and k×n (``weight_grad``: :attr:`GemmShape.weight_grad`)."""
    return Kernel(name=name, flops=2.0 * batch * m * n * k, bytes=float(e * batch * (m * k + k * n + m * n)),
                  gemm=True, shape=GemmShape(m, n, k, batch, weight_grad))


def memory(name: str, nbytes: float) -> Kernel:
    return Kernel(name=name, flops=0.0, bytes=float(nbytes), gemm=False)


def backward(kernel: Kernel, shape: tuple[float, float, float, int, float] | None) -> list[Kernel]:
    """Backward kernels of a forward kernel; ``shape`` (m, n, k, e, batch) for GEMMs."""
    if not kernel.gemm:
        return [memory(kernel.name + ".bwd", kernel.bytes * MEMORY_BWD_FACTOR)]
    if shape is None:  # a fused non-GEMM compute kernel (flash attention): 2× FLOPs, 2× bytes
        call = kernel.attention and replace(kernel.attention, direction=AttentionPass.BWD)
        return [Kernel(name=kernel.name + ".bwd", flops=2 * kernel.flops, bytes=2 * kernel.bytes, gemm=True,
                       attention=call)]
    m, n, k, e, batch = shape
    return [gemm(kernel.name + ".dgrad", m, k, n, e, batch),
            gemm(kernel.name + ".wgrad", k, n, m, e, batch, weight_grad=True)]


@dataclass(frozen=True, kw_only=True)
class OpWork:
    """One operation's forward and backward kernels."""

    op: OpKind
    scope: Scope
    fwd: tuple[Kernel, ...]
    bwd: tuple[Kernel, ...]


def op_work(op: OpKind, scope: Scope, items: list[tuple[Kernel, tuple | None]]) -> OpWork:
    """The operation of forward kernels ``items`` (each with its GEMM shape (m, n, k, e, batch), or None) and
    their backward kernels (:func:`backward`)."""
    bwd = [b for kernel, shape in items for b in backward(kernel, shape)]
    return OpWork(op=op, scope=scope, fwd=tuple(k for k, _ in items), bwd=tuple(bwd))
