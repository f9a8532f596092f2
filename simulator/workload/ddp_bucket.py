"""torch DDP's copies between the gradients and its all-reduce buckets: memory-bound passes once per step.

torch's ``DistributedDataParallel`` reduces gradients in flat buckets. With ``gradient_as_bucket_view=False`` (its
default) the gradients are separate tensors, so the reducer copies each one into its bucket when autograd's
``AccumulateGrad`` hook marks it ready, divides the bucket by the world size, and after the all-reduce copies the
bucket back into the gradients; ``gradient_as_bucket_view=True`` makes the gradients views of the buckets, which
"avoids the overhead of copying between gradients and allreduce communication buckets", leaving the division
(``torch/nn/parallel/distributed.py``, the ``gradient_as_bucket_view`` and ``batched_grad_copy`` docstrings)
[src: torch-ddp-bucket-copies]. Per parameter, with ``b`` the gradients' bytes per element (fp32 under autocast):

    copies:  copy in (read b, write b) + divide (read b, write b) + copy back (read b, write b) = 6·b
    views:   divide (read b, write b)                                                         = 2·b

They run once per step (under ``no_sync`` the earlier micro-batches' hooks do not fire) at any world size, 1
included. Seen in our H200 trace of GPT-3 1.3B under torch DDP at world size 1 (torch 2.11, fp32 gradients under
autocast, 1.316e9 parameters) [src: own-h200-2026-11-24]: per step 292 ``torch::distributed::reducer::copy_``
(one per parameter tensor, device-to-device memcpys), 73 ``div_`` (one per bucket) and 292
``copy_bucket_to_grad``: 8.2 ms of kernels, against ``6 · 4 · 1.316e9 = 31.6 GB``.

The step estimate charges them (:mod:`simulator.compile.ddp_copies`, which says where they fall and where it
places them); the kernel trace comparison (``benchmarks/gpu_compare_trace.py``) times them as their own class.
"""

from __future__ import annotations

from simulator.workload.ops import Kernel

__all__ = ["COPY_PASSES", "ddp_bucket_bytes_per_param", "ddp_bucket_kernel"]

COPY_PASSES = 3
"""Read-and-write passes per gradient element without bucket views: copy in, divide, copy back."""


def ddp_bucket_bytes_per_param(grad_bytes: int, gradient_as_bucket_view: bool) -> int:
    """Bytes per parameter torch DDP's reducer moves per step (module docstring): ``6·b``, or ``2·b`` with
    bucket views."""
    return 2 * grad_bytes * (1 if gradient_as_bucket_view else COPY_PASSES)


def ddp_bucket_kernel(params: float, grad_bytes: int, gradient_as_bucket_view: bool) -> Kernel:
    """The reducer's passes over ``params`` parameters as one memory-bound kernel record (no operator of its own
    counted: the reducer dispatches from C++)."""
    return Kernel(name="ddp_bucket_copies", flops=0.0, gemm=False, dispatches=0,
                  bytes=float(params * ddp_bucket_bytes_per_param(grad_bytes, gradient_as_bucket_view)))
