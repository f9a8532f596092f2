"""Compute time of a transformer's operations on one device: a roofline per kernel.

Each kernel (see :mod:`simulator.workload.ops`) takes

    time = max(W / (peak(dtype) · e(W)),  bytes / B_hbm) + o

where ``e`` is the device's matmul-efficiency curve (:mod:`simulator.gemm_efficiency`: the device's
own ``gemm_efficiency`` or the default for its name), ``W`` a GEMM's padded work — its FLOPs rounded
up to whole tiles and whole waves on the device's ``sm_count`` SMs (:mod:`simulator.gemm_shape`;
the FLOPs themselves for a kernel without a shape or a device without ``sm_count``) — and
memory-bound kernels have no FLOPs term; ``B_hbm`` is the device's *achievable* memory bandwidth
(:func:`achievable_hbm_Bps`: the datasheet figure × ``device.hbm_efficiency``, a published
STREAM-like measurement's fraction where the preset gives one), and ``o`` is the device's
``kernel_launch_overhead_us``: host time per call (dispatch, autograd, launch). On an ``inline`` device (a CPU
process) it adds to every kernel once per operator the framework dispatches for it (``Kernel.dispatches``,
:mod:`simulator.workload.eager_dispatch`), at ``backward_call_overhead_us`` in backward where the device gives
it (both measured per dispatched operator by ``trainplan calibrate --compute``); on an ``async`` one (a GPU) the per-operation rows here
show device time only and a phase of a repeated unit takes max(Σ device time, kernels × o)
(:func:`simulator.unit_times.unit_times`, :mod:`simulator.host_overhead`). A fused-attention kernel on a device
with published attention rates for its backend takes ``F_pub / (R(s) · r)`` as its compute term instead
(:mod:`simulator.attention_efficiency`). A preset and a measured cluster file go through this same
formula: only their numbers differ.
An operation's time is the sum of its kernels'; it is reported as compute- or memory-bound by
whichever term dominates its longest kernel. Kernels run one after another (no overlap between
kernels; launch gaps are ``o`` plus what the efficiency curve carries).

The tables: :func:`layer_times` for one block (multiply by the layers a stage holds),
:func:`edge_times` for the embedding (first stage) and the final norm, logits and loss (last
stage); :func:`microbatch_time` adds them up for a device holding the whole model.
One kernel's roofline (:class:`~simulator.kernel_roofline.Rates`, :func:`~simulator.kernel_roofline.kernel_time`)
is :mod:`simulator.kernel_roofline`; a device's rates for a dtype, :func:`rates_for`, are here.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.attention_efficiency import AttentionBackend
from simulator.cluster.spec import Device, KernelDispatch
from simulator.dtypes import Dtype
from simulator.enum_kind import Kind
from simulator.gemm_efficiency import GemmEfficiency, efficiency_for
from simulator.kernel_roofline import Bound, Rates
from simulator.workload.chunks import block_params_held, edge_params_held, recomputed
from simulator.workload.grad_accum import GradAdd, with_grad_add
from simulator.workload.context import NO_CONTEXT_SPLIT, ContextSplit
from simulator.workload.flops import Recompute
from simulator.workload.kinds import DtypePolicy, KernelFusion, LossImpl, ModelCode
from simulator.workload.model_code import kv_repeat, with_model_code
from simulator.workload.loss import with_loss
from simulator.workload.op_sac import op_sac_kernels
from simulator.workload.autocast import autocast_block
from simulator.workload.eager_norm import with_norm_weight_grads
from simulator.workload.blocks import block_work
from simulator.workload.ops import Kernel, OpKind, OpWork, Scope, edge_work, memory
from simulator.workload.protocol import ChunkSlice
from simulator.workload.transformer import TransformerSpec


class Phase(Kind):
    """When a kernel runs within a training step."""

    FWD = "fwd"
    """The forward pass."""
    BWD = "bwd"
    """The backward pass (input and weight gradients)."""
    RECOMPUTE = "recompute"
    """Forward work repeated during backward by activation recomputation."""


@dataclass(frozen=True, kw_only=True)
class OpTime:
    """One row of the compute table: an operation in one phase on one device."""

    op: OpKind
    phase: Phase
    scope: Scope
    flops: float
    """FLOPs of the operation's kernels on this device (after tensor-parallel division)."""
    bytes: float
    """Bytes its kernels read and write from device memory."""
    time_s: float
    bound: Bound
    efficiency: float
    """Achieved fraction of peak FLOP/s over the operation (0 for memory-only operations), on the FLOPs its
    kernels execute: ``flops`` except for a fused-attention kernel, whose work is counted as the attention
    benchmarks count it (causal half, backward 2.5× forward; :mod:`simulator.attention_efficiency`)."""


def _row(work: OpWork, phase: Phase, kernels: tuple[Kernel, ...], rates: Rates) -> OpTime:
    peak = rates.peak_flops
    timed = [rates.time(k) for k in kernels]
    total = sum(t for t, _ in timed)
    flops = sum(k.flops for k in kernels)
    executed = sum(k.attention.published_flops(k.flops) if k.attention else k.flops for k in kernels)
    bound = max(timed, key=lambda tb: tb[0])[1]
    eff = executed / (peak * total) if executed and total else 0.0
    return OpTime(op=work.op, phase=phase, scope=work.scope, flops=flops,
                  bytes=sum(k.bytes for k in kernels), time_s=total, bound=bound, efficiency=eff)


def achievable_hbm_Bps(device: Device, curve: GemmEfficiency | None = None) -> float:
    """Bytes/s a memory-bound kernel moves on ``device``: ``hbm_bw_GBps × 1e9 × e`` with ``e`` the
    device's ``hbm_efficiency`` (a STREAM-like measurement's fraction) where it gives one, else the
    ``hbm_efficiency`` of its matmul curve (``curve``, default
    :func:`~simulator.gemm_efficiency.efficiency_for`; 1.0 unless measured)."""
    if device.hbm_efficiency is not None:
        return device.hbm_bw_GBps * 1e9 * device.hbm_efficiency
    return device.hbm_bw_GBps * 1e9 * (curve or efficiency_for(device)).hbm_efficiency


def rates_for(dtype: DtypePolicy, device: Device, phase: Phase = Phase.FWD) -> Rates:
    """The device's :class:`Rates` for ``dtype``; host time per call that of ``phase`` (backward's where the device
    gives one, ``Device.call_overhead_us``) on an ``inline`` device, 0 on an ``async`` one."""
    curve = efficiency_for(device)
    return Rates(peak_flops=device.peak_flops(dtype.compute_dtype),
                 hbm_Bps=achievable_hbm_Bps(device, curve), curve=curve, sm_count=device.sm_count,
                 clock_ratio=device.sustained_clock_ratio,
                 fp8_peak_flops=device.peak_flops(Dtype.FP8) if Dtype.FP8 in device.peak_tflops else None,
                 fp8_curve=device.fp8_gemm_efficiency, compute_capability=device.compute_capability,
                 element_bytes=dtype.activation_bytes,
                 attention=device.attention_efficiency if dtype.compute_dtype in (Dtype.BF16, Dtype.FP16) else None,
                 overhead_s=device.call_overhead_us(phase is Phase.BWD) * 1e-6
                 if device.kernel_dispatch is KernelDispatch.INLINE else 0.0)


def memory_kernel_s(device: Device, dtype: DtypePolicy, nbytes: float) -> float:
    """Seconds of a memory-bound kernel moving ``nbytes`` on ``device`` (the roofline's memory term,
    plus the device's per-kernel host overhead)."""
    return rates_for(dtype, device).time(memory("memory", nbytes))[0]


def kernel_s(device: Device, dtype: DtypePolicy, kernel: Kernel) -> float:
    """Seconds of one ``kernel`` record on ``device`` through :meth:`Rates.time`, the path every modelled kernel
    takes (roofline at the achievable HBM bandwidth for a memory-bound one, plus the backward's host time per
    dispatch on an ``inline`` device)."""
    return rates_for(dtype, device, Phase.BWD).time(kernel)[0]


def runs_cuda_kernels(device: Device) -> bool:
    """Whether ``device`` runs torch's CUDA kernels (an ``async`` device: every GPU preset; the CPU stand-in is
    ``inline``): the one rule for kernel facts read from our GPU traces (:mod:`simulator.workload.eager_norm`)."""
    return device.kernel_dispatch is KernelDispatch.ASYNC


def layer_times(spec: TransformerSpec, device: Device, micro_batch: int, seq: int | None = None,
                tp: int = 1, recompute: Recompute = Recompute.NONE, *, flash_attention: bool = True,
                sequence_parallel: bool = False, fusion: KernelFusion = KernelFusion.EAGER, ep: int = 1,
                routing_skew: float = 1.0, context: ContextSplit = NO_CONTEXT_SPLIT,
                attention_backend: AttentionBackend = AttentionBackend.FLASH_ATTENTION_2,
                autocast: bool = False, grad_add: GradAdd | None = None,
                model_code: ModelCode = ModelCode.FUSED_OPS) -> list[OpTime]:
    """Per-operation times of one transformer block for one micro-batch on one tensor-parallel (and
    context-parallel) rank: forward rows, then recompute rows (if any), then backward rows. A
    mixture-of-experts model's block is its last (a MoE block over ``ep``;
    :func:`simulator.workload.blocks.block_work`); ``autocast``: as eager autocast over fp32 parameters runs
    it (:mod:`simulator.workload.autocast`); ``grad_add``: the framework's gradient-accumulation add in the
    backward (:mod:`simulator.workload.grad_accum`)."""
    rates = rates_for(spec.dtype, device)
    works = block_work(spec, micro_batch, seq, tp, moe_layer=spec.is_moe_layer(spec.layers - 1), ep=ep,
                       routing_skew=routing_skew, flash_attention=flash_attention,
                       sequence_parallel=sequence_parallel, fusion=fusion, context=context,
                       attention_backend=attention_backend)
    works = with_norm_weight_grads(works, fusion, runs_cuda_kernels(device))
    tokens = micro_batch * (spec.seq_len if seq is None else seq) // context.degree
    works = with_model_code(works, model_code, fusion, spec.dtype.activation_bytes, *kv_repeat(spec, tokens, tp))
    if autocast:
        works = autocast_block(works, spec.dtype.activation_bytes, spec.bias, model_code)
    moe = spec.is_moe_layer(spec.layers - 1)
    works = with_grad_add(works, grad_add, block_params_held(spec, moe, tp, ep), OpKind.ELEMENTWISE)
    rows = [_row(w, Phase.FWD, w.fwd, rates) for w in works]
    if recompute is Recompute.SELECTIVE_OP:  # torchtitan's op-level policy repeats parts of operations
        tokens = micro_batch * (spec.seq_len if seq is None else seq) // context.degree
        again = [(w, op_sac_kernels(w, spec, tokens, tp)) for w in works]
        rows += [_row(w, Phase.RECOMPUTE, kernels, rates) for w, kernels in again if kernels]
    rows += [_row(w, Phase.RECOMPUTE, w.fwd, rates) for w in works
             if recomputed(w, recompute, flash_attention)]
    bwd_rates = rates_for(spec.dtype, device, Phase.BWD)
    rows += [_row(w, Phase.BWD, w.bwd, bwd_rates) for w in works]
    return rows


def edge_times(spec: TransformerSpec, device: Device, micro_batch: int, seq: int | None = None,
               tp: int = 1, *, sequence_parallel: bool = False, autocast: bool = False,
               grad_add: GradAdd | None = None, loss: LossImpl = LossImpl.ONE_PASS,
               model_code: ModelCode = ModelCode.FUSED_OPS) -> list[OpTime]:
    """Per-operation times of the embedding (scope FIRST) and final norm, logits, loss (scope LAST) of a model
    on one pipeline stage; ``autocast`` and ``grad_add`` as :func:`layer_times`; ``loss``: how the framework
    computes the cross-entropy (``Framework.loss_impl``, :mod:`simulator.workload.loss`), as the engines' chunks."""
    rates = rates_for(spec.dtype, device)
    works = with_loss(edge_work(spec, micro_batch, seq, tp, sequence_parallel=sequence_parallel), loss,
                      spec.dtype.activation_bytes, autocast=autocast)
    works = with_norm_weight_grads(works, KernelFusion.EAGER, runs_cuda_kernels(device))
    works = with_model_code(works, model_code, KernelFusion.EAGER, spec.dtype.activation_bytes)
    if autocast:
        works = autocast_block(works, spec.dtype.activation_bytes, spec.bias, model_code)
    whole = ChunkSlice(index=0, count=1, start=0, layers=spec.layers)
    for scope, owner in ((Scope.FIRST, OpKind.EMBEDDING), (Scope.LAST, OpKind.LOGITS)):
        works = with_grad_add(works, grad_add, edge_params_held(spec, whole, tp, scope), owner)
    rows = [_row(w, Phase.FWD, w.fwd, rates) for w in works]
    bwd_rates = rates_for(spec.dtype, device, Phase.BWD)
    rows += [_row(w, Phase.BWD, w.bwd, bwd_rates) for w in works]
    return rows


def total_time(rows: list[OpTime], phase: Phase | None = None) -> float:
    """Sum of ``time_s`` over the rows (of one phase, if given)."""
    return sum(r.time_s for r in rows if phase is None or r.phase is phase)


def microbatch_time(spec: TransformerSpec, device: Device, micro_batch: int, seq: int | None = None,
                    tp: int = 1, recompute: Recompute = Recompute.NONE, *, flash_attention: bool = True,
                    sequence_parallel: bool = False) -> float:
    """Forward + backward time of one micro-batch through the whole model on one device (per TP rank)."""
    layer = layer_times(spec, device, micro_batch, seq, tp, recompute, flash_attention=flash_attention,
                        sequence_parallel=sequence_parallel)
    edge = edge_times(spec, device, micro_batch, seq, tp, sequence_parallel=sequence_parallel)
    return spec.layers * total_time(layer) + total_time(edge)


def to_dataframe(rows: list[OpTime]):
    """The rows as a pandas DataFrame (enum columns as their string values)."""
    import pandas as pd

    return pd.DataFrame([{"op": r.op.value, "phase": r.phase.value, "scope": r.scope.value,
                          "flops": r.flops, "bytes": r.bytes, "time_s": r.time_s,
                          "bound": r.bound.value, "efficiency": r.efficiency} for r in rows])
