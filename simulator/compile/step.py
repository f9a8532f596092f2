"""``compile_step``: (cluster, workload, strategy) → the :class:`simulator.work.StepWork` of one step.

One :class:`StageWork` per pipeline rank, for its representative (dp 0, tp 0): its v chunks'
compute and calls (:mod:`.compute_part`, :mod:`.comm_part`), its gradient synchronisation, the
optimizer and what follows it (:mod:`.offload_part`). See ``docs/simulator.md``.
"""

from __future__ import annotations

from dataclasses import replace

from simulator import framework_host, host_overhead, pipeline_runtime
from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op
from simulator.compile import act_offload_part, comm_part, cp_part, ep_part, offload_part
from simulator.compile.chunk_zero import chunk_zero
from simulator.compile.compute_part import ChunkCompute, chunk_compute, step_flops
from simulator.compile import grad_sync, tied_embedding, torch_tp
from simulator.compile.grad_adds import grad_add
from simulator.compile.stage_keys import stage_keys
from simulator.compile.costs import CostCache
from simulator.compile.device_factors import rank_factors
from simulator.errors import SpecError
from simulator.gather_reuse import gather_shares
from simulator.rank_max import rank_max_gain
from simulator.step_loop import first_cold_s, step_loop_s
from simulator.strategy.formats import runs_autocast
from simulator.strategy import AttentionKind, ParallelLayout, Recompute, Strategy, build_layout
from simulator.interference import cluster_sm_fraction
from simulator.compute import memory_kernel_s, runs_cuda_kernels
from simulator.work import ChunkWork, CommKind, StageWork, StepWork
from simulator.workload import ChunkSlice, ComputeOptions, TransformerSpec, Workload, no_compute
from simulator.workload.fp8 import fp8_needs_transpose, te_weight_cast_bytes
from simulator.workload.autocast import FP32_BYTES

ParamFetch = offload_part.ParamFetch


def _check_workload(workload) -> None:
    # a TransformerSpec is a Workload (tests/test_workload_protocol.py): no need for the Protocol's isinstance, which
    # reads every member of the protocol (~15 µs; a search checks each structure it compiles)
    if not (type(workload) is TransformerSpec or isinstance(workload, Workload)) or not workload.has_compute:
        raise no_compute()


def compute_inputs(cache: CostCache, workload: Workload, layout: ParallelLayout) -> tuple[ComputeOptions, float]:
    """(compute options, processes per host core on the node) of every chunk of ``layout``: neither reads the
    chunk, so a step's stages build them once (:func:`stage_work`'s ``inputs``)."""
    s = layout.strategy
    backend = s.resolved_attention_backend(cache.cluster.device.compute_capability)
    options = ComputeOptions(micro_batch=s.micro_batch, tp=layout.tp, recompute=s.recompute,
                             sequence_parallel=layout.sequence_parallel,
                             flash_attention=s.attention is AttentionKind.FLASH, fusion=s.kernel_fusion,
                             model_code=s.model_code,
                             ep=layout.ep, routing_skew=s.routing_skew,
                             context=s.context, fp8=s.resolved_fp8_recipe,
                             fp8_weight_shards=layout.dp_cp if s.fp8_all_gather else 1,
                             fp8_transpose=fp8_needs_transpose(cache.cluster.device.compute_capability),
                             attention_backend=backend, vocab_multiple=layout.framework.vocab_multiple(layout.tp),
                             loss=layout.framework.loss_impl,
                             autocast=runs_autocast(workload.dtype, s),
                             cuda_kernels=runs_cuda_kernels(cache.cluster.device),
                             grad_add=grad_add(workload.dtype, layout))
    share = host_overhead.core_share(cache.cluster, offload_part.gpus_on_node(cache.cluster, layout.world_size))
    return options, share


def _chunk_compute(cache: CostCache, workload: Workload, layout: ParallelLayout, c: int,
                   inputs: tuple[ComputeOptions, float] | None = None) -> ChunkCompute:
    """Chunk ``c``'s compute; ``inputs``: :func:`compute_inputs` of ``layout``, if already built."""
    options, share = compute_inputs(cache, workload, layout) if inputs is None else inputs
    chunk = ChunkSlice(index=c, count=layout.pp * layout.v, start=sum(layout.layers_per_stage[:c]),
                       layers=layout.layers_per_stage[c])
    return framework_host.with_host_modules(cache.cluster, layout, chunk, chunk_compute(cache, workload, chunk, options,
                                                                                          share), share)


def _blocking_calls(cache: CostCache, workload, layout: ParallelLayout, r: int, c: int, cc, inputs,
                    groups: tuple) -> tuple[tuple, tuple, float]:
    """(forward, backward) calls chunk ``c`` of pipeline rank ``r`` waits for inside its compute (tp, then ep's
    all-to-alls, cp's exchanges and activation offload's copies), and the bytes of its residual stream."""
    s, n, dp, tp = layout.strategy, layout.pp * layout.v, layout.dp_cp, layout.tp  # dp: the ranks sharing weights
    rep, tp_group, _, ep_group, _ = groups
    layers = cc.blocks
    # a workload without blocks (a layer list) only allows tp 1 (Workload.check_tp): no tp calls
    moe = getattr(workload, "moe", None)  # MoE blocks whose dispatcher does the MLP's tp gather itself:
    own_gather = cc.moe_blocks if layout.ep > 1 and moe is not None and not moe.shared_width else 0
    # DTensor's own list where torch runs the tp (simulator.compile.torch_tp), else Megatron's
    logits_bytes = (cc.boundary_bytes * workload.vocab / workload.hidden
                    if torch_tp.applies(layout) and not own_gather else None)
    tp_fwd, tp_bwd = torch_tp.chunk_tp_calls(cache, tp_group, cc.boundary_bytes, logits_bytes=logits_bytes,
                                             attention_only=own_gather, sp=layout.sequence_parallel, layers=layers,
                                             first=c == 0, last=c == n - 1,
                                             full_recompute=s.recompute is Recompute.FULL, concurrent=dp)
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
    autocast = inputs[0].autocast  # runs_autocast(workload.dtype, s), as compute_inputs reads it
    stream = cc.boundary_bytes * (FP32_BYTES / workload.dtype.activation_bytes if autocast else 1)
    if s.offload_activations:  # checkpoints to the host in forward, back before recompute (act_offload_part)
        copies = act_offload_part.copy_calls(cache.cluster, rep, act_offload_part.checkpoint_bytes(
            stream, tp, layout.sequence_parallel), layers)
        tp_fwd, tp_bwd = tp_fwd + copies, copies + tp_bwd
    return tp_fwd, tp_bwd, stream


def _chunk_work(cache, workload, layout, r, c, groups, fetch, inputs=None) -> tuple[ChunkWork, tuple]:
    """(chunk ``c``'s work, (parameters it holds, of which routed experts, its deferred reduce-scatters))."""
    inputs = compute_inputs(cache, workload, layout) if inputs is None else inputs
    cc = _chunk_compute(cache, workload, layout, c, inputs)
    n, p, dp, tp = layout.pp * layout.v, layout.pp, layout.dp_cp, layout.tp  # dp: the ranks sharing weights
    rep, _, dp_group, _, edp_group = groups
    tp_fwd, tp_bwd, stream = _blocking_calls(cache, workload, layout, r, c, cc, inputs, groups)
    p2p_bytes = stream / (tp if layout.sequence_parallel else 1)
    p2p = []
    for other in (c + 1, c - 1):
        dst = stage_groups(cache, layout, other % p)[0] if 0 <= other < n else rep  # layout.rank_of(0, other % p, 0)
        p2p.append(None if dst == rep else comm_part.call(cache, CommKind.PP, Op.SEND_RECV, (rep, dst), p2p_bytes,
                                                          dp * tp))
    z = chunk_zero(cache, workload, layout, c, cc, fetch, dp_group, edp_group)
    slowest = 1.0 + rank_max_gain(cache.cluster, layout.world_size)  # the slowest rank per step (simulator.rank_max)
    work = ChunkWork(chunk=c, layers=layout.layers_per_stage[c], fwd_s=cc.fwd_s * slowest + z.copy_fwd_s + z.sync_fwd_s,
                     bwd_s=cc.bwd_s * slowest + z.copy_bwd_s + z.sync_bwd_s, recompute_s=cc.recompute_s * slowest,
                     tp_fwd=tp_fwd, tp_bwd=tp_bwd, zero_fwd=z.zero_fwd, zero_bwd=z.zero_bwd,
                     p2p_fwd=p2p[0], p2p_bwd=p2p[1], zero_prefetch_calls=z.prefetch_calls,
                     **pipeline_runtime.chunk_parts_s(cache.cluster, layout, c, inputs[1] * slowest))
    if z.reuse is not None:  # torch's pipelining keeps the gathered parameters: the actions that still gather
        shares = gather_shares(z.reuse, layout.schedule.ranks[r], c)
        work = replace(work, gather_reuse=z.reuse, zero_fwd_share=shares[0], zero_bwd_share=shares[1])
    return work, (cc.blocks * cc.layer_params + cc.edge_params, cc.expert_params, z.deferred)


def _te_weight_cast_s(cache: CostCache, workload, layout: ParallelLayout, r: int) -> float:
    """Transformer Engine's once-per-step cast of the rank's FP8 weights (:func:`te_weight_cast_bytes`: its
    blocks' linears, a MoE block's local experts included), charged with the optimizer step whose weights it casts."""
    recipe = layout.strategy.resolved_fp8_recipe
    if recipe is None or not recipe.caches_weights:
        return 0.0
    nbytes = te_weight_cast_bytes(workload, layout.tp, recipe, layout.ep, layout.layer_indices(r),
                                  transpose=fp8_needs_transpose(cache.cluster.device.compute_capability))
    return memory_kernel_s(cache.cluster.device, workload.dtype, nbytes)


def stage_groups(cache: CostCache, layout: ParallelLayout, r: int) -> tuple:
    """(representative rank, tp group, dp group, ep group, expert-dp group) of pipeline rank ``r``."""
    return cache.memo(("groups", layout.strategy.placement, layout.dp_cp, layout.cp, layout.tp, layout.pp, layout.ep, r),
                      lambda: (layout.rank_of(0, r, 0), tuple(layout.rank_of(0, r, i) for i in range(layout.tp)),
                               layout.dp_line(r, 0), layout.ep_group(r), layout.expert_dp_group(r)))


def all_stage_groups(cache: CostCache, layout: ParallelLayout) -> tuple[tuple, ...]:
    """:func:`stage_groups` of every pipeline rank, remembered per the same inputs (less the rank)."""
    return cache.memo(("all groups", layout.strategy.placement, layout.dp_cp, layout.cp, layout.tp, layout.pp, layout.ep),
                      lambda: tuple(stage_groups(cache, layout, r) for r in range(layout.pp)))


def _with_tied(cache: CostCache, sync: tuple, fractions: tuple, tied: tuple) -> tuple[tuple, tuple]:
    """The stage's gradient calls and ready fractions with the tied embedding's all-reduce last (fraction 1.0).
    Joined once per (sync, fractions, tied) in ``cache``: the search's structures that share a stage's bucketed
    syncs (:func:`simulator.compile.comm_part.bucketed`) then share the joined tuples too, which
    :func:`simulator.analytical.summarize_stages` recognises by identity. The entry holds ``sync`` and
    ``fractions``, so their ids are not reused while it lives."""
    if not tied:
        return sync, fractions
    held = cache.memo(("tied-join", id(sync), id(fractions), tied),
                      lambda: (sync, fractions, sync + tied, tuple(fractions) + (1.0,) * len(tied)))
    return held[2], held[3]


def _with_deferred(cache: CostCache, deferred: tuple, sync: tuple, fractions: tuple) -> tuple[tuple, tuple]:
    """The stage's gradient calls and ready fractions with torch pipelining's once-per-step FSDP2 reduce-scatters
    (:func:`grad_sync.deferred_sync` of ``deferred``, each chunk's) ahead of the rest; joined once per
    (``deferred``, sync, fractions) in ``cache``, as :func:`_with_tied` (the entry holds what its key names by id)."""
    if not any(deferred):
        return sync, fractions
    def join():
        calls, ready = grad_sync.deferred_sync(deferred)
        return deferred, sync, fractions, calls + sync, ready + tuple(fractions)
    held = cache.memo(("deferred-join", id(deferred), id(sync), id(fractions)), join)
    return held[3], held[4]


def _stage_chunks(cache, workload, layout, r, groups, fetch, inputs) -> tuple[tuple[ChunkWork, ...], float, float,
                                                                               tuple]:
    """(chunks r, r+p, …, parameters they hold, of which routed experts, each chunk's deferred reduce-scatters,
    :func:`grad_sync.deferred_reduce_scatters`) of pipeline rank ``r``; ``inputs``: :func:`compute_inputs` of
    ``layout``, if already built."""
    inputs = compute_inputs(cache, workload, layout) if inputs is None else inputs
    chunks, params, experts, deferred = [], 0.0, 0.0, []
    for k in range(layout.v):
        work, (held, expert, calls) = _chunk_work(cache, workload, layout, r, r + k * layout.pp, groups, fetch, inputs)
        chunks.append(work)
        deferred.append(calls)
        params, experts = params + held, experts + expert
    return tuple(chunks), params, experts, tuple(deferred)


def stage_work(cache: CostCache, workload, layout: ParallelLayout, r: int,
               fetch: ParamFetch = ParamFetch.INFINITY, inputs: tuple[ComputeOptions, float] | None = None,
               keys: tuple[object, object] | None = None) -> StageWork:
    """The representative rank of pipeline rank ``r``: its chunks r, r+p, …, then its gradient sync, each remembered
    per its key (:func:`stage_keys`) and the rank (which with the key's fields decides the rank's groups; the sync
    also per the parameters the chunks hold). ``inputs``, ``keys``: :func:`compute_inputs` and :func:`stage_keys` of
    ``layout``, if already built."""
    groups = stage_groups(cache, layout, r)
    rep = groups[0]
    inputs = compute_inputs(cache, workload, layout) if inputs is None else inputs
    keys = stage_keys(cache, workload, layout, fetch) if keys is None else keys
    chunks, params, experts, deferred = cache.memo(("chunks of rank", keys[0], r), lambda: _stage_chunks(
        cache, workload, layout, r, groups, fetch, inputs))
    sync, fractions, after, opt = cache.memo(("grad sync of rank", keys[1], r, params, experts), lambda: grad_sync.grad_sync(
        cache, workload, layout, rep, groups[2], params, experts))
    sync, fractions = _with_deferred(cache, deferred, sync, fractions)
    tied = cache.memo(("tied embedding of rank", keys[1], r),  # ready after the last backward; reads no UNREAD field
                      lambda: tied_embedding.tied_embedding_sync(cache, workload, layout, r))
    sync, fractions = _with_tied(cache, sync, fractions, tied)
    share = inputs[1]  # host_overhead.core_share(cluster, offload_part.gpus_on_node(cluster, world_size))
    runtime, loop = pipeline_runtime.step_host_s(cache.cluster, layout, share), step_loop_s(cache.cluster, share, layout)
    opt += _te_weight_cast_s(cache, workload, layout, r) + runtime + loop  # the loop's own host time (simulator.step_loop)
    gain = 1.0 + rank_max_gain(cache.cluster, layout.world_size)  # the slowest rank per step (simulator.rank_max)
    opt *= gain
    cold = first_cold_s(cache.cluster, share)  # the part of the loop the executor times in forward, the rest outside
    return StageWork(stage=r, rank=rep, chunks=chunks, grad_sync=sync, grad_ready_fraction=fractions,
                     after_step=after, optimizer_s=opt, loop_outside_s=(runtime + loop - cold) * gain,
                     loop_forward_s=cold * gain,
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
    inputs, keys = compute_inputs(cache, workload, layout), stage_keys(cache, workload, layout, fetch)
    return tuple(stage_work(cache, workload, layout, r, fetch, inputs, keys) for r in range(layout.pp))


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
    inputs, keys = compute_inputs(cache, workload, layout), stage_keys(cache, workload, layout, fetch)
    stages = tuple(stage_work(cache, workload, layout, r, fetch, inputs, keys) for r in range(layout.pp))
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
    inputs = compute_inputs(cache, workload, layout)
    phases = {p for c in range(layout.pp * layout.v)
              for p in _chunk_compute(cache, workload, layout, c, inputs).host_bound}
    return tuple(p for p in ("forward", "backward", "recompute") if p in phases)
