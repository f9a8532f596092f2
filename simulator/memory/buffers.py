"""Temporary GPU buffers and the allowance for framework overhead, per rank.

Buffers follow the framework (:class:`~simulator.strategy.framework.Framework`), each a named default:

- torch DDP (ZeRO 0, and ZeRO 1 with ``ZeroRedundancyOptimizer``, which runs under DDP): gradients
  are copied into flat all-reduce buckets (``bucket_cap_mb`` = 25) unless
  ``gradient_as_bucket_view=True``; with torch's default (False) the buckets together hold a second
  copy of every gradient (``torch/nn/parallel/distributed.py``, ``gradient_as_bucket_view`` docstring:
  "the saved memory size will be equal to the total gradients size"); with True the ``.grad``
  tensors are views into the buckets: no extra bytes. Measured exactly (docs/memory_measured.md).
- DeepSpeed: gradients are reduced through one bucket of ``reduce_bucket_size``
  (:data:`~simulator.bucket_defaults.DEEPSPEED_REDUCE_BUCKET_ELEMENTS`, 5e8 elements by DeepSpeed's
  config docs), or the rank's whole gradient when that is smaller.
- FSDP2: no persistent bucket (measured 0); the reduce-scatter input of one block is the
  "current block's unsharded gradient" below.
- ZeRO 3: parameters gathered for compute: the block being computed and the next one being
  prefetched (2 × the largest block, 16-bit), plus the current block's full gradient before its
  reduce-scatter (1 × the largest block). DeepSpeed's own estimator
  (``estimate_zero3_model_states_mem_needs``) charges 4 bytes × largest layer for this; we count
  one more prefetched copy (6 bytes × largest layer in mixed precision).
- FSDP2 ZeRO 2 (``reshard_after_forward=False``): every block's unsharded parameters are already
  in the peak parameter bytes (:func:`simulator.memory.states.model_state_bytes`); only the current
  block's unsharded gradient is gathered here.

Overhead (shown as its own line): ``FIXED_OVERHEAD_BYTES`` for the CUDA context, NCCL channel
buffers and the cuBLAS workspace, plus ``FRAGMENTATION_FRACTION`` of the activations and buffers
(memory the caching allocator reserves but cannot hand out). Both are assumptions, stated below;
``torch.cuda.memory_reserved() - memory_allocated()`` and ``nvidia-smi`` minus reserved measure them.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.bucket_defaults import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from simulator.errors import SpecError
from simulator.strategy.framework import Framework, resolve_framework
from simulator.strategy.kinds import ZeroStage
from simulator.workload.transformer import DtypePolicy

ZERO3_GATHERED_BLOCKS = 2
"""Blocks whose full parameters ZeRO-3 holds at once: the current one and the prefetched next
(FSDP's default forward/backward prefetch of one module; DeepSpeed prefetches by bucket)."""
FIXED_OVERHEAD_BYTES = 1024**3
"""Assumption, 1 GiB per GPU: CUDA context (~0.3-0.5 GiB on A100/H100 with CUDA 12, measured by
users as nvidia-smi usage of an idle process after ``torch.cuda.init()``), NCCL buffers
(``NCCL_BUFFSIZE`` 4 MiB per channel per peer) and the cuBLAS workspace (``:4096:8``, 32 MiB);
rounded up. Replace with a measurement of the target system."""
FRAGMENTATION_FRACTION = 0.10
"""Assumption: the PyTorch caching allocator reserves ~10% more than the activations and temporary
buffers it serves (segments split by varying sizes). Not sourced; measure with memory_stats()."""


@dataclass(frozen=True, kw_only=True)
class BufferBytes:
    """Temporary GPU buffers of one rank, by kind."""

    grad_buckets_bytes: float
    """torch DDP's bucket copy of the gradients, or DeepSpeed's reduce bucket."""
    gathered_params_bytes: float
    """ZeRO-3 parameters gathered for compute (current + prefetched block) and the current block's
    unsharded gradient."""

    @property
    def total_bytes(self) -> float:
        return self.grad_buckets_bytes + self.gathered_params_bytes


def buffer_bytes(*, local_params: int, largest_block: int, zero: ZeroStage, dtype: DtypePolicy,
                 framework: Framework | None = None, gradient_as_bucket_view: bool = False) -> BufferBytes:
    """Buffers for a rank whose model replica has ``local_params`` elements (its tp/pp shard) and
    whose largest block (transformer layer, embedding or head) has ``largest_block`` elements.
    ``framework`` None: torch DDP at ZeRO 0, DeepSpeed above (flat partitioning's default).
    Offload does not change them: the reduce bucket and gathered blocks stay on the GPU."""
    zero = ZeroStage(zero)
    framework = resolve_framework(zero, None, framework)[1]
    if gradient_as_bucket_view and framework is not Framework.TORCH_DDP:
        raise SpecError("gradient_as_bucket_view", f"is a torch DDP option; {framework.value} has no DDP buckets")
    if framework is Framework.TORCH_DDP:
        buckets = 0 if gradient_as_bucket_view else local_params * dtype.grad_bytes
    elif framework is Framework.DEEPSPEED:
        buckets = min(DEEPSPEED_REDUCE_BUCKET_ELEMENTS, local_params) * dtype.grad_bytes
    else:
        buckets = 0
    gathered = 0
    if zero is ZeroStage.ZERO3:
        gathered = largest_block * (ZERO3_GATHERED_BLOCKS * dtype.param_bytes + dtype.grad_bytes)
    elif framework is Framework.FSDP2 and zero is ZeroStage.ZERO2:
        gathered = largest_block * dtype.grad_bytes
    return BufferBytes(grad_buckets_bytes=float(buckets), gathered_params_bytes=float(gathered))


def overhead_bytes(*, activations_bytes: float, buffers_bytes: float) -> float:
    """Framework overhead: fixed CUDA/NCCL/cuBLAS allowance + fragmentation of the transient memory."""
    return FIXED_OVERHEAD_BYTES + FRAGMENTATION_FRACTION * (activations_bytes + buffers_bytes)
