"""Model-state bytes per rank: parameters, gradients and Adam optimizer states, under ZeRO 0-3.

Bytes per parameter (Rajbhandari et al. SC'20, "ZeRO", §3.1 and Figure 1): mixed-precision Adam
keeps 16-bit parameters (2), 16-bit gradients (2) and K = 12 bytes of optimizer state (an fp32
master copy, momentum and variance, 4 each). Pure fp32 training keeps 4 + 4 + 8 (momentum and
variance; the weights are their own master). ZeRO partitions these over the Nd data-parallel
ranks, so per rank::

    ZeRO-0 (DDP)  (2 + 2 + K)·Ψ          ZeRO-2  2Ψ + (2 + K)·Ψ/Nd
    ZeRO-1        2Ψ + 2Ψ + K·Ψ/Nd       ZeRO-3  (2 + 2 + K)·Ψ/Nd

(the paper's 7.5B model on 64 GPUs: 120, 31.4, 16.6, 1.9 GB). Ψ/Nd is exact only for the
:attr:`Partitioning.FLAT` split; :class:`Partitioning` names the other splits frameworks really use,
which :func:`partition_numels` reproduces element by element. DeepSpeed's ZeRO-3 also keeps every
tensor of fewer than ``stage3_param_persistence_threshold`` (1e5) elements whole on every rank, next to
its partition (``stage3.py`` ``persistent_parameters``) [src: deepspeed-zero3-coordinator]: + those
elements × parameter bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.bucket_defaults import DEEPSPEED_ZERO3
from simulator.checks import positive_int
from simulator.errors import SpecError
# the partition rules live in simulator.memory.partition; the names stay importable from here, where callers found them
from simulator.memory.partition import (ShapeCounts, bare_shapes, dim0_real_numels, partition_numels,  # noqa: F401
                                        shape_counts, whole_tensor_assignment)
from simulator.strategy.formats import autocast_of, state_dtype
from simulator.strategy.framework import Framework, Partitioning, resolve_framework
from simulator.strategy.kinds import GradReduceDtype, MixedPrecision, ZeroStage
from simulator.workload.transformer import DtypePolicy

ADAM_STATES_PER_PARAM = 2
"""Adam keeps two fp32 moments per parameter, momentum and variance (Kingma & Ba 2015)."""
ADAM_STATE_BYTES = 4
"""Bytes per moment element: fp32 (torch.optim.Adam and DeepSpeed keep moments in fp32)."""
STEP_BYTES = 4
"""Bytes of one Adam ``step`` tensor: a 0-d float32 (``torch/optim/adam.py`` ``_init_group`` with
``optimizer._get_scalar_dtype``; float64 only if the default dtype is float64). It lives on the CPU
unless Adam is ``fused`` or ``capturable``; kilobytes per rank either way."""


MEGATRON_FP32_GRAD_BYTES = 4
"""Megatron-LM accumulates and reduces 16-bit models' gradients in an fp32 ``main_grad`` buffer when
``accumulate_allreduce_grads_in_fp32`` (``grad_reduce_in_fp32``) is set — forced for bf16 unless
``--grad-reduce-in-bf16`` [src: megatron-grad-reduce-fp32]: "bf16 param, fp32 grads", 18 bytes per
parameter without and 6 + 12/d with the distributed optimizer [src: megatron-distopt]."""
MEGATRON_FP16_MAIN_GRAD_BYTES = 4
"""With 16-bit gradients (fp16 models, or bf16 ones reduced in bf16) Megatron's optimizer keeps an fp32
copy of the gradients next to the master weights (``main_param.grad = main_grad.float()``): 20 bytes per
parameter, 4 + 16/d distributed ("fp16 param, fp16 grads") [src: megatron-distopt]."""


def _megatron_fp32_grads(dtype: DtypePolicy, framework: Framework, reduce: GradReduceDtype | None) -> bool:
    """Whether Megatron holds a 16-bit model's gradients in fp32 (``reduce``: the strategy's
    ``grad_reduce_dtype``; None: the framework's, :meth:`Framework.grad_reduce_dtype`)."""
    return (framework is Framework.MEGATRON and dtype.master_bytes > 0
            and (reduce or framework.grad_reduce_dtype(dtype)) is GradReduceDtype.FP32)


def _grad_bytes(dtype: DtypePolicy, framework: Framework, reduce: GradReduceDtype | None = None) -> int:
    """Bytes per gradient element as the framework stores them."""
    if _megatron_fp32_grads(dtype, framework, reduce):
        return MEGATRON_FP32_GRAD_BYTES
    return dtype.grad_bytes


def _optimizer_bytes(dtype: DtypePolicy, framework: Framework, reduce: GradReduceDtype | None = None) -> int:
    """Optimizer bytes per parameter as the framework stores them (K, plus Megatron's fp32 main
    gradients of a model whose gradients are 16-bit)."""
    extra = MEGATRON_FP16_MAIN_GRAD_BYTES if framework is Framework.MEGATRON and dtype.master_bytes > 0 \
        and not _megatron_fp32_grads(dtype, framework, reduce) else 0
    return optimizer_bytes_per_param(dtype) + extra


def optimizer_bytes_per_param(dtype: DtypePolicy) -> int:
    """K, the optimizer-state bytes per parameter: fp32 master (if any) + Adam momentum + variance —
    12 in mixed precision (Rajbhandari et al. SC'20, "ZeRO", §3.1: K = 12 for mixed-precision Adam),
    8 in pure fp32. The one home of this number: memory, compile (NVMe traffic) and the optimizer
    step's bytes (:func:`simulator.compile.offload_part.adam_bytes_per_param`) all call it."""
    return dtype.master_bytes + ADAM_STATES_PER_PARAM * ADAM_STATE_BYTES


@dataclass(frozen=True, kw_only=True)
class ModelStateBytes:
    """Bytes of model states one rank holds.

    ``params_bytes`` is the *peak* (between forward and backward), which decides fit;
    ``params_after_step_bytes`` what is left after the optimizer step. They differ only under FSDP2
    ZeRO-2 (``reshard_after_forward=False``), whose unsharded parameters live from forward to
    backward and are freed after it (see :func:`model_state_bytes`).
    """

    params_bytes: int
    """Parameters at their peak, as the forward and backward passes read them (16-bit in mixed precision)."""
    grads_bytes: int
    """Gradients as backward produces them."""
    optimizer_bytes: int
    """Optimizer state: fp32 master copy (mixed precision) + Adam momentum + variance."""
    optimizer_step_bytes: int = 0
    """Adam's ``step`` counters: one 0-d fp32 tensor per parameter tensor with state (torch optimizers)."""
    params_after_step_bytes: int | None = None
    """Parameters after the optimizer step; None: equal to ``params_bytes``."""

    @property
    def params_at_rest_bytes(self) -> int:
        """``params_after_step_bytes``, or ``params_bytes`` when they do not differ."""
        return self.params_bytes if self.params_after_step_bytes is None else self.params_after_step_bytes

    @property
    def total_bytes(self) -> int:
        """Peak: params (peak) + grads + optimizer (moments, master, step counters)."""
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes + self.optimizer_step_bytes

    @property
    def total_after_step_bytes(self) -> int:
        return self.total_bytes - self.params_bytes + self.params_at_rest_bytes


def _check_rank(dp: int, rank: int | None) -> None:
    positive_int("dp", dp)
    if rank is not None and not 0 <= rank < dp:
        raise SpecError("rank", f"rank {rank} is outside 0..{dp - 1}")


def steps_per_tensor(framework: Framework) -> bool:
    """Whether ``framework``'s optimizer keeps a ``step`` tensor per parameter tensor (:func:`step_tensors`): not
    DeepSpeed's or Megatron's, which step flat partitions."""
    return framework not in (Framework.DEEPSPEED, Framework.MEGATRON)


def step_tensors(shapes, dp: int, zero: ZeroStage, framework: Framework) -> list[int]:
    """Parameter tensors each rank keeps Adam state (hence a ``step`` tensor) for.

    torch optimizers (``torch/optim/adam.py``, ``_init_group``) give every parameter with a gradient
    a 0-d ``step`` tensor: all tensors under DDP and FSDP2 (every rank holds a shard of every tensor,
    possibly empty), the rank's own tensors under ``ZeroRedundancyOptimizer``. DeepSpeed's optimizer
    steps flat partitions (one per parameter group), which we count as none; so does Megatron's
    (its fused Adam keeps one step count per parameter group).
    """
    count = len(bare_shapes(shapes))
    if not steps_per_tensor(framework):
        return [0] * dp
    if framework is Framework.TORCH_DDP and zero >= ZeroStage.ZERO1:
        owners = whole_tensor_assignment(shape_counts(shapes).counts, dp)
        return [owners.count(r) for r in range(dp)]
    return [count] * dp


@dataclass(frozen=True, kw_only=True)
class _Split:
    """Per-rank element counts of one layout, computed once for every rank."""

    full: int
    parts: list[int]
    optimizer_parts: list[int]
    steps: list[int]
    persistent: int = 0
    """Elements DeepSpeed's ZeRO-3 keeps whole on every rank besides their partition (tensors under
    ``stage3_param_persistence_threshold``, :class:`simulator.bucket_defaults.DeepSpeedZero3Config`)."""


def _split(shapes, dp: int, zero: ZeroStage, partitioning: Partitioning, framework: Framework) -> _Split:
    shapes = shape_counts(shapes)  # read once for the counts below
    parts = partition_numels(shapes, dp, partitioning)
    optimizer_parts = dim0_real_numels(shapes, dp) if framework is Framework.FSDP2 else parts
    persistent = 0
    if framework is Framework.DEEPSPEED and zero is ZeroStage.ZERO3:
        persistent = DEEPSPEED_ZERO3.persistent_elements(shapes.counts)
    return _Split(full=sum(shapes.counts), parts=parts, optimizer_parts=optimizer_parts,
                  steps=step_tensors(shapes, dp, zero, framework), persistent=persistent)


def _rank_states(split: _Split, dp: int, zero: ZeroStage, dtype: DtypePolicy, framework: Framework,
                 rank: int, reduce: GradReduceDtype | None = None, kept: bool = False) -> ModelStateBytes:
    part, full = split.parts[rank], split.full
    params = (part + split.persistent if zero >= ZeroStage.ZERO3 else full) * dtype.param_bytes
    after_step = None
    if framework is Framework.FSDP2 and (zero is ZeroStage.ZERO2 or kept):
        # reshard_after_forward=False: the padded all-gather output (dp·part elements; the unsharded
        # parameters are views into it, _fsdp_param.py ``all_gather_outputs``) stays alive from forward
        # to backward next to the persistent shard; after backward FSDP2 reshards, leaving ZeRO-3's
        # shard. In mixed precision the persistent fp32 shard is the master, already counted in K.
        after_step = part * dtype.param_bytes
        params = dp * part * dtype.param_bytes + (after_step if dtype.master_bytes == 0 else 0)
    return ModelStateBytes(
        params_bytes=params,
        grads_bytes=(part if zero >= ZeroStage.ZERO2 else full) * _grad_bytes(dtype, framework, reduce),
        optimizer_bytes=(split.optimizer_parts[rank] if zero >= ZeroStage.ZERO1 else full)
        * _optimizer_bytes(dtype, framework, reduce),
        optimizer_step_bytes=split.steps[rank] * STEP_BYTES,
        params_after_step_bytes=after_step)


def model_state_bytes(shapes, *, dp: int, zero: ZeroStage, dtype: DtypePolicy,
                      partitioning: Partitioning | None = None, rank: int | None = None,
                      framework: Framework | None = None,
                      mixed_precision: MixedPrecision | None = None,
                      grad_reduce_dtype: GradReduceDtype | None = None,
                      pipeline_keeps_gathered: bool = False) -> ModelStateBytes:
    """Parameters, gradients and optimizer bytes of one data-parallel rank (``rank=None``: the most
    loaded, largest peak total, lowest rank on a tie). ``shapes`` are the tensors the rank's model
    replica holds, ``[(name, shape), ...]`` (e.g. :func:`simulator.memory.shapes.stage_param_shapes`).
    ZeRO stage s partitions the optimizer (s >= 1), gradients (s >= 2) and parameters (s = 3) with
    ``partitioning``; ``framework`` adds what its implementation allocates on purpose (FSDP2's
    unpadded Adam state and ZeRO-2 unsharded copy, torch's Adam ``step`` tensors) and stores them its
    way (``mixed_precision`` autocast, torch DDP's default: a mixed-precision ``dtype`` in the fp32 layout,
    4 + 4 + 8, :func:`simulator.strategy.formats.state_dtype`; None: the framework's), Megatron's gradients in
fp32 or not by ``grad_reduce_dtype`` (None: the framework's). Partitioning and
    framework default from each other (:func:`~simulator.strategy.framework.resolve_framework`).
    ``pipeline_keeps_gathered``: FSDP2 ZeRO-3 under torch's pipelining runtime, whose backwards keep what they
    gather until the chunk's next forward (:mod:`simulator.gather_reuse`): at the end of a backward the chunk's
    parameters are all unsharded, so the peak counts them as ZeRO-2's (an upper bound: that moment holds one
    micro-batch's activations fewer than the activation peak the report adds)."""
    _check_rank(dp, rank)
    zero = ZeroStage(zero)
    partitioning, framework = resolve_framework(zero, partitioning, framework)
    dtype = state_dtype(dtype, autocast_of(framework, mixed_precision))  # autocast keeps fp32 states
    split = _split(shapes, dp, zero, partitioning, framework)
    ranks = [rank] if rank is not None else range(dp) if partitioning is Partitioning.WHOLE_TENSOR else [0]
    kept = pipeline_keeps_gathered and zero is ZeroStage.ZERO3
    per_rank = [_rank_states(split, dp, zero, dtype, framework, r, grad_reduce_dtype, kept) for r in ranks]
    return max(per_rank, key=lambda m: m.total_bytes)
