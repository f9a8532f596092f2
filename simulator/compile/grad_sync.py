"""A pipeline stage's gradient synchronisation, optimizer step and what follows it (:func:`grad_sync`), for
:func:`simulator.compile.step.stage_work`: the data-parallel all-reduce (or ZeRO-2/3's per-micro-batch
reduce-scatters, :func:`grad_reduce_scatters`, which the chunks carry), a parameter server's push and pull, the
routed experts' own group, the optimizer's device or host update (:mod:`simulator.host_overhead`,
:mod:`.offload_part`), and the parameter all-gather after a ZeRO-1/2 step — or torch ZeRO-1's one broadcast per
parameter tensor (:func:`simulator.compile.comm_part.torch_zero1_broadcasts`); torch DDP's bucket copies before the
optimizer (:mod:`.ddp_copies`). See ``docs/simulator.md``.
"""

from __future__ import annotations

from dataclasses import fields, replace
from operator import attrgetter

from simulator import framework_host, host_overhead
from simulator.cluster.comm import CommLibrary
from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op
from simulator.compile import comm_part, ddp_copies, ep_part, megatron_step, offload_part, ps_server, torch_tp
from simulator.compile.grad_adds import first_add_bytes_per_param
from simulator.compile.zero_part import expert_split
from simulator.compute import achievable_hbm_Bps
from simulator.memory.states import optimizer_bytes_per_param, steps_per_tensor
from simulator.strategy import Framework, Offload, ParallelLayout, ParamServerSync, Strategy, ZeroStage
from simulator.strategy.formats import grad_reduce_dtype, sync_dtype
from simulator.strategy.sync import (AllReduceAlgorithm, partitions_gradients, pipeline_defers_grad_sync,
                                     reduces_every_micro_batch)
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport


def host_copy(cluster: Cluster, rank: int, nbytes: float, offload: Offload) -> CommCall | None:
    if nbytes <= 0:
        return None
    if offload is Offload.NVME:
        t = offload_part.fetch_slice_s(cluster, offload, nbytes)
    else:
        t = offload_part.pcie_s(cluster, nbytes)
    return CommCall(kind=CommKind.OFFLOAD, op=Op.SEND_RECV, group=(rank,), nbytes=int(round(nbytes)),
                    transport=Transport.HOST, time_s=t)


def fsdp2_blocking_prefetch(layout: ParallelLayout, cluster: Cluster) -> int | None:
    """:attr:`ChunkWork.zero_prefetch_calls` 0 (each gather and reduce-scatter on the compute thread, none ahead)
    for FSDP2 on gloo, else None (the engines' default, one block ahead). FSDP2 unshards with
    ``unshard_async_op = False`` (``_fsdp_param_group.py`` 244) in pre-forward, pre-backward and its backward
    prefetch (551-552, 582, 847-848), and reduce-scatters with no ``async_op`` (``_fsdp_collectives.py`` 619-624),
    so each is c10d's blocking call, which waits for the work (``distributed_c10d.py``, ``work.wait()`` unless
    ``async_op``); on CUDA that wait only orders streams, but gloo's work runs on the host, so the rank's one
    thread computes nothing meanwhile [src: torch-fsdp2-blocking-calls]."""
    if layout.framework is Framework.FSDP2 and cluster.comm.library is CommLibrary.GLOO:
        return 0
    return None


def fsdp2_zero2(layout: ParallelLayout) -> bool:
    """FSDP2 at ZeRO-2 (``reshard_after_forward=False``): parameters are all-gathered block by block in
    every micro-batch's forward, kept through its backward and resharded after it [src: torch-fsdp2];
    there is no all-gather after the optimizer step (DeepSpeed's ZeRO-2 has one)."""
    return layout.strategy.zero is ZeroStage.ZERO2 and layout.framework is Framework.FSDP2


def grad_reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers) -> tuple[CommCall, ...]:
    """A chunk's per-micro-batch gradient reduce-scatters under ZeRO-2/3 (:func:`reduces_every_micro_batch`), by
    framework (comm_part); the experts' over the expert-data-parallel group."""
    if not reduces_every_micro_batch(layout.strategy):
        return ()
    return _reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers)


def deferred_reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers) -> tuple[CommCall, ...]:
    """A chunk's gradient reduce-scatters once per step, after its last backward, where torch's pipelining runtime
    defers FSDP2's sync (:func:`simulator.strategy.sync.pipeline_defers_grad_sync`): the same calls as one
    micro-batch's (one per ``fully_shard`` module, the experts' over their group), which the stage's gradient sync
    carries (:func:`deferred_sync`) instead of every backward."""
    if not pipeline_defers_grad_sync(layout.strategy):
        return ()
    return _reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers)


def _reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers) -> tuple[CommCall, ...]:
    s = layout.strategy
    if len(dp_group) < 2:
        return ()
    gbytes, dense, experts = grad_reduce_dtype(workload.dtype, s).grad_bytes, *expert_split(layout, cc)
    options = {"per_block": layout.framework is Framework.FSDP2, "algorithm": s.dp_sync.algorithm.value}
    calls = comm_part.zero_grad_reduce_scatters(cache, dp_group, dense * gbytes, cc.edge_params * gbytes, layers,
                                                layout.bucket_bytes, concurrent=layout.tp, **options)
    if experts:
        calls = ep_part.interleave(calls, comm_part.zero_grad_reduce_scatters(
            cache, edp_group, experts * gbytes, 0.0, layers, layout.bucket_bytes, concurrent=layout.tp * layout.ep,
            **options))
    return calls


def deferred_sync(per_chunk: tuple[tuple[CommCall, ...], ...]) -> tuple[tuple[CommCall, ...], tuple[float, ...]]:
    """(calls, ready fractions of the rank's last backward) of a pipeline rank's deferred reduce-scatters
    (:func:`deferred_reduce_scatters` of its chunks, in local order). ``REDUCE_GRAD`` follows each stage's own last
    backward (``_add_reduce_grad`` [src: torch-pipelining-fsdp-sync]); a rank's last backward of the step is that of
    its first chunk (the lowest virtual stage: its last micro-batch's backward needs every later stage's), so the
    other chunks' reduce-scatters are ready by the time it starts (fraction 0; they ran even earlier, behind the
    cool-down) and the first chunk's when it ends (1.0). Chunks last to first, the order their last backwards end.
    Within a chunk torch runs the root module's first (``_state_ctx.all_states``), the blocks after; they share one
    fraction, so the order does not change when the calls end. Booked as the step's data-parallel sync
    (:attr:`CommKind.DP`, after the backwards like DDP's all-reduce), as the executor times torch's ``REDUCE_GRAD``
    (its ``dp`` phase, ``executor/phase_clock.py``); the ``zero`` category keeps the parameter gathers."""
    calls: tuple[CommCall, ...] = ()
    fractions: tuple[float, ...] = ()
    as_dp: dict[int, CommCall] = {}  # one object per distinct call, as the chunks repeat them (comm_part)
    for k in range(len(per_chunk) - 1, -1, -1):
        calls += tuple(as_dp.setdefault(id(c), replace(c, kind=CommKind.DP)) for c in per_chunk[k])
        fractions += (1.0 if k == 0 else 0.0,) * len(per_chunk[k])
    return calls, fractions


def replays_grad_sync(layout: ParallelLayout) -> bool:
    """Whether the executor runs the dense gradient all-reduce as a replay of the simulator's schedule
    (:mod:`simulator.collectives.replayed`): a plan naming an all-reduce algorithm (not ``auto``) run by the
    data-parallel family (tp = pp = 1) under DDP (ZeRO 0-1), whose communication hook replays that algorithm
    (``executor/strategies/ddp_sync.py``, ``ReplayHook``); the tensor and pipeline families and FSDP2 call the
    library's own collectives whatever the plan names, and so does the routed experts' sync."""
    s = layout.strategy
    return (not isinstance(s.dp_sync, ParamServerSync) and s.dp_sync.algorithm is not AllReduceAlgorithm.AUTO
            and layout.tp == 1 and layout.pp == 1 and s.zero <= ZeroStage.ZERO1)


def grad_sync(cache, workload, layout, rep, dp_group, params, experts=0.0) -> tuple[tuple, tuple, tuple, float]:
    """(grad_sync calls, ready fractions, after_step calls, optimizer_s) of one rank. ``experts`` of the
    ``params`` are routed-expert parameters: with ep > 1 their gradients are all-reduced over the
    expert-data-parallel group (:func:`simulator.compile.ep_part.expert_grad_sync`) and their optimizer
    partition and the ZeRO-1/2 parameter all-gather after the step are over its dp/ep ranks."""
    s, cluster = layout.strategy, cache.cluster
    dt = sync_dtype(workload.dtype, s)  # fp32 gradients and parameters under autocast
    gbytes = grad_reduce_dtype(workload.dtype, s).grad_bytes  # the all-reduce's, fp32 where the framework says
    dp, tp = layout.dp_cp, layout.tp  # gradients reduce over the dp-cp group (ParallelLayout)
    if isinstance(s.dp_sync, ParamServerSync):
        sync = s.dp_sync
        t = cache.ps(dp_group, int(round(params * dt.grad_bytes)), sync.shards, sync.colocated) if dp > 1 else 0.0
        calls = (CommCall(kind=CommKind.PS, op=Op.ALL_REDUCE, group=dp_group, nbytes=int(round(params * dt.grad_bytes)),
                          transport=Transport.COLLECTIVE, algorithm=CollectiveAlgorithm.PS, time_s=t,
                          concurrent_groups=tp),) if t > 0 else ()
        share = host_overhead.core_share(cluster, offload_part.gpus_on_node(cluster, layout.world_size))
        return calls, (1.0,) * len(calls), (), ps_server.server_update_s(cluster, dt, s, params, share)
    sync = s.dp_sync
    split_experts = experts if layout.ep > 1 else 0.0
    calls = () if partitions_gradients(s) else comm_part.bucketed(  # ZeRO-2/3: the chunks' or deferred_sync
        cache, CommKind.DP, Op.ALL_REDUCE, dp_group, (params - split_experts) * gbytes, layout.bucket_bytes,
        sync.algorithm.value, tp, replayed=replays_grad_sync(layout))
    if split_experts and not partitions_gradients(s):
        edp = layout.expert_dp_group(layout.coords(rep).pp)
        calls += ep_part.expert_grad_sync(cache, edp, split_experts * gbytes, layout.bucket_bytes,
                                          sync.algorithm.value, tp * layout.ep)
    calls = framework_host.with_ddp_sync(cluster, layout, calls, host_overhead.core_share(
        cluster, offload_part.gpus_on_node(cluster, layout.world_size)))
    fractions = comm_part.kept_ready_fractions(cache, calls, sync.overlap_grad_reduce)
    part = params
    if s.zero >= ZeroStage.ZERO1:
        part = comm_part.partition(params - split_experts, dp) + comm_part.partition(split_experts, dp // layout.ep)
    after: tuple = ()
    share = host_overhead.core_share(cluster, offload_part.gpus_on_node(cluster, layout.world_size))
    stage = layout.coords(rep).pp
    tensors = optimizer_tensors(cache, workload, layout, stage)
    torch_dtensors = (cache.memo(("torch tp dtensors", workload, layout.tp, layout.pp, stage, layout.layers_per_stage,
                                  layout.ep, layout.sequence_parallel),
                                 lambda: torch_tp.dtensor_tensors(
                                     workload, layout, stage, comm_part.stage_shapes(cache, workload, layout, stage)))
                      if torch_tp.applies(layout) else None)  # FSDP2: every tensor is a DTensor
    if s.offload is Offload.NONE:  # memory-bound update, and the host calls issuing it (simulator.host_overhead)
        impl = offload_part.optimizer_impl(s, cluster.device)
        per_param = megatron_step.step_bytes_per_param(dt, s) - first_add_bytes_per_param(workload.dtype, layout)
        passes = params * per_param / achievable_hbm_Bps(cluster.device)  # per-step passes, less the add not made
        opt = host_overhead.optimizer_stream(cluster.device, offload_part.gpu_optimizer_s(cluster, dt, part, impl)
                                             + passes, tensors, share, dtensor=host_overhead.dtensor_params(layout),
                                             impl=impl, dtensor_tensors=torch_dtensors,
                                             dtensor_call_us=host_overhead.dtensor_call_us(cluster, layout)).time_s
        tp_group = tuple(layout.rank_of(0, stage, i) for i in range(tp))  # SP norms' gradients, read by AdamW
        opt += torch_tp.sp_optimizer_s(cache, workload, layout, stage, tp_group, dt.param_bytes, dp)
    else:
        d2h = host_copy(cluster, rep, part * dt.grad_bytes, Offload.OPTIMIZER)
        calls, fractions = calls + (d2h,), fractions + (1.0,)
        sharing = offload_part.gpus_on_node(cluster, layout.world_size)
        opt = offload_part.cpu_adam_s(cluster, part, sharing) + host_overhead.offloaded_optimizer_host_s(
            cluster.device, tensors, share, dtensor=host_overhead.dtensor_params(layout),
            impl=s.resolved_optimizer_impl(foreach_device=False))  # the host's tensors: no foreach kernels
        if s.offload is Offload.NVME:  # optimizer states read from and written back to NVMe
            k = optimizer_bytes_per_param(dt)  # fp32 master + Adam moments (ZeRO SC'20 §3.1)
            opt += (offload_part.nvme_s(cluster, part * k, sharing=sharing)
                    + offload_part.nvme_s(cluster, part * k, write=True, sharing=sharing))
        if s.offload is Offload.OPTIMIZER:
            after = (host_copy(cluster, rep, part * dt.param_bytes, Offload.OPTIMIZER),)
    copies_s = ddp_copies.ddp_copy_s(cluster.device, workload.dtype, dt.grad_bytes, params - split_experts, layout)
    opt += host_overhead.stream(cluster.device, copies_s, 0, share).time_s  # DDP's bucket copies, before the step
    tensor_bytes = cache.memo(comm_part.param_tensor_bytes_key(workload, layout, stage, dt), lambda: comm_part.param_tensor_bytes(
        workload, layout, stage, dt.param_bytes)) if torch_zero1(layout) and not split_experts else []
    if tensor_bytes:  # ZeroRedundancyOptimizer: one broadcast per parameter tensor, no all-gather
        after += comm_part.torch_zero1_broadcasts(cache, dp_group, tensor_bytes, tp)
    elif s.zero is ZeroStage.ZERO1 or s.zero is ZeroStage.ZERO2 and not fsdp2_zero2(layout):
        ag_bucket = (sync.allgather_bucket_params * dt.param_bytes if sync.allgather_bucket_params
                     else layout.bucket_bytes)
        after += comm_part.bucketed(cache, CommKind.ZERO, Op.ALL_GATHER, dp_group,
                                    (params - split_experts) * dt.param_bytes, ag_bucket, "auto", tp)
        if split_experts:
            after += comm_part.bucketed(cache, CommKind.ZERO, Op.ALL_GATHER, layout.expert_dp_group(
                layout.coords(rep).pp), split_experts * dt.param_bytes, ag_bucket, "auto", tp * layout.ep)
    return calls, fractions, after, opt


UNREAD_FIELDS = frozenset({"global_batch", "micro_batch", "schedule", "recompute"})
"""Strategy fields :func:`grad_sync` never reads, nor any function it calls (its own body; :mod:`.comm_part`'s
``bucketed``, ``partition``, ``kept_ready_fractions``, ``param_tensor_bytes`` and ``torch_zero1_broadcasts``;
:mod:`simulator.host_overhead`'s ``with_ddp_sync``, ``core_share``, ``stream``, ``optimizer_tensors``,
``optimizer_stream``, ``dtensor_params``, ``dtensor_call_us``, ``offloaded_optimizer_host_s``; :mod:`.offload_part`,
:mod:`.megatron_step`, :mod:`.grad_adds`, :mod:`.ddp_copies`, :mod:`.ep_part`'s ``expert_grad_sync``;
:mod:`simulator.strategy.formats`), nor the layout fields they decide (its micro-batch count, schedule). Sequence
parallelism is read since 2026-11-25 (:func:`simulator.compile.torch_tp.sp_optimizer_s`: torch's AdamW all-reduces
the sequence-parallel norms' gradients). ``tests/test_grad_sync_memo.py``
fails if one of them starts to be read."""
_READ = attrgetter(*(f.name for f in fields(Strategy) if f.name not in UNREAD_FIELDS))


def grad_sync_key(workload, layout: ParallelLayout) -> tuple:
    """Everything :func:`grad_sync` reads of the workload and the layout: the layout's world size and every strategy
    field but :data:`UNREAD_FIELDS`, which with the cache's cluster decide the rest of the layout it reads (dp, tp,
    pp, ep, layer split, framework, buckets, each stage's ranks and groups). With a pipeline rank (its
    representative and dp group) and the parameters it holds, all it reads: a search's structures that differ only
    in micro-batch or recompute share one answer (:func:`simulator.compile.step.stage_work`)."""
    return ("grad_sync", workload, layout.world_size, _READ(layout.strategy))


def torch_zero1(layout: ParallelLayout) -> bool:
    """ZeRO-1 under torch DDP: ``ZeroRedundancyOptimizer`` (executor/strategies/data_parallel.py)."""
    return layout.strategy.zero is ZeroStage.ZERO1 and layout.framework is Framework.TORCH_DDP


def optimizer_tensors(cache, workload, layout: ParallelLayout, stage: int) -> int:
    """:func:`host_overhead.optimizer_tensors`, remembered per :func:`optimizer_tensors_key`; the stage's tensors, where
    a framework steps them one by one (:func:`steps_per_tensor`), named once per what they read
    (:func:`comm_part.stage_shapes`)."""
    def count() -> int:
        named = steps_per_tensor(layout.framework)  # else it counts none without naming them
        shapes = comm_part.stage_shapes(cache, workload, layout, stage) if named else None
        return host_overhead.optimizer_tensors(workload, layout, stage, shapes)
    return cache.memo(optimizer_tensors_key(workload, layout, stage), count)


def optimizer_tensors_key(workload, layout: ParallelLayout, stage: int) -> tuple:
    """Everything :func:`host_overhead.optimizer_tensors` reads of ``layout`` for pipeline stage ``stage`` (its
    tp, pp, stage, layer split, ep, dp-cp, ZeRO stage, framework): candidates that differ elsewhere
    (micro-batch, schedule, recompute, buckets) share one answer."""
    return ("optimizer_tensors", workload, layout.tp, layout.pp, stage, layout.layers_per_stage,
            layout.ep, layout.dp_cp, layout.strategy.zero, layout.framework)
