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
- the gradients: every micro-batch, in ``reduce_bucket_size`` buckets (default 5e8 elements, the profile's
  ``bucket_params``; a layout's ``bucket_bytes`` otherwise, in elements of the reduced gradient), **one list
  reduce-scatter per parameter tensor** (fid20). ``stage3.py``'s gradient hook
  (``reduce_independent_p_g_buckets_and_remove_grads``) reduces the bucket when the arriving gradient would
  overflow it, then adds that gradient; ``reduce_ipg_grads`` → ``average_tensor`` →
  ``reduce_gradients_at_owner`` → ``_reduce_scatter_gradients`` issues one ``_reduce_scatter_gradient`` per
  parameter of the bucket (a tensor larger than the bucket rides alone as its "extra large" parameter); the last
  bucket is reduced in the backward's epilogue [src: deepspeed-zero3-coordinator]. Persistent tensors are
  reduce-scattered like the rest (every parameter has the hook). :func:`backward_calls` places them.

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
from simulator.compile.ds_zero3_reuse import Event, EventKind, backward_events
from simulator.compute import achievable_hbm_Bps, runs_cuda_kernels
from simulator.strategy.formats import grad_reduce_dtype
from simulator.strategy.sync import reduces_every_micro_batch
from simulator.work import CommCall, CommKind
from simulator.workload.flops import Recompute

LIST_COPY_PASSES = 2
"""HBM passes of torch's list-collective copy (one read and one write of the call's bytes): ``ProcessGroupNCCL``'s
copy-out of an ``all_gather`` into n output tensors, ``flatten_for_scatter_gather``'s copy-in of a
``reduce_scatter``'s n inputs [src: torch-pg-nccl-list-collectives]."""


def chunk_tensor_shapes(workload, layout, c: int) -> list | None:
    """(name, shape) of chunk ``c``'s parameter tensors on one tensor-parallel rank, in forward trace order
    (embedding, blocks, final norm and head), or None when the workload has no tensor shapes."""
    from simulator.memory.shapes import embedding_shapes, head_shapes, layer_param_shapes

    if not getattr(workload, "has_activation_shapes", False) or layout.ep > 1:
        return None
    n, start = layout.pp * layout.v, sum(layout.layers_per_stage[:c])
    shapes = embedding_shapes(workload, layout.tp) if c == 0 else []
    for i in range(start, start + layout.layers_per_stage[c]):
        shapes += layer_param_shapes(workload, i, layout.tp)
    if c == n - 1:
        shapes += head_shapes(workload, layout.tp, separate_stage=n > 1)
    return shapes


def chunk_tensor_numels(workload, layout, c: int) -> tuple[int, ...] | None:
    """Element counts of :func:`chunk_tensor_shapes`, or None."""
    from simulator.memory.shapes import numel

    shapes = chunk_tensor_shapes(workload, layout, c)
    return None if shapes is None else tuple(numel(shape) for _, shape in shapes)


def chunk_backward_events(workload, layout, c: int) -> tuple[Event, ...] | None:
    """Chunk ``c``'s backward gathers and gradient arrivals under DeepSpeed 2021's reuse-distance rule, full
    recomputation re-running each block's submodules (:func:`simulator.compile.ds_zero3_reuse.backward_events`)."""
    from simulator.memory.shapes import numel

    shapes = chunk_tensor_shapes(workload, layout, c)
    if shapes is None:
        return None
    names, numels = tuple(n for n, _ in shapes), tuple(numel(shape) for _, shape in shapes)
    full = layout.strategy.recompute is Recompute.FULL
    return backward_events(names, numels, full, bool(getattr(workload, "tied_embeddings", False)))


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


def reduce_buckets(numels: tuple[int, ...], bucket_elements: int | None) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """DeepSpeed 2021's reduce buckets of one backward (module docstring): ``(hook, tensors)`` per bucket, ``tensors``
    the indices into ``numels`` (trace order) in the order their gradients arrive (reverse trace order), ``hook`` the
    reverse-order position of the gradient whose hook reduces it (``len(numels)``: the epilogue). A gradient that
    would take the bucket past ``bucket_elements`` (``held + n > capacity``) has the bucket reduced first, then
    joins the next; None: one bucket, reduced in the epilogue. Hand-worked: (4, 4, 2) with capacity 6 →
    ((2, (2, 1)), (3, (0,))): gradients arrive 2, 4 (6 ≤ 6), then 4 would make 10 > 6."""
    out, bucket, held = [], [], 0
    for pos, k in enumerate(reversed(range(len(numels)))):
        n = numels[k]
        if bucket and bucket_elements is not None and held + n > bucket_elements:
            out.append((pos, tuple(bucket)))
            bucket, held = [], 0
        bucket.append(k)
        held += n
    if bucket:
        out.append((len(numels), tuple(bucket)))
    return tuple(out)


def backward_calls(numels: tuple[int, ...], fwd_gathers: tuple[CommCall, ...],
                   reduce_scatters: tuple[CommCall | None, ...], bucket_elements: int | None,
                   config: DeepSpeedZero3Config = DEEPSPEED_ZERO3,
                   events: tuple[Event, ...] | None = None) -> tuple[CommCall, ...]:
    """One micro-batch's backward ZeRO stream: the gathers in reverse trace order (or, given ``events``, in their
    order: :func:`simulator.compile.ds_zero3_reuse.backward_events`, a tensor's call as in ``fwd_gathers``), and each
    bucket's per-tensor reduce-scatters (``reduce_scatters[k]`` is tensor k's, trace order; None: it costs nothing)
    right after the gather of the tensor whose gradient hook reduces the bucket (:func:`reduce_buckets`), the last
    bucket at the end."""
    hooks = {hook: tensors for hook, tensors in reduce_buckets(numels, bucket_elements)}
    gathered_idx = [k for k, n in enumerate(numels) if n >= config.param_persistence_threshold_elements]
    if events is None or len(gathered_idx) != len(fwd_gathers):  # each gathered tensor once, reverse trace order
        regathered = set(gathered_idx[:len(fwd_gathers)])
        events = tuple(e for k in reversed(range(len(numels))) for e in (
            (Event(EventKind.GATHER, k),) if k in regathered else ()) + (Event(EventKind.GRAD, k),))
    call_of = dict(zip(gathered_idx, fwd_gathers))
    out, pos = [], 0
    for e in events:
        if e.kind is EventKind.GATHER:
            out.append(call_of[e.tensor])
            continue
        out += [reduce_scatters[i] for i in hooks.get(pos, ()) if reduce_scatters[i] is not None]
        pos += 1
    out += [reduce_scatters[i] for i in hooks.get(len(numels), ()) if reduce_scatters[i] is not None]
    return tuple(out)


def tensor_reduce_scatters(cache: CostCache, layout, workload, group: tuple[int, ...],
                           numels: tuple[int, ...]) -> tuple[CommCall | None, ...]:
    """Each tensor's list reduce-scatter (trace order): ``numel × grad bytes`` (the reduced gradient's format,
    :func:`simulator.strategy.formats.grad_reduce_dtype`) over ``group`` with its list copy-in
    (:func:`with_list_copy`); all None where no reduce-scatter runs in the backward (ZeRO 0-1, one rank)."""
    s = layout.strategy
    if not reduces_every_micro_batch(s) or len(group) < 2:
        return (None,) * len(numels)
    gbytes, made = grad_reduce_dtype(workload.dtype, s).grad_bytes, {}
    for n in numels:
        if n not in made:
            made[n] = with_list_copy(cache.cluster.device, comm_part.call(
                cache, CommKind.ZERO, Op.REDUCE_SCATTER, group, n * gbytes, layout.tp, s.dp_sync.algorithm.value))
    return tuple(made[n] for n in numels)


def bucket_elements(layout, workload) -> int | None:
    """The reduce bucket in elements: the strategy's ``bucket_params``, else its ``bucket_bytes`` over the reduced
    gradient's bytes; None: one bucket."""
    sync = layout.strategy.dp_sync
    if sync.bucket_params is not None:
        return sync.bucket_params
    if layout.bucket_bytes is None:
        return None
    return max(1, layout.bucket_bytes // grad_reduce_dtype(workload.dtype, layout.strategy).grad_bytes)


def reduce_launch_host_s(device: Device, ranks: int, reduce_scatters: int, device_bwd_s: float) -> float:
    """Backward seconds the host's reduce-scatter copy-in launches add beyond the device's backward work:
    ``max(0, R − D)``, ``R = reduce_scatters × ranks × kernel_launch_overhead_us`` (:func:`sync_fetch_host_s`'s
    formula: torch's list ``reduce_scatter`` launches one ``copy_`` per input, n of them, from the calling thread,
    ``ProcessGroupNCCL::reduce_scatter``'s pre-hook [src: torch-pg-nccl-list-collectives]), ``D = device_bwd_s``
    (the chunk's backward and recompute compute). The hooks issuing them run on the thread that launches the
    backward's kernels while those run, so only the excess is certain: a backward lasts at least as long as its
    host work (a lower bound; how much of R the synchronised fetches expose per module is left out). Hand-worked:
    1,156 calls on 1,536 A100s at 5 µs = 8.878 s of host time; against 6 s of backward compute, 2.878 s."""
    return max(0.0, sync_fetch_host_s(device, ranks, reduce_scatters) - device_bwd_s)


def backward_stream(cache: CostCache, layout, workload, group: tuple[int, ...], numels: tuple[int, ...],
                    fwd_gathers: tuple[CommCall, ...], device_bwd_s: float,
                    events: tuple[Event, ...] | None = None) -> tuple[tuple[CommCall, ...], float, float]:
    """(one micro-batch's backward ZeRO stream, forward and backward host seconds the compute stream waits for):
    :func:`backward_calls` of the per-tensor reduce-scatters (:func:`tensor_reduce_scatters`); the forward's and the
    backward's gathers' :func:`sync_fetch_host_s`, and in backward :func:`reduce_launch_host_s` beyond
    ``device_bwd_s``, the chunk's backward and recompute compute per micro-batch."""
    device, ranks = cache.cluster.device, len(group)
    stream = backward_calls(numels, fwd_gathers, tensor_reduce_scatters(cache, layout, workload, group, numels),
                            bucket_elements(layout, workload), events=events)
    bwd_gathers = sum(1 for c in stream if c.op is Op.ALL_GATHER)
    reduces = len(stream) - bwd_gathers
    return stream, sync_fetch_host_s(device, ranks, len(fwd_gathers)), (
        sync_fetch_host_s(device, ranks, bwd_gathers) + reduce_launch_host_s(device, ranks, reduces, device_bwd_s))
