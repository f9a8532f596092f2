"""Eager ``torch.autocast`` over fp32 parameters: the casts and the fp32 traffic it adds to a block.

Under PyTorch's automatic mixed precision (``torch.autocast(dtype=bfloat16)`` around a model whose
parameters stay fp32 [src: torch-amp-autocast]; the torch framework's default, and the executor's) a linear
layer runs in bf16 on bf16 copies of its fp32 inputs, while normalisation runs in fp32, so the residual
stream between blocks stays fp32. Per element, with ``e`` the compute format's bytes (2) and 4 for fp32, a
block on one tensor-parallel rank of ``T`` tokens gains, beyond the bf16 kernels of
:func:`simulator.workload.ops.layer_work`:

- **weight casts**: each linear's fp32 weight is cast to bf16 when its op first runs in an autocast region
  (``cached_cast`` keeps the copy of a leaf tensor that requires grad for the rest of the region, so once
  per forward, per micro-batch, and again in a recomputed forward), reading 4 and writing ``e`` bytes per
  weight element; backward casts the weight's bf16 gradient back to fp32 (the cast's ``ToCopyBackward``):
  ``e`` + 4 more. A linear's bias is such a leaf too, so it gets its own cast and gradient cast, ``(4 + e)·n``
  each way for ``n`` output features (``cached_cast`` casts every fp32 argument of ``linear``) [src:
  torch-autocast-cache]: few bytes, but a kernel each (the 1.3B trace's 10 casts per block each way: 4 weights,
  4 biases, 2 norm outputs);
- **norms in fp32**: ``layer_norm`` and ``rms_norm`` run in fp32 on the fp32 stream (autocast's fp32 op
  list), so each reads and writes 4 bytes per element instead of ``e`` (forward, and the backward's 1.5×);
- **norm-output casts**: the next linear casts the norm's fp32 output to bf16, ``4 + e`` per element,
  and backward casts its gradient back, ``e + 4``; a model whose norm casts its own input down and runs in
  bf16 (llm-foundry's ``LPLayerNorm``, :func:`simulator.workload.model_code.fp32_norms_under_autocast`) keeps
  the norm's bf16 bytes and has the same cast on its input instead;
- **residual adds in fp32**: ``x + branch`` reads the fp32 stream and the bf16 branch and writes fp32,
  ``4 + e + 4`` instead of ``3e``; in backward the branch's gradient is cast to bf16 (``4 + e``) and the
  stream's two gradients are summed in fp32 (``3 · 4``), instead of the bf16 kernel's ``1.5 · 3e``;
- on the model's edges: the embedding's fp32 lookup (its bytes × ``4/e``), the final norm in fp32 and its
  output cast, and the output layer's weight cast; between pipeline stages the fp32 stream is what is sent
  (and what activation offload copies): 4 bytes per element (:mod:`simulator.compile.step`); tensor
  parallelism's collectives stay 16-bit (the row-parallel outputs they reduce are bf16).

These passes are what the 1.3B H200 trace shows besides the model's bf16 kernels: ``bfloat16_copy``
(fp32 → bf16) once per linear weight and per norm output, ``direct_copy`` (bf16 → fp32) for their
gradients, fp32 ``layer_norm`` kernels, and fp32 adds [src: own-h200-2026-11-24] (docs/hardware_measured.md).
The gradient-accumulation add and the bias gradients' reductions are other modules' (:mod:`simulator.workload.
grad_accum`, :mod:`simulator.workload.ops`).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.workload.eager_norm import WEIGHT_GRAD_SUFFIX
from simulator.workload.kinds import BiasKind, ModelCode
from simulator.workload.model_code import fp32_norms_under_autocast
from simulator.workload.ops import MEMORY_BWD_FACTOR, Kernel, OpKind, OpWork, biased_ops, memory

__all__ = ["FP32_BYTES", "WEIGHT_OPS", "autocast_block"]

FP32_BYTES = 4
"""Bytes of an fp32 element: the parameters, norms and residual stream under autocast."""

WEIGHT_OPS = (OpKind.QKV, OpKind.OUT_PROJ, OpKind.MLP, OpKind.ROUTER, OpKind.LOGITS)
"""The operations whose GEMMs multiply by a weight (the attention core's two GEMMs have none)."""


def _scaled(kernel: Kernel, factor: float) -> Kernel:
    return replace(kernel, bytes=kernel.bytes * factor)


def _weight_casts(work: OpWork, e: int, bias: bool) -> tuple[list[Kernel], list[Kernel]]:
    """A cast per bf16 weight GEMM of ``work`` in forward and a gradient cast in backward, and with ``bias`` the
    same for each GEMM's bias of ``n`` elements (FP8 GEMMs, ``Kernel.dtype`` set, are cast by their own recipe)."""
    fwd, bwd = [], []
    for k in work.fwd:
        if k.gemm and k.shape is not None and k.dtype is None:
            elems = k.shape.k * k.shape.n * k.shape.batch
            fwd.append(memory(f"{k.name}.cast_weight", (FP32_BYTES + e) * elems))
            bwd.append(memory(f"{k.name}.cast_weight_grad", (e + FP32_BYTES) * elems))
            if bias:
                fwd.append(memory(f"{k.name}.cast_bias", (FP32_BYTES + e) * k.shape.n * k.shape.batch))
                bwd.append(memory(f"{k.name}.cast_bias_grad", (e + FP32_BYTES) * k.shape.n * k.shape.batch))
    return fwd, bwd


def _norm(work: OpWork, e: int, fp32: bool = True) -> tuple[OpWork, list[Kernel], list[Kernel]]:
    """Norms in fp32 (bytes × 4/e), and the casts of their outputs (forward) and of the outputs' gradients
    (backward); a norm kernel reads and writes its elements once, ``2 · elements · e`` bytes. Without ``fp32``
    the norm keeps its bf16 kernels and the same casts sit on its input (``LPLayerNorm``)."""
    where = "output" if fp32 else "input"
    casts_f = [memory(f"{k.name}.cast_{where}", (FP32_BYTES + e) * k.bytes / (2 * e)) for k in work.fwd]
    casts_b = [memory(f"{k.name}.cast_{where}_grad", (e + FP32_BYTES) * k.bytes / (2 * e * MEMORY_BWD_FACTOR))
               for k in work.bwd if not k.name.endswith(WEIGHT_GRAD_SUFFIX)]  # one cast per input gradient
    if not fp32:
        return work, casts_f, casts_b
    widened = replace(work, fwd=tuple(_scaled(k, FP32_BYTES / e) for k in work.fwd),
                      bwd=tuple(_scaled(k, FP32_BYTES / e) for k in work.bwd))
    return widened, casts_f, casts_b


def _residual(work: OpWork, e: int) -> OpWork:
    """The residual adds on the fp32 stream (module docstring); the op's other kernels stay bf16."""
    def fwd(k: Kernel) -> Kernel:
        return _scaled(k, (FP32_BYTES + e + FP32_BYTES) / (3 * e)) if k.name == "residual" else k

    def bwd(k: Kernel) -> Kernel:
        if k.name != "residual.bwd":
            return k
        elems = k.bytes / (3 * e * MEMORY_BWD_FACTOR)
        return replace(k, bytes=elems * ((FP32_BYTES + e) + 3 * FP32_BYTES))
    return replace(work, fwd=tuple(fwd(k) for k in work.fwd), bwd=tuple(bwd(k) for k in work.bwd))


def _embedding(work: OpWork, e: int) -> OpWork:
    def fp32(k: Kernel) -> Kernel:
        return _scaled(k, FP32_BYTES / e) if k.name in ("embedding", "embedding.bwd") else k
    return replace(work, fwd=tuple(fp32(k) for k in work.fwd), bwd=tuple(fp32(k) for k in work.bwd))


def autocast_block(works: list[OpWork], e: int, bias: BiasKind = BiasKind.NONE,
                   model_code: ModelCode = ModelCode.FUSED_OPS) -> list[OpWork]:
    """A block's (or the edges') operations as eager autocast over fp32 parameters runs them (module
    docstring), the casts gathered in one :attr:`OpKind.CAST` operation per scope, ahead of the scope's
    operations; ``e``: bytes per element of the compute format; ``bias``: which linears carry a bias
    (:func:`simulator.workload.ops.biased_ops`), each cast too; ``model_code``: whose norms
    (:func:`~simulator.workload.model_code.fp32_norms_under_autocast`)."""
    out, casts, biased = [], {}, biased_ops(bias)
    fp32_norms = fp32_norms_under_autocast(model_code)
    for w in works:
        f: list[Kernel] = []
        b: list[Kernel] = []
        if w.op in WEIGHT_OPS:
            f, b = _weight_casts(w, e, w.op in biased)
        elif w.op is OpKind.NORM:
            w, f, b = _norm(w, e, fp32_norms)
        elif w.op is OpKind.ELEMENTWISE:
            w = _residual(w, e)
        elif w.op is OpKind.EMBEDDING:
            w = _embedding(w, e)
        if f or b:
            cf, cb = casts.setdefault(w.scope, ([], []))
            cf += f
            cb += b
        out.append(w)
    ops = [OpWork(op=OpKind.CAST, scope=scope, fwd=tuple(f), bwd=tuple(b)) for scope, (f, b) in casts.items()]
    return ops + out
