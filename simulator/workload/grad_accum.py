"""Gradient accumulation's adds: the memory-bound kernel that adds each micro-batch's weight gradients into the
buffer they accumulate in, inside the backward of the chunk that owns the parameters.

Per micro-batch, a rank holding ``N`` parameters in a unit adds ``N`` new gradients of ``b_grad`` bytes into an
accumulator of ``b_acc`` bytes per element: one kernel reading both and writing the accumulator,

    bytes = N · (2·b_acc + b_grad)

timed like every memory-bound kernel at the device's achievable HBM bandwidth (:mod:`simulator.compute`). Who
adds, and in what formats (:class:`GradAdd`, resolved from the framework by :mod:`simulator.compile.grad_adds`):

- torch's autograd (``AccumulateGrad``: ``variable_grad += new_grad`` into an existing ``.grad``
  [src: torch-eager-decompositions]) under torch DDP: ``b_acc = b_grad`` = the parameters' format (fp32 under
  autocast): 3·b_grad per parameter. The executor's data-parallel family keeps ``.grad`` between steps
  (``zero_grad(set_to_none=False)``), so every micro-batch's backward adds; its tensor/pipeline family zeroes with
  torch's default ``set_to_none=True``, so the first micro-batch of a step hands its gradient over instead: one
  add per step fewer, credited once per step in the optimizer phase (:mod:`simulator.compile.grad_adds`). The cost
  per micro-batch does not depend on the global batch, so one compiled micro-batch serves every batch
  (:mod:`simulator.analytical_structures`).
- Megatron-LM without gradient-accumulation fusion (strategy field ``unfused_grad_accumulation``): its DDP
  hook adds ``param.grad`` (the parameters' format) into ``main_grad`` (fp32 or the parameters' format: the
  gradient-reduction format) and frees ``.grad``, every micro-batch [src: megatron-ddp-main-grad]; Megatron-LM
  2021 under ``--fp16`` had no ``main_grad`` buffer (contiguous buffers were opt-in and fp32 accumulation forced
  only for bf16), so autograd accumulated the fp16 ``.grad`` itself: the same 3 × 2 bytes per parameter, less
  the first micro-batch's (``zero_grad(set_to_none=True)``: it assigns), credited once per step with that code's
  other per-step passes (strategy field ``megatron_unbuffered_grads``, :mod:`simulator.compile.megatron_step`).
  With the fusion (Megatron-Core's default ``gradient_accumulation_fusion``) the weight-gradient GEMM
  accumulates into ``main_grad`` itself: no kernel of its own.
- FSDP1/FSDP2 and DeepSpeed ZeRO-2/3 free the unsharded gradient after its reduce-scatter and accumulate the
  1/dp shard on the reduction stream (FSDP2: ``foreach_reduce``'s ``sharded_param.grad += ...`` inside
  ``with device_handle.stream(post_reduce_stream)`` [src: torch-fsdp2-copies]): nothing on the compute stream.

The kernel joins the backward of the operation that owns the parameters (a block's element-wise operation, as
the bias gradients do; the embedding; the output layer), with no dispatched operator of its own: eager torch's
``add_`` per parameter is already counted with the weight gradients (:mod:`simulator.workload.eager_dispatch`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.errors import SpecError
from simulator.workload.ops import Kernel, OpKind, OpWork

__all__ = ["GradAdd", "grad_add_kernel", "with_grad_add"]


@dataclass(frozen=True)
class GradAdd:
    """The formats of one gradient-accumulation add (module docstring)."""

    accumulator_bytes: int
    """Bytes per element of the buffer gradients accumulate in (``.grad`` or ``main_grad``)."""
    gradient_bytes: int
    """Bytes per element of each micro-batch's new gradient."""

    def __post_init__(self) -> None:
        for name in ("accumulator_bytes", "gradient_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(f"grad_add.{name}", f"must be a positive number of bytes, got {value!r}")

    @property
    def bytes_per_param(self) -> int:
        """Read the accumulator and the new gradient, write the accumulator: ``2·b_acc + b_grad``."""
        return 2 * self.accumulator_bytes + self.gradient_bytes


def grad_add_kernel(add: GradAdd, params: float) -> Kernel:
    """The add over ``params`` parameters (module docstring): ``params · (2·b_acc + b_grad)`` bytes, no operator
    dispatched of its own."""
    return Kernel(name="grad_accumulate", flops=0.0, bytes=float(params * add.bytes_per_param), gemm=False,
                  dispatches=0)


def with_grad_add(works: list[OpWork], add: GradAdd | None, params: float, owner: OpKind) -> list[OpWork]:
    """``works`` with the add over ``params`` parameters at the end of ``owner``'s backward (the first operation of
    that kind); unchanged without an add or parameters."""
    if add is None or params <= 0:
        return works
    at = next(i for i, w in enumerate(works) if w.op is owner)
    return [replace(w, bwd=w.bwd + (grad_add_kernel(add, params),)) if i == at else w for i, w in enumerate(works)]
