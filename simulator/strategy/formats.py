"""Which number format each part of a mixed-precision step is held and moved in: one home for the rules the
compute, communication and memory models share.

- **Model states** (:func:`state_dtype`): fp32 for a bf16/fp16 model under ``mixed_precision autocast``
  (``torch.autocast`` leaves the parameters fp32, so they are their own master copy and their gradients are
  fp32) [src: torch-amp-autocast], else the model's own format with an fp32 master in the optimizer.
- **Data-parallel traffic** (:func:`sync_dtype`): the states' format — DDP all-reduces its gradient buckets
  in the gradients' dtype, ``ZeroRedundancyOptimizer`` broadcasts the parameters it holds.
- **Gradient reductions** (:func:`grad_reduce_dtype`): the states' format, or fp32 where the framework
  reduces 16-bit models' gradients in fp32 (:meth:`Strategy.resolved_grad_reduce_dtype`: Megatron-LM for
  bf16, torchtitan's FSDP2). Parameter gathers and broadcasts stay in :func:`sync_dtype`.
"""

from __future__ import annotations

from simulator.strategy.framework import Framework
from simulator.strategy.kinds import GradReduceDtype, MixedPrecision
from simulator.workload.kinds import DtypePolicy


def autocast_of(framework: Framework, mixed_precision: MixedPrecision | None = None) -> bool:
    """Whether the mixed precision in effect is ``autocast``: ``mixed_precision`` as given (a strategy's
    :attr:`~simulator.strategy.spec.Strategy.resolved_mixed_precision`), else the framework's default."""
    return (mixed_precision or framework.mixed_precision) is MixedPrecision.AUTOCAST


def state_dtype(dtype: DtypePolicy, autocast: bool) -> DtypePolicy:
    """The layout the model states are stored in: fp32 for a mixed-precision model under autocast
    (``autocast``: the mixed precision is ``autocast``; parameters, gradients and DDP buckets fp32, no
    separate master), else ``dtype`` itself."""
    if autocast and dtype.master_bytes:
        return DtypePolicy.FP32
    return dtype


def sync_dtype(dtype: DtypePolicy, strategy) -> DtypePolicy:
    """The format data-parallel communication moves parameters in, and gradients unless
    :func:`grad_reduce_dtype` says fp32: the states' layout (:func:`state_dtype`), so fp32 under autocast (DDP
    all-reduces its fp32 gradient buckets, ``ZeroRedundancyOptimizer`` broadcasts fp32 parameters, FSDP2
    without a ``MixedPrecisionPolicy`` gathers and reduce-scatters fp32), else ``dtype``."""
    return state_dtype(dtype, autocast_of(strategy.resolved_framework, strategy.resolved_mixed_precision))


def runs_autocast(dtype: DtypePolicy, strategy) -> bool:
    """Whether a model of ``dtype`` under ``strategy`` runs eager autocast over fp32 parameters: a bf16/fp16
    model whose mixed precision in effect (:attr:`Strategy.resolved_mixed_precision`) is ``autocast``. The one
    rule the compute (:mod:`simulator.workload.autocast`), communication and memory terms follow."""
    return sync_dtype(dtype, strategy) is not dtype


def grad_reduce_dtype(dtype: DtypePolicy, strategy) -> DtypePolicy:
    """The format data-parallel gradient reductions (all-reduce, ZeRO reduce-scatter) move a model of ``dtype``
    in: fp32 when the reduction dtype in effect (:meth:`Strategy.resolved_grad_reduce_dtype`) is fp32 and the
    gradients are 16-bit, else the states' format (:func:`sync_dtype`)."""
    if dtype.master_bytes and strategy.resolved_grad_reduce_dtype(dtype) is GradReduceDtype.FP32:
        return DtypePolicy.FP32
    return sync_dtype(dtype, strategy)
