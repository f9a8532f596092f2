"""DeepSpeed ZeRO-3 parameter gathers as DeepSpeed issues them (the FSDP2 / generic per-block gathers
are :mod:`simulator.compile.zero_part`'s).

DeepSpeed's stage 3 does not gather a block at a time. Read in the 2021 code (the 0.4-0.5 releases, the
DeepSpeed the Narayanan et al. SC'21 ZeRO-3 rows ran; config defaults at commit 02a63e4 of
``deepspeed/runtime/zero/constants.py``) [src: deepspeed-zero3-coordinator]:

- granularity: the ``PartitionedParameterCoordinator`` fetches the parameters of each submodule in
  the order the first step traced, and ``partition_parameters.py``'s ``_allgather_params_coalesced``
  launches **one all-gather per parameter tensor** (a loop of ``all_gather`` calls, one per
  ``param.ds_tensor``). Calls per block = its non-persistent tensors (Q/K/V, attention output, the two
  MLP matrices: 4 for a GPT block, 6 with separate Q, K, V); bytes per call = the tensor's
  (tensor-parallel shard's) elements × parameter bytes. ``allgather_bucket_size`` is the ZeRO-1/2
  after-step gather's and does not apply here.
- persistence: a tensor of fewer than ``stage3_param_persistence_threshold`` (default 1e5) elements is
  kept whole on every rank ("communicated once after the parameters are updated and persisted",
  ``constants.py``): never gathered (biases and norms of every block up to hidden 25,000).
- prefetch depth: after fetching a submodule the coordinator issues the next tensors in trace order
  until ``stage3_prefetch_bucket_size`` (default 5e7) elements are in flight, bounded by
  ``stage3_max_live_parameters`` (default 1e9) live elements. Modelled as a prefetch depth in calls,
  ``k = max(1, ⌈prefetch_bucket / m̄⌉)`` with ``m̄`` the chunk's mean gathered tensor, capped at
  ``max(1, ⌊max_live / m̄⌋ − 1)`` (the current tensor stays live): gather i may start once block
  slice i − k has started (:func:`simulator.analytical.exposed_gathers`, the DES's gather stream).
- the gradients: reduce-scattered in ``reduce_bucket_size`` buckets (default 5e8 elements, the
  profile's ``bucket_params``), every micro-batch (:func:`simulator.compile.comm_part.zero_grad_reduce_scatters`).
  ``stage3.py``'s backward hook adds each gradient to the bucket and reduces the bucket once the next
  would overflow it [src: deepspeed-zero]: bucket j is issued after the gather of the tensor (reverse
  trace order) whose gradient completes it (:func:`backward_calls`), not after the whole backward's gathers.
  (The 2021 code then reduces the bucket one parameter per call, ``reduce_gradients_at_owner``: not modelled,
  ``docs/validation.md`` fid19.)

The engines split an action's compute evenly over its calls (one slice per call, the tensors' FLOPs
are not weighed: an approximation). Backward gathers run in reverse trace order. Workloads without
tensor shapes (layer lists), expert-parallel layouts (ep > 1) and offloaded parameters keep the
per-block gathers.

The same 2021 code calls torch's **list** collectives, and its coordinator **synchronises the device on every
fetch** (fid19):

- ``_allgather_param`` gathers into ``partitions``, n narrow views of a flat buffer, with
  ``torch.distributed.all_gather(partitions, partitions[rank], ...)``; with a list of outputs torch's
  ``ProcessGroupNCCL::allgather`` gathers into a flattened buffer of its own and then copies it out, one ``copy_``
  per output (per rank) on the NCCL stream [src: torch-pg-nccl-list-collectives]. ``_reduce_scatter_gradient``
  likewise passes n input views to ``dist.reduce_scatter``, which ``flatten_for_scatter_gather`` copies into one
  buffer first. Each call therefore moves its bytes twice more through HBM (read + write: ``2·S`` at the
  achievable bandwidth, :func:`list_copy_s`), on the NCCL stream after (before) the collective.
- ``fetch_sub_module`` ends in ``_synchronize_communication``: ``comm_stream.synchronize()`` and
  ``torch.cuda.synchronize()`` whenever it gathered or waited for a parameter; ``pre_sub_module_forward_function``
  (and its backward twin) then issues the next tensors' prefetch and only after it returns does the module's
  forward run [src: deepspeed-zero3-coordinator]. After the synchronise the device has nothing queued, so the host
  time of issuing each prefetched gather is time the compute stream waits: at least the n ``copy_`` launches of
  the list all-gather, ``n × kernel_launch_overhead_us`` per gathered tensor (:func:`sync_fetch_host_s`); the
  coordinator's own Python (n ``narrow`` views per tensor, the trace bookkeeping) is left out, so the term is a
  lower bound. It is charged to the chunk's forward and backward compute, as the framework host terms are
  (:mod:`simulator.framework_host`), added rather than overlapped because the synchronise leaves nothing to overlap.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.bucket_defaults import DEEPSPEED_ZERO3, DeepSpeedZero3Config
from simulator.cluster.spec import Device
from simulator.collectives.base import Op
from simulator.compile import comm_part
from simulator.compile.costs import CostCache
from simulator.compute import achievable_hbm_Bps, runs_cuda_kernels
from simulator.work import CommCall, CommKind

LIST_COPY_PASSES = 2
"""HBM passes of torch's list-collective copy (one read and one write of the call's bytes): ``ProcessGroupNCCL``'s
copy-out of an ``all_gather`` into n output tensors, ``flatten_for_scatter_gather``'s copy-in of a
``reduce_scatter``'s n inputs [src: torch-pg-nccl-list-collectives]."""


def chunk_tensor_numels(workload, layout, c: int) -> tuple[int, ...] | None:
    """Element counts of chunk ``c``'s parameter tensors on one tensor-parallel rank, in forward trace
    order (embedding, blocks, final norm and head), or None when the workload has no tensor shapes."""
    from simulator.memory.shapes import embedding_shapes, head_shapes, layer_param_shapes, numel

    if not getattr(workload, "has_activation_shapes", False) or layout.ep > 1:
        return None
    n, start = layout.pp * layout.v, sum(layout.layers_per_stage[:c])
    shapes = embedding_shapes(workload, layout.tp) if c == 0 else []
    for i in range(start, start + layout.layers_per_stage[c]):
        shapes += layer_param_shapes(workload, i, layout.tp)
    if c == n - 1:
        shapes += head_shapes(workload, layout.tp, separate_stage=n > 1)
    return tuple(numel(shape) for _, shape in shapes)


def gathers(cache: CostCache, group: tuple[int, ...], numels: tuple[int, ...], pbytes: float, concurrent: int,
            config: DeepSpeedZero3Config = DEEPSPEED_ZERO3) -> tuple[tuple[CommCall, ...], int]:
    """(one micro-batch's forward all-gathers, prefetch depth in calls): one call per gathered tensor,
    ``numel × pbytes`` bytes each, in trace order; equal sizes share one CommCall."""
    gathered = config.gathered(numels)
    if len(group) < 2 or not gathered:
        return (), 1
    made: dict[int, CommCall | None] = {}
    for n in gathered:
        if n not in made:
            made[n] = with_list_copy(cache.cluster.device, comm_part.call(
                cache, CommKind.ZERO, Op.ALL_GATHER, group, n * pbytes, concurrent))
    calls = tuple(made[n] for n in gathered if made[n] is not None)
    return calls, config.prefetch_calls(gathered)


def list_copy_s(device: Device, nbytes: float) -> float:
    """Seconds of torch's list-collective copy of an ``nbytes`` call on ``device``:
    ``LIST_COPY_PASSES · nbytes / B_hbm`` at the achievable HBM bandwidth (module docstring); 0 off a CUDA device."""
    if not runs_cuda_kernels(device):
        return 0.0
    return LIST_COPY_PASSES * nbytes / achievable_hbm_Bps(device)


def with_list_copy(device: Device, call: CommCall | None) -> CommCall | None:
    """``call`` lengthened by its list copy (:func:`list_copy_s`): the copy runs on the call's NCCL stream, after the
    all-gather or before the reduce-scatter, so nothing else on that stream overlaps it."""
    if call is None:
        return None
    return replace(call, time_s=call.time_s + list_copy_s(device, call.nbytes))


def sync_fetch_host_s(device: Device, ranks: int, gathers: int) -> float:
    """Host seconds the compute stream waits for in one action: ``gathers × ranks × kernel_launch_overhead_us``,
    the n ``copy_`` launches of each gathered tensor's list all-gather, issued after the coordinator's device
    synchronise (module docstring); 0 off a CUDA device. Hand-worked: 386 gathers of GPT-3 175B's forward on
    384 A100s at 5 µs: 386 × 384 × 5e-6 = 0.741 s."""
    if not runs_cuda_kernels(device) or ranks < 2:
        return 0.0
    return gathers * ranks * device.kernel_launch_overhead_us * 1e-6


def backward_calls(numels: tuple[int, ...], fwd_gathers: tuple[CommCall, ...], reduce_scatters: tuple[CommCall, ...],
                   config: DeepSpeedZero3Config = DEEPSPEED_ZERO3) -> tuple[CommCall, ...]:
    """One micro-batch's backward ZeRO stream: the gathers in reverse trace order, each gradient bucket
    (``reduce_scatters``, last layers first) right after the gather of the tensor whose gradient fills
    it: bucket j once the reverse-order elements done reach its cumulative share of the gradient bytes,
    ``Σ_{i≤j} bytes_i / Σ bytes ≤ done / total`` (exact integers)."""
    gathered = list(fwd_gathers[::-1])
    rs_ends, acc = [], 0
    for c in reduce_scatters:
        acc += c.nbytes
        rs_ends.append(acc)
    total, out, done, j = sum(numels), [], 0, 0
    for n in numels[::-1]:
        if n >= config.param_persistence_threshold_elements and gathered:
            out.append(gathered.pop(0))
        done += n
        while j < len(reduce_scatters) and rs_ends[j] * total <= done * acc:
            out.append(reduce_scatters[j])
            j += 1
    return tuple(out + gathered + list(reduce_scatters[j:]))


def backward_stream(cache: CostCache, group: tuple[int, ...], numels: tuple[int, ...],
                    fwd_gathers: tuple[CommCall, ...],
                    reduce_scatters: tuple[CommCall, ...]) -> tuple[tuple[CommCall, ...], float, float]:
    """(one micro-batch's backward ZeRO stream, forward and backward host seconds of the synchronised fetches):
    the reduce-scatters with their list copy-in (:func:`with_list_copy`) placed by :func:`backward_calls`, and
    :func:`sync_fetch_host_s` of the forward's and the backward's gathers."""
    device = cache.cluster.device
    reduce_scatters = tuple(with_list_copy(device, c) for c in reduce_scatters)
    stream = backward_calls(numels, fwd_gathers, reduce_scatters)
    ranks = len(group)
    return (stream, sync_fetch_host_s(device, ranks, len(fwd_gathers)),
            sync_fetch_host_s(device, ranks, len(stream) - len(reduce_scatters)))
