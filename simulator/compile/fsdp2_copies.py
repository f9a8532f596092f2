"""FSDP2's copies on the compute stream: the all-gather copy-out and the reduce-scatter copy-in.

FSDP2 (``fully_shard``) gathers a module's parameters into one flat buffer and reduce-scatters its gradients
from one; both buffers are filled or emptied by a device copy that runs on the **compute** stream, between the
module's kernels [src: torch-fsdp2-copies]:

- *copy-out* (``foreach_all_gather_copy_out``, called from ``FSDPParamGroup.wait_for_unshard`` on the current
  stream after waiting for the all-gather): ``split_with_sizes_copy`` reads the all-gather output and writes
  every unsharded parameter, 2·G bytes for a gather of G bytes. One per gather: forward and backward under
  ZeRO-3 (``reshard_after_forward=True``), forward only under ZeRO-2.
- *copy-in* (``foreach_reduce`` → ``foreach_reduce_scatter_copy_in``, before ``reduce_scatter_stream.wait_stream
  (current_stream)``): ``chunk_cat`` reads the module's unsharded gradients and writes the reduce-scatter input in
  ``reduce_dtype``, widening bf16 to fp32 in the same pass: N·(b_grad + b_reduce) bytes for N gradients. One
  per module and micro-batch, in backward (every micro-batch reduce-scatters; ``comm_part``).

Each is a memory-bound kernel at the device's achievable HBM bandwidth (:func:`simulator.compute.memory_kernel_s`):

    t_fwd = g_fwd · (2·G_block·L + 2·G_edge) / B_hbm
    t_bwd = g_bwd · (2·G_block·L + 2·G_edge) / B_hbm + (N_block·L + N_edge)·(b_grad + b_reduce) / B_hbm

with L the chunk's blocks, G the gathered bytes (:func:`simulator.compile.zero_part.gathered_block_bytes`, the
edge modules' at the parameter format), g_fwd = 1 and g_bwd = 1 (ZeRO-3) or 0 (ZeRO-2), b_grad the unsharded
gradients' bytes per element (the parameters' format, :func:`simulator.strategy.formats.sync_dtype`) and b_reduce
the reduction's (:func:`simulator.strategy.formats.grad_reduce_dtype`: 4 under torchtitan's fp32 reduce).
The all-gather copy-in (the shard, 1/dp of the module, cast from the fp32 shard on its own stream) and the
reduce-scatter output's division and accumulation (1/dp, on the reduce-scatter stream) are left out.

Under torch's pipelining runtime (FSDP2 with pp > 1, :func:`simulator.strategy.sync.pipeline_defers_grad_sync`)
no micro-batch's backward copies into a reduce-scatter input: it casts or accumulates the held unsharded gradients
instead (:func:`accumulate_bytes_per_grad`, in place of b_grad + b_reduce), and the one copy-in per step, before the
deferred reduce-scatters after the stage's last backward (2·b_reduce per element), is left out: N·8 bytes once per
step: 28 GB, ~10 ms at an H100's achievable 2.9 TB/s for the 3.5·10⁹ local parameters of a DeepSeek-V3 rank at
pp 4 / ep 64 (the AutoModel rows of docs/validation.md), beside steps of 7-29 s.

FSDP1 (``FullyShardedDataParallel``, strategy field ``fsdp1_flat_params``) has neither copy on the compute stream
[src: torch-fsdp1-flat-param]: ``FlatParamHandle._all_gather_flat_param`` gathers into the padded unsharded
``FlatParameter`` whose views the parameters are, and ``_post_backward_hook`` casts the gradient to
``reduce_dtype`` inside ``with ...stream(state._post_backward_stream)``, off the compute stream.
"""

from __future__ import annotations

from simulator.compile.compute_part import ChunkCompute
from simulator.compile.zero_part import gathered_block_bytes
from simulator.compute import memory_kernel_s
from simulator.strategy import ParallelLayout, ZeroStage
from simulator.strategy.formats import grad_reduce_dtype, sync_dtype
from simulator.strategy.framework import Framework
from simulator.strategy.sync import pipeline_defers_grad_sync


def fsdp2_copies(workload, layout: ParallelLayout, cc: ChunkCompute) -> tuple[float, float, float]:
    """(copy-out bytes of one gather of the chunk, copy-in bytes of one micro-batch's backward, gathers in
    backward) of FSDP2 on this chunk (module docstring); zeros when FSDP2 does not shard over dp > 1."""
    s = layout.strategy
    if layout.framework is not Framework.FSDP2 or s.zero < ZeroStage.ZERO2 or layout.dp_cp < 2 or s.fsdp1_flat_params:
        return 0.0, 0.0, 0.0
    pbytes = sync_dtype(workload.dtype, s).param_bytes
    gather = cc.blocks * gathered_block_bytes(workload, layout, cc) + cc.edge_params * pbytes
    b_grad, b_reduce = sync_dtype(workload.dtype, s).grad_bytes, grad_reduce_dtype(workload.dtype, s).grad_bytes
    per_grad = (accumulate_bytes_per_grad(b_grad, b_reduce, layout.micro_batches)
                if pipeline_defers_grad_sync(s) else b_grad + b_reduce)
    copy_in = (cc.blocks * cc.layer_params + cc.edge_params) * per_grad
    return 2.0 * gather, copy_in, 1.0 if s.zero is ZeroStage.ZERO3 else 0.0


def accumulate_bytes_per_grad(b_grad: int, b_reduce: int, m: int) -> float:
    """Bytes per unsharded gradient element, averaged over a step's ``m`` micro-batches, that FSDP2 moves on the
    compute stream where torch's pipelining runtime defers its reduce-scatter to the step's end
    (:func:`simulator.strategy.sync.pipeline_defers_grad_sync`): ``post_backward`` keeps each gradient instead of
    copying it into a reduce-scatter input. With ``reduce_dtype`` wider than the gradient, the first micro-batch
    casts it (``to_accumulated_grad_if_needed``: b_grad + b_reduce) and each later one adds into the cast copy
    (``accumulate_unsharded_grad_if_needed``, ``+=``: b_grad + 2·b_reduce); in one dtype autograd accumulates into
    ``.grad`` from the second micro-batch on (3·b_grad) [src: torch-pipelining-fsdp-sync]. The once-per-step copy-in
    before the deferred reduce-scatters (2·b_reduce per element, once) is left out (module docstring)."""
    later = b_grad + 2 * b_reduce if b_reduce != b_grad else 3 * b_grad
    first = b_grad + b_reduce if b_reduce != b_grad else 0
    return (first + (m - 1) * later) / m


def fsdp2_copy_s(cache, workload, layout: ParallelLayout, cc: ChunkCompute) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch that FSDP2's copies add to the chunk's compute stream."""
    out_bytes, in_bytes, bwd_gathers = fsdp2_copies(workload, layout, cc)
    if not out_bytes:
        return 0.0, 0.0
    device = cache.cluster.device

    def kernel_s(nbytes: float) -> float:
        return memory_kernel_s(device, workload.dtype, nbytes) if nbytes else 0.0

    copy_out_s = kernel_s(out_bytes)
    return copy_out_s, bwd_gathers * copy_out_s + kernel_s(in_bytes)
