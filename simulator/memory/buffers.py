"""Temporary GPU buffers per rank, as each framework allocates them
(:class:`~simulator.strategy.framework.Framework`), sized from the strategy's own bucket settings:

- torch DDP (ZeRO 0, and ZeRO 1 with ``ZeroRedundancyOptimizer``, which runs under DDP): gradients
  are copied into flat all-reduce buckets unless ``gradient_as_bucket_view=True``; with torch's
  default (False) the buckets together hold a second copy of every gradient
  (``torch/nn/parallel/distributed.py``, ``gradient_as_bucket_view`` docstring: "the saved memory
  size will be equal to the total gradients size") [src: torch-ddp]; with True the ``.grad`` tensors
  are views into the buckets: no extra bytes. Measured exactly (docs/memory_measured.md). A
  bucket has the gradients' dtype: fp32 for a mixed-precision model under autocast, whose
  parameters stay fp32 (:mod:`simulator.memory.autocast`). A parameter server has no all-reduce buckets.
- torch autocast's 16-bit weight copies and AdamW's foreach temporary: :mod:`simulator.memory.autocast`.
- DeepSpeed ZeRO 1-2 (``deepspeed/runtime/zero/stage_1_and_2.py``, ``DeepSpeedZeroOptimizer.backward``):
  with ``contiguous_gradients`` (default on) it allocates ``reduce_bucket_size`` elements of the
  16-bit dtype, twice with ``overlap_comm`` (double buffering), whatever the model's size
  [src: deepspeed-zero-ipg]. ZeRO 3 (``stage3.py``): one such flat buffer. ZeRO 0 (the engine's
  ``buffered_allreduce_fallback``): each bucket is flattened while it is reduced, at most
  min(bucket, local gradients). The bucket is the strategy's (``bucket_params``, or
  ``bucket_bytes`` / gradient bytes; the ``deepspeed`` profile sets DeepSpeed's 5e8).
- Megatron-LM: none; its buckets are views into the contiguous ``main_grad`` buffer, which the
  gradient line already counts (``param_and_grad_buffer.py``) [src: megatron-distopt].
- FSDP2: no persistent bucket (measured 0). Per block, ``foreach_reduce`` allocates a flat
  reduce-scatter input, copies the block's unsharded gradients into it and only then frees them
  (torch 2.13 ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`` lines 597-606: "Only after
  the copy-in finishes can we free the gradients"): two gradient copies of the block at that moment
  [src: torch-fsdp2].
- ZeRO 3: parameters gathered for compute: the block being computed and the one being prefetched
  (FSDP2's default backward prefetch of one group, ``_fsdp_param_group.py`` ``pre_backward`` line 576
  [src: torch-fsdp2]; DeepSpeed prefetches by bucket): 2 × the largest block, 16-bit; plus the
  current block's unsharded gradient (1 × the largest block; FSDP2: 2, with its reduce-scatter
  input). DeepSpeed's own estimator (``estimate_zero3_model_states_mem_needs``) charges 4 bytes ×
  largest layer for this; we count one more prefetched copy (6 bytes × largest layer in mixed
  precision; FSDP2 8).
- FSDP2 ZeRO 2 (``reshard_after_forward=False``): every block's unsharded parameters are already
  in the peak parameter bytes (:func:`simulator.memory.states.model_state_bytes`); only the current
  block's unsharded gradient and its reduce-scatter input are here.
- FSDP2 under torch's pipelining runtime (pp > 1): ``PipelineStage.backward_maybe_with_nosync`` turns
  gradient sync off for every micro-batch's backward and ``perform_reduce_grad`` reduce-scatters once, after
  the stage's last backward [src: torch-pipelining-fsdp-sync]; until then ``post_backward`` keeps every
  unsharded gradient, cast to ``reduce_dtype`` (``to_accumulated_grad_if_needed``) and added into
  (``accumulate_unsharded_grad_if_needed``): the stage's local parameters × the reduce dtype's bytes are held
  from the first backward on (``held_grads_bytes``), and the current block's fresh gradient (1 × the largest
  block, the gradient dtype) is the only per-block gradient copy, no reduce-scatter input in backward. The
  sharded gradients exist only from that reduce-scatter on (``zero_grad`` sets them to None): the forward /
  backward peak counts the held bytes in their place, the optimizer step's the sharded ones
  (:attr:`simulator.memory.stage.StageMemory.forward_peak_bytes`).

The CUDA context, library workspaces, NCCL buffers and the allocator's reserve are runtime terms:
:mod:`simulator.memory.runtime`.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.bucket_defaults import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from simulator.errors import SpecError
from simulator.strategy.formats import autocast_of, state_dtype
from simulator.strategy.kinds import MixedPrecision
from simulator.strategy.framework import Framework, resolve_framework
from simulator.strategy.kinds import ZeroStage
from simulator.workload.transformer import DtypePolicy

ZERO3_GATHERED_BLOCKS = 2
"""Blocks whose full parameters ZeRO-3 holds at once: the current one and the prefetched next
(FSDP's default forward/backward prefetch of one module; DeepSpeed prefetches by bucket)."""
FSDP2_GRAD_COPIES = 2
"""Copies of a block's unsharded gradient FSDP2 holds at once: the gradients and the reduce-scatter
input they are copied into before being freed (module docstring) [src: torch-fsdp2]."""
DEEPSPEED_OVERLAP_BUFFERS = 2
"""Reduce buffers DeepSpeed ZeRO 1-2 allocates with ``overlap_comm`` (double buffering; one without)
[src: deepspeed-zero-ipg]."""


@dataclass(frozen=True, kw_only=True)
class BufferBytes:
    """Temporary GPU buffers of one rank, by kind."""

    grad_buckets_bytes: float
    """torch DDP's bucket copy of the gradients, or DeepSpeed's reduce bucket."""
    gathered_params_bytes: float
    """ZeRO-3 parameters gathered for compute (current + prefetched block) and the current block's
    unsharded gradient."""
    held_grads_bytes: float = 0.0
    """Unsharded gradients held over the step where torch's pipelining runtime defers FSDP2's reduce-scatter to
    after the stage's last backward (:func:`simulator.strategy.sync.pipeline_defers_grad_sync`): every local
    parameter's, in the reduce dtype (module docstring)."""
    fp8_weights_bytes: float = 0.0
    """FP8 weight copies a recipe keeps (Transformer Engine; :mod:`simulator.memory.fp8`)."""
    autocast_weights_bytes: float = 0.0
    """torch autocast's 16-bit weight copies alive at the end of a forward, one set per micro-batch in
    flight (:func:`simulator.memory.autocast.cast_weight_bytes`)."""
    optimizer_step_bytes: float = 0.0
    """The optimizer step's temporaries (AdamW foreach, :func:`simulator.memory.autocast.optimizer_step_bytes`):
    alive only during the step, when activations and the other buffers but the gradient buckets are
    freed, so not in :attr:`total_bytes` (:attr:`simulator.memory.stage.StageMemory.step_peak_bytes`)."""

    @property
    def total_bytes(self) -> float:
        """The buffers alive at the forward/backward peak."""
        return (self.grad_buckets_bytes + self.gathered_params_bytes + self.held_grads_bytes + self.fp8_weights_bytes
                + self.autocast_weights_bytes)


def _deepspeed_buckets(zero: ZeroStage, bucket_elements: int, local_params: int, overlap: bool) -> int:
    """Elements of DeepSpeed's reduce buffers (module docstring): ZeRO 0 flattens one bucket at a time
    (at most the local gradients), ZeRO 1-2 keep one or, with overlap_comm, two full buckets, ZeRO 3 one."""
    if zero is ZeroStage.ZERO0:
        return min(bucket_elements, local_params)
    if zero is ZeroStage.ZERO3:
        return bucket_elements
    return bucket_elements * (DEEPSPEED_OVERLAP_BUFFERS if overlap else 1)


def buffer_bytes(*, local_params: int, largest_block: int, zero: ZeroStage, dtype: DtypePolicy,
                 framework: Framework | None = None, gradient_as_bucket_view: bool = False,
                 bucket_elements: int | None = DEEPSPEED_REDUCE_BUCKET_ELEMENTS, overlap_grad_reduce: bool = False,
                 all_reduce: bool = True, mixed_precision: MixedPrecision | None = None,
                 reduce_bytes: int | None = None, holds_grads: bool = False) -> BufferBytes:
    """Buffers for a rank whose model replica has ``local_params`` elements (its tp/pp shard) and
    whose largest block (transformer layer, embedding or head) has ``largest_block`` elements.
    ``framework`` None: torch DDP at ZeRO 0, DeepSpeed above (flat partitioning's default).
    ``bucket_elements``: the strategy's gradient bucket in elements (None: one bucket of all the
    local gradients); ``overlap_grad_reduce``: DeepSpeed's ``overlap_comm``; ``all_reduce`` False:
    a parameter server (no buckets); ``reduce_bytes``: bytes per element of the gradient reduction
    (:func:`simulator.strategy.formats.grad_reduce_dtype`; None: the gradients' own), the dtype of
    DeepSpeed's reduce buckets (``communication_data_type``) and of FSDP2's reduce-scatter input
    (``foreach_reduce`` allocates it in ``reduce_dtype``) [src: torch-fsdp2]. Offload does not change
    them: the reduce bucket and gathered blocks stay on the GPU. ``holds_grads``: FSDP2 under torch's pipelining
    runtime (:func:`simulator.strategy.sync.pipeline_defers_grad_sync`), whose backwards keep every local gradient
    unsharded until the step's one reduce-scatter."""
    zero = ZeroStage(zero)
    framework = resolve_framework(zero, None, framework)[1]
    if gradient_as_bucket_view and framework is not Framework.TORCH_DDP:
        raise SpecError("gradient_as_bucket_view", f"is a torch DDP option; {framework.value} has no DDP buckets")
    bucket = local_params if bucket_elements is None else bucket_elements
    buckets = 0
    if not all_reduce:
        pass  # a parameter server pushes the gradients as they are
    elif framework is Framework.TORCH_DDP:  # buckets in the gradients' dtype: fp32 under autocast
        buckets = 0 if gradient_as_bucket_view else \
            local_params * state_dtype(dtype, autocast_of(framework, mixed_precision)).grad_bytes
    elif framework is Framework.DEEPSPEED:
        buckets = _deepspeed_buckets(zero, bucket, local_params, overlap_grad_reduce) * (reduce_bytes or dtype.grad_bytes)
    # FSDP2: the block's unsharded gradients and the reduce-scatter input they are copied into; held over the step
    # (holds_grads): the block's fresh gradient only, added into the held copy, which is counted on its own
    held = 0.0
    if holds_grads:
        grads, held = dtype.grad_bytes, float(local_params * (reduce_bytes or dtype.grad_bytes))
    elif framework is Framework.FSDP2:
        grads = dtype.grad_bytes + (FSDP2_GRAD_COPIES - 1) * (reduce_bytes or dtype.grad_bytes)
    else:
        grads = dtype.grad_bytes
    gathered = 0
    if zero is ZeroStage.ZERO3 and holds_grads:  # its backwards keep the parameters, counted in the states' peak
        gathered = largest_block * grads  # (simulator.gather_reuse; memory.states ``pipeline_keeps_gathered``)
    elif zero is ZeroStage.ZERO3:
        gathered = largest_block * (ZERO3_GATHERED_BLOCKS * dtype.param_bytes + grads)
    elif framework is Framework.FSDP2 and zero is ZeroStage.ZERO2:
        gathered = largest_block * grads
    return BufferBytes(grad_buckets_bytes=float(buckets), gathered_params_bytes=float(gathered), held_grads_bytes=held)
