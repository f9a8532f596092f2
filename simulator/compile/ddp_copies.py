"""torch DDP's gradient-bucket passes charged in the step (:func:`ddp_copy_s`), for
:func:`simulator.compile.grad_sync.grad_sync`.

What runs, per step, on the rank's compute stream (bytes: :mod:`simulator.workload.ddp_bucket`,
[src: torch-ddp-bucket-copies]), with our executor's DDP (``executor/strategies/data_parallel.py`` ``_ddp``,
its comm hook ``executor/strategies/ddp_sync.py`` ``ReplayHook.on_bucket``):

- overlap on, no bucket views: the reducer copies each gradient into its bucket as autograd marks it ready
  (``mark_variable_ready_dense``, inside the last backward, before the bucket's all-reduce can start); the hook
  all-reduces the bucket and divides it (``buf.div_``, after that bucket's all-reduce); ``finalize_backward``
  copies every bucket back into ``param.grad`` (``copy_bucket_to_grad``) after the last bucket is reduced, before
  ``backward()`` returns and so before the optimizer: ``6·b`` per parameter.
- overlap on, bucket views: the division only, ``2·b``.
- overlap off (``no_sync`` on every micro-batch, then ``all_reduce_after_backward``): ``torch.cat`` of each
  bucket's gradients, the all-reduce, ``div_``, the copy back into each gradient: ``6·b`` whatever the views.
- the tensor and pipeline families (tp or pp > 1: no DDP wrapper, ``executor/strategies/parallel.py``) average
  their gradients after backward with ``executor/strategies/grad_sync.py`` ``average_gradients``: per bucket
  ``torch.cat``, the all-reduce, ``flat /= size`` and the copy back, the same ``6·b``, and nothing at dp = 1
  (it returns before packing).

Where they are charged: all three passes as one memory-bound kernel on the compute stream after the gradient
sync's last bucket, before the optimizer (added to the stage's ``optimizer_s``, so both engines place them
alike; on an ``inline`` device, the CPU, times the processes per core, ``host_overhead.stream``). Against the
run's order this is exact when the compute stream is the critical path (world size 1, where the reducer still
copies; or every all-reduce hidden behind backward): the stream then runs backward, the copies and the last
bucket's all-reduce in sequence either way. When the all-reduces queue up behind one another
(communication-bound), the run overlaps the earlier buckets' copy-ins and divisions with that queue, and this
charge is high by at most the copy-in and division time. Routed experts under ep > 1 are left out of DDP
(``_set_params_and_buffers_to_ignore_for_model``) and out of these bytes.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.cluster.spec import Device
from simulator.compute import kernel_s
from simulator.framework_host import runs_ddp_reducer
from simulator.strategy import ParallelLayout
from simulator.workload.ddp_bucket import ddp_bucket_bytes_per_param, ddp_bucket_kernel
from simulator.workload.kinds import DtypePolicy

__all__ = ["bucket_bytes_per_param", "ddp_copy_s", "runs_ddp_reducer", "uses_bucket_views"]


def bucket_bytes_per_param(layout: ParallelLayout, grad_bytes: int) -> int:
    """Bytes per gradient element the passes move per step (module docstring): the data-parallel family's DDP
    (tp = pp = 1) ``6·b``, or ``2·b`` with bucket views; the tensor and pipeline families' own average ``6·b`` at
    dp > 1, else 0; 0 outside torch's framework at ZeRO 0/1."""
    if not runs_ddp_reducer(layout):
        return 0
    if layout.tp == 1 and layout.pp == 1:
        return ddp_bucket_bytes_per_param(grad_bytes, uses_bucket_views(layout))
    return ddp_bucket_bytes_per_param(grad_bytes, False) if layout.dp_cp > 1 else 0


def uses_bucket_views(layout: ParallelLayout) -> bool:
    """Whether the gradients are views of the buckets for the pass that syncs them: ``gradient_as_bucket_view``
    with the reducer's overlapped sync; the executor's sync after backward concatenates them anyway."""
    s = layout.strategy
    return s.gradient_as_bucket_view and s.dp_sync.overlap_grad_reduce


def ddp_copy_s(device: Device, dtype: DtypePolicy, grad_bytes: int, params: float, layout: ParallelLayout) -> float:
    """Seconds per step of the passes over ``params`` gradients of ``grad_bytes`` each (module docstring):
    ``params · bucket_bytes_per_param / B_hbm`` through :func:`simulator.compute.kernel_s`; 0 where none run."""
    per_param = bucket_bytes_per_param(layout, grad_bytes)
    if per_param == 0 or params <= 0:
        return 0.0
    return kernel_s(device, dtype, replace(ddp_bucket_kernel(params, grad_bytes, False), bytes=params * per_param))
