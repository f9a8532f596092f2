"""``compile_step``: (cluster, workload, strategy) → the :class:`simulator.work.StepWork` of one step.

One :class:`StageWork` per pipeline rank, for its representative (dp 0, tp 0): its v chunks'
compute and calls (:mod:`.compute_part`, :mod:`.comm_part`), its gradient synchronisation, the
optimizer and what follows it (:mod:`.offload_part`). See ``docs/simulator.md``.
"""

from __future__ import annotations

from simulator import host_overhead
from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op
from simulator.compile import act_offload_part, comm_part, cp_part, ds_zero3, ep_part, offload_part
from simulator.compile.zero_part import expert_split, gathered_block_bytes, gathers
from simulator.compile.compute_part import ChunkCompute, chunk_compute, step_flops
from simulator.compile.fsdp2_copies import fsdp2_copy_s
from simulator.compile.grad_adds import grad_add
from simulator.compile.costs import CostCache
from simulator.compile.device_factors import rank_factors
from simulator.errors import SpecError
from simulator.memory.states import optimizer_bytes_per_param
from simulator.strategy.formats import grad_reduce_dtype, runs_autocast, sync_dtype
from simulator.strategy import (AttentionKind, Framework, Offload, ParallelLayout, ParamServerSync, Recompute,
                                Strategy, ZeroStage, build_layout)
from simulator.interference import cluster_sm_fraction
from simulator.compute import memory_kernel_s
from simulator.work import ChunkWork, CollectiveAlgorithm, CommCall, CommKind, StageWork, StepWork, Transport
from simulator.workload import ChunkSlice, ComputeOptions, TransformerSpec, Workload, no_compute
from simulator.workload.fp8 import fp8_needs_transpose, te_weight_cast_bytes
from simulator.workload.autocast import FP32_BYTES

ParamFetch = offload_part.ParamFetch


def _check_workload(workload) -> None:
    if not isinstance(workload, Workload) or not workload.has_compute:
        raise no_compute()


def _chunk_compute(cache: CostCache, workload: Workload, layout: ParallelLayout, c: int) -> ChunkCompute:
    s = layout.strategy
    chunk = ChunkSlice(index=c, count=layout.pp * layout.v, start=sum(layout.layers_per_stage[:c]),
                       layers=layout.layers_per_stage[c])
    backend = s.resolved_attention_backend(cache.cluster.device.compute_capability)
    options = ComputeOptions(micro_batch=s.micro_batch, tp=layout.tp, recompute=s.recompute,
                             sequence_parallel=layout.sequence_parallel,
                             flash_attention=s.attention is AttentionKind.FLASH, fusion=s.kernel_fusion,
                             ep=layout.ep, routing_skew=s.routing_skew,
                             context=s.context, fp8=s.resolved_fp8_recipe,
                             fp8_weight_shards=layout.dp_cp if s.fp8_all_gather else 1,
                             fp8_transpose=fp8_needs_transpose(cache.cluster.device.compute_capability),
                             attention_backend=backend, vocab_multiple=layout.framework.vocab_multiple(layout.tp),
                             loss=layout.framework.loss_impl,
                             autocast=runs_autocast(workload.dtype, s),
                             grad_add=grad_add(workload.dtype, layout))
    share = host_overhead.core_share(cache.cluster, offload_part.gpus_on_node(cache.cluster, layout.world_size))
    return host_overhead.with_host_modules(cache.cluster, layout, chunk, chunk_compute(cache, workload, chunk, options,
                                                                                          share), share)


def _host_copy(cluster: Cluster, rank: int, nbytes: float, offload: Offload) -> CommCall | None:
    if nbytes <= 0:
        return None
    if offload is Offload.NVME:
        t = offload_part.fetch_slice_s(cluster, offload, nbytes)
    else:
        t = offload_part.pcie_s(cluster, nbytes)
    return CommCall(kind=CommKind.OFFLOAD, op=Op.SEND_RECV, group=(rank,), nbytes=int(round(nbytes)),
                    transport=Transport.HOST, time_s=t)


def fetch_call(cache: CostCache, offload: Offload, fetch: ParamFetch, group: tuple[int, ...],
               nbytes: float, sharing: int | None = None) -> CommCall:
    """One block's fetch of offloaded ZeRO-3 parameters (the two ways of :class:`ParamFetch`);
    ``sharing``: GPUs sharing the node's NVMe (default all of the node's)."""
    cluster, dp = cache.cluster, len(group)
    if fetch is ParamFetch.INFINITY:
        t_coll, algo = cache.collective(group, Op.ALL_GATHER, int(round(nbytes)))
        t, op = offload_part.fetch_slice_s(cluster, offload, nbytes / dp, sharing) + t_coll, Op.ALL_GATHER
    else:
        t_coll, algo = cache.collective(group, Op.BROADCAST, int(round(nbytes)))
        t, op = offload_part.fetch_slice_s(cluster, offload, nbytes, sharing) + t_coll, Op.BROADCAST
    return CommCall(kind=CommKind.OFFLOAD, op=op, group=group, nbytes=int(round(nbytes)),
                    transport=Transport.HOST_THEN_COLLECTIVE, algorithm=algo, time_s=t)


def _chunk_work(cache, workload, layout, r, c, groups, fetch) -> tuple[ChunkWork, float]:
    s, cc = layout.strategy, _chunk_compute(cache, workload, layout, c)
    n, p, dp, tp = layout.pp * layout.v, layout.pp, layout.dp_cp, layout.tp  # dp: the ranks sharing weights
    rep, tp_group, dp_group, ep_group, edp_group = groups
    layers = cc.blocks
    # a workload without blocks (a layer list) only allows tp 1 (Workload.check_tp): no tp calls
    moe = getattr(workload, "moe", None)  # MoE blocks whose dispatcher does the MLP's tp gather itself:
    own_gather = cc.moe_blocks if layout.ep > 1 and moe is not None and not moe.shared_width else 0
    tp_fwd, tp_bwd = comm_part.tp_calls(cache, tp_group, cc.boundary_bytes, sp=layout.sequence_parallel,
                                        layers=layers, first=c == 0, last=c == n - 1,
                                        full_recompute=s.recompute is Recompute.FULL, concurrent=dp,
                                        attention_only=own_gather)
    if cc.moe_blocks and layout.ep > 1:  # the MoE layers' token all-to-alls block the compute too (per cp rank)
        volume = ep_part.dispatch_bytes(workload, s, layout.ep, tp, layout.sequence_parallel,
                                        ep_part.group_nodes(cache.cluster, ep_group))
        ep_fwd, ep_bwd = ep_part.ep_calls(cache, ep_group, tp_group, volume, moe_blocks=cc.moe_blocks,
                                          full_recompute=s.recompute is Recompute.FULL, concurrent=dp // layout.ep * tp)
        if s.moe_a2a_overlap:  # under the other micro-batch's compute (ep_part.batch_overlap)
            ep_fwd, ep_bwd = ep_part.batch_overlap(ep_fwd, ep_bwd, cc.fwd_s + cc.bwd_s + cc.recompute_s,
                                                   cluster_sm_fraction(cache.cluster))
        tp_fwd, tp_bwd = tp_fwd + ep_fwd, tp_bwd + ep_bwd
    if layout.cp > 1:
        cp_fwd, cp_bwd = cp_part.cp_calls(cache, workload, layout.cp_group(0, r, 0), micro_batch=s.micro_batch,
                                          tp=tp, context=s.context, layers=layers,
                                          full_recompute=s.recompute is Recompute.FULL, concurrent=layout.dp * tp,
                                          attention_backend=s.resolved_attention_backend(
                                              cache.cluster.device.compute_capability))
        tp_fwd, tp_bwd = tp_fwd + cp_fwd, cp_bwd + tp_bwd
    # the residual stream between blocks and stages: fp32 under eager autocast (simulator.workload.autocast)
    stream = cc.boundary_bytes * (FP32_BYTES / workload.dtype.activation_bytes if runs_autocast(workload.dtype, s) else 1)
    if s.offload_activations:  # checkpoints to the host in forward, back before recompute (act_offload_part)
        copies = act_offload_part.copy_calls(cache.cluster, rep, act_offload_part.checkpoint_bytes(
            stream, tp, layout.sequence_parallel), layers)
        tp_fwd, tp_bwd = tp_fwd + copies, copies + tp_bwd
    p2p_bytes = stream / (tp if layout.sequence_parallel else 1)
    p2p = []
    for other in (c + 1, c - 1):
        dst = layout.rank_of(0, other % p, 0) if 0 <= other < n else rep
        p2p.append(None if dst == rep else comm_part.call(cache, CommKind.PP, Op.SEND_RECV, (rep, dst), p2p_bytes,
                                                          dp * tp))
    zero = zero_bwd = ()
    numels, prefetch = None, 1  # DeepSpeed's per-tensor gathers (ds_zero3) and their prefetch depth in calls
    pbytes = sync_dtype(workload.dtype, s).param_bytes  # fp32 under autocast
    block_bytes = gathered_block_bytes(workload, layout, cc)
    if s.zero is ZeroStage.ZERO3 and dp > 1:
        if s.offload in (Offload.PARAMS, Offload.NVME):  # (experts fetched with the rest, over dp)
            sharing = offload_part.gpus_on_node(cache.cluster, layout.world_size)
            first = fetch_call(cache, s.offload, fetch, dp_group, (cc.layer_params + cc.edge_params) * pbytes, sharing)
            rest = fetch_call(cache, s.offload, fetch, dp_group, cc.layer_params * pbytes, sharing)
            zero = zero_bwd = (first,) + (rest,) * (max(layers, 1) - 1)
        else:
            zero = zero_bwd = gathers(cache, layout, cc, dp_group, edp_group, pbytes, block_bytes)
            numels = ds_zero3.chunk_tensor_numels(workload, layout, c) if _deepspeed_zero3(layout) else None
            if numels is not None:  # one call per tensor, in trace order; backward in reverse
                zero, prefetch = ds_zero3.gathers(cache, dp_group, numels, pbytes, layout.tp)
    reduce_scatters = _grad_reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers)
    zero_fwd, zero_bwd = zero, (zero_bwd + reduce_scatters if numels is None
                                else ds_zero3.backward_calls(numels, zero, reduce_scatters))
    if _fsdp2_zero2(layout) and dp > 1:  # reshard_after_forward=False: gathered in forward, kept for backward
        zero_fwd = gathers(cache, layout, cc, dp_group, edp_group, pbytes, block_bytes)
    copy_fwd, copy_bwd = fsdp2_copy_s(cache, workload, layout, cc)  # FSDP2's copies on the compute stream
    work = ChunkWork(chunk=c, layers=layout.layers_per_stage[c], fwd_s=cc.fwd_s + copy_fwd, bwd_s=cc.bwd_s + copy_bwd,
                     recompute_s=cc.recompute_s, tp_fwd=tp_fwd, tp_bwd=tp_bwd, zero_fwd=zero_fwd, zero_bwd=zero_bwd,
                     p2p_fwd=p2p[0], p2p_bwd=p2p[1], zero_prefetch_calls=prefetch)
    return work, (layers * cc.layer_params + cc.edge_params, cc.expert_params)


def _te_weight_cast_s(cache: CostCache, workload, layout: ParallelLayout, r: int) -> float:
    """Transformer Engine's once-per-step cast of the rank's FP8 weights (:func:`te_weight_cast_bytes`: its
    blocks' linears, a MoE block's local experts included), charged with the optimizer step whose weights it casts."""
    recipe = layout.strategy.resolved_fp8_recipe
    if recipe is None or not recipe.caches_weights:
        return 0.0
    nbytes = te_weight_cast_bytes(workload, layout.tp, recipe, layout.ep, layout.layer_indices(r),
                                  transpose=fp8_needs_transpose(cache.cluster.device.compute_capability))
    return memory_kernel_s(cache.cluster.device, workload.dtype, nbytes)


def _deepspeed_zero3(layout: ParallelLayout) -> bool:
    """DeepSpeed's own ZeRO-3 gathers (:mod:`simulator.compile.ds_zero3`): per tensor, not per block; FSDP2's
    float8 all-gather is not DeepSpeed's, so it keeps the per-block path."""
    s = layout.strategy
    return s.zero is ZeroStage.ZERO3 and layout.framework is Framework.DEEPSPEED and not s.fp8_all_gather


def _fsdp2_zero2(layout: ParallelLayout) -> bool:
    """FSDP2 at ZeRO-2 (``reshard_after_forward=False``): parameters are all-gathered block by block in
    every micro-batch's forward, kept through its backward and resharded after it [src: torch-fsdp2];
    there is no all-gather after the optimizer step (DeepSpeed's ZeRO-2 has one)."""
    return layout.strategy.zero is ZeroStage.ZERO2 and layout.framework is Framework.FSDP2


def _reduces_every_micro_batch(s: Strategy) -> bool:
    """ZeRO-2/3 reduce-scatter the gradients in every micro-batch's backward (comm_part docstring);
    a parameter server and ZeRO-0/1 synchronise once per step."""
    return not isinstance(s.dp_sync, ParamServerSync) and s.zero >= ZeroStage.ZERO2


def _grad_reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers) -> tuple[CommCall, ...]:
    """A chunk's per-micro-batch gradient reduce-scatters under ZeRO-2/3, by framework (comm_part); the
    experts' over the expert-data-parallel group."""
    s = layout.strategy
    if not _reduces_every_micro_batch(s) or len(dp_group) < 2:
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


def _grad_sync(cache, workload, layout, rep, dp_group, params, experts=0.0) -> tuple[tuple, tuple, tuple, float]:
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
        return calls, (1.0,) * len(calls), (), 0.0  # the servers run the update (BytePS §4)
    sync = s.dp_sync
    split_experts = experts if layout.ep > 1 else 0.0
    calls = () if _reduces_every_micro_batch(s) else comm_part.bucketed(  # ZeRO-2/3: in every backward
        cache, CommKind.DP, Op.ALL_REDUCE, dp_group, (params - split_experts) * gbytes, layout.bucket_bytes,
        sync.algorithm.value, tp)
    if split_experts and not _reduces_every_micro_batch(s):
        edp = layout.expert_dp_group(layout.coords(rep).pp)
        calls += ep_part.expert_grad_sync(cache, edp, split_experts * gbytes, layout.bucket_bytes,
                                          sync.algorithm.value, tp * layout.ep)
    calls = host_overhead.with_ddp_sync(cluster, layout, calls, host_overhead.core_share(
        cluster, offload_part.gpus_on_node(cluster, layout.world_size)))
    fractions = comm_part.ready_fractions(calls, sync.overlap_grad_reduce)
    part = params
    if s.zero >= ZeroStage.ZERO1:
        part = comm_part.partition(params - split_experts, dp) + comm_part.partition(split_experts, dp // layout.ep)
    after: tuple = ()
    share = host_overhead.core_share(cluster, offload_part.gpus_on_node(cluster, layout.world_size))
    stage = layout.coords(rep).pp
    tensors = cache.memo(_optimizer_tensors_key(workload, layout, stage),
                         lambda: host_overhead.optimizer_tensors(workload, layout, stage))
    if s.offload is Offload.NONE:  # memory-bound update, and the host calls issuing it (simulator.host_overhead)
        impl = offload_part.optimizer_impl(s, cluster.device)
        opt = host_overhead.optimizer_stream(cluster.device, offload_part.gpu_optimizer_s(cluster, dt, part, impl),
                                             tensors, share, dtensor=host_overhead.dtensor_params(layout),
                                             impl=impl).time_s
    else:
        d2h = _host_copy(cluster, rep, part * dt.grad_bytes, Offload.OPTIMIZER)
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
            after = (_host_copy(cluster, rep, part * dt.param_bytes, Offload.OPTIMIZER),)
    tensor_bytes = cache.memo(comm_part.param_tensor_bytes_key(workload, layout, stage, dt), lambda: comm_part.param_tensor_bytes(
        workload, layout, stage, dt.param_bytes)) if _torch_zero1(layout) and not split_experts else []
    if tensor_bytes:  # ZeroRedundancyOptimizer: one broadcast per parameter tensor, no all-gather
        after += comm_part.torch_zero1_broadcasts(cache, dp_group, tensor_bytes, tp)
    elif s.zero is ZeroStage.ZERO1 or s.zero is ZeroStage.ZERO2 and not _fsdp2_zero2(layout):
        ag_bucket = (sync.allgather_bucket_params * dt.param_bytes if sync.allgather_bucket_params
                     else layout.bucket_bytes)
        after += comm_part.bucketed(cache, CommKind.ZERO, Op.ALL_GATHER, dp_group,
                                    (params - split_experts) * dt.param_bytes, ag_bucket, "auto", tp)
        if split_experts:
            after += comm_part.bucketed(cache, CommKind.ZERO, Op.ALL_GATHER, layout.expert_dp_group(
                layout.coords(rep).pp), split_experts * dt.param_bytes, ag_bucket, "auto", tp * layout.ep)
    return calls, fractions, after, opt


def _torch_zero1(layout: ParallelLayout) -> bool:
    """ZeRO-1 under torch DDP: ``ZeroRedundancyOptimizer`` (executor/strategies/data_parallel.py)."""
    return layout.strategy.zero is ZeroStage.ZERO1 and layout.framework is Framework.TORCH_DDP


def _optimizer_tensors_key(workload, layout: ParallelLayout, stage: int) -> tuple:
    """Everything :func:`host_overhead.optimizer_tensors` reads of ``layout`` for pipeline stage ``stage`` (its
    tp, pp, stage, layer split, ep, dp-cp, ZeRO stage, framework): candidates that differ elsewhere
    (micro-batch, schedule, recompute, buckets) share one answer."""
    return ("optimizer_tensors", workload, layout.tp, layout.pp, stage, layout.layers_per_stage,
            layout.ep, layout.dp_cp, layout.strategy.zero, layout.framework)


def stage_groups(cache: CostCache, layout: ParallelLayout, r: int) -> tuple:
    """(representative rank, tp group, dp group, ep group, expert-dp group) of pipeline rank ``r``."""
    return cache.memo(("groups", layout.strategy.placement, layout.dp_cp, layout.tp, layout.pp, layout.ep, r),
                      lambda: (layout.rank_of(0, r, 0), tuple(layout.rank_of(0, r, i) for i in range(layout.tp)),
                               tuple(layout.rank_of(d, r, 0) for d in range(layout.dp_cp)), layout.ep_group(r),
                               layout.expert_dp_group(r)))


def stage_work(cache: CostCache, workload, layout: ParallelLayout, r: int,
               fetch: ParamFetch = ParamFetch.INFINITY) -> StageWork:
    """The representative rank of pipeline rank ``r``: its chunks r, r+p, …, then its gradient sync."""
    groups = stage_groups(cache, layout, r)
    rep = groups[0]
    chunks, params, experts = [], 0.0, 0.0
    for k in range(layout.v):
        work, (held, expert) = _chunk_work(cache, workload, layout, r, r + k * layout.pp, groups, fetch)
        chunks.append(work)
        params, experts = params + held, experts + expert
    sync, fractions, after, opt = _grad_sync(cache, workload, layout, rep, groups[2], params, experts)
    opt += _te_weight_cast_s(cache, workload, layout, r)
    return StageWork(stage=r, rank=rep, chunks=tuple(chunks), grad_sync=sync, grad_ready_fraction=fractions,
                     after_step=after, optimizer_s=opt,
                     data_s=offload_part.data_s(cache.cluster, layout.strategy, layout.world_size))


def _memory(cluster: Cluster, workload, layout: ParallelLayout):
    if not isinstance(workload, TransformerSpec):
        return None
    from simulator.memory import memory_report

    return memory_report(workload, cluster, layout)


def _check_fetch(fetch) -> None:
    if not isinstance(fetch, ParamFetch):
        raise SpecError("fetch", f"must be a ParamFetch ({', '.join(f.value for f in ParamFetch)}), got {fetch!r}")


def compile_stages(cache: CostCache, workload: Workload, layout: ParallelLayout,
                   fetch: ParamFetch = ParamFetch.INFINITY) -> tuple[StageWork, ...]:
    """The stages :func:`compile_step` compiles for ``layout`` on the cache's cluster, with its checks, and
    nothing of the step around them (schedule, FLOPs, memory, per-rank factors): what the closed form's
    structures read (:func:`simulator.analytical.summarize_stages`)."""
    _check_workload(workload)
    _check_fetch(fetch)
    return tuple(stage_work(cache, workload, layout, r, fetch) for r in range(layout.pp))


def compile_step(cluster: Cluster, workload: Workload, strategy: Strategy, *, fetch: ParamFetch = ParamFetch.INFINITY,
                 cache: CostCache | None = None, memory: bool = True, layout: ParallelLayout | None = None) -> StepWork:
    """Compile one training step (see the package docstring). Bad input raises SpecError.

    ``fetch``: how offloaded ZeRO-3 parameters are fetched (a compile option, not a strategy field).
    ``cache``: share cost answers between calls on the same cluster. ``memory``: attach the memory
    report. ``layout``: a layout already built for these inputs (skips :func:`build_layout`).
    """
    _check_workload(workload)
    _check_fetch(fetch)
    layout = build_layout(strategy, cluster, workload) if layout is None else layout
    cache = CostCache(cluster) if cache is None else cache
    if cache.cluster is not cluster and cache.cluster != cluster:
        raise SpecError("cache", "the cost cache belongs to another cluster; make one per cluster")
    stages = tuple(stage_work(cache, workload, layout, r, fetch) for r in range(layout.pp))
    samples = strategy.global_batch
    seq = workload.seq_len
    model_flops, hw_flops = step_flops(workload, samples * seq, strategy.recompute, strategy.attention)
    return StepWork(stages=stages, strategy=strategy, layout=layout, schedule=layout.schedule,
                    micro_batches=layout.micro_batches, tokens_per_step=samples * seq,
                    model_flops_per_step=model_flops, hardware_flops_per_step=hw_flops,
                    world_size=layout.world_size,
                    peak_flops_per_gpu=cluster.device.peak_flops(workload.dtype.compute_dtype),
                    memory=_memory(cluster, workload, layout) if memory else None,
                    host_bound=_host_bound(cache, workload, layout),
                    rank_factors=rank_factors(cluster, layout, lambda c, k: _chunk_compute(c, workload, layout, k)),
                    overlap_sm_fraction=cluster_sm_fraction(cluster))


def _host_bound(cache: CostCache, workload, layout: ParallelLayout) -> tuple[str, ...]:
    """Phases host-bound on any chunk (:attr:`ChunkCompute.host_bound`; the chunks' answers are memoised)."""
    phases = {p for c in range(layout.pp * layout.v) for p in _chunk_compute(cache, workload, layout, c).host_bound}
    return tuple(p for p in ("forward", "backward", "recompute") if p in phases)
