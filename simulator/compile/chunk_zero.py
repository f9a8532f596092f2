"""A chunk's sharded-parameter calls: ZeRO-3 / FSDP gathers, offloaded fetches, gradient reduce-scatters.

What :func:`simulator.compile.step._chunk_work` asks of the sharding (split out of it so each rule reads on one
screen): the forward's and backward's gather streams in the order the framework issues them (torch FSDP's hooks on
one stream, :mod:`.fsdp_order`; DeepSpeed's per-tensor list collectives, :mod:`.ds_zero3`), their prefetch depth,
FSDP2's copies on the compute stream (:mod:`.fsdp2_copies`) and, on gloo, the wait of FSDP2's blocking calls
(:mod:`simulator.cluster.fsdp2_wait`). See ``docs/simulator.md``.
"""

from __future__ import annotations

from typing import NamedTuple

from simulator.cluster.fsdp2_wait import with_fsdp2_waits
from simulator.collectives.base import Op
from simulator.compile import ds_zero3, fsdp_order, grad_sync, offload_part
from simulator.compile.compute_part import ChunkCompute
from simulator.compile.costs import CostCache
from simulator.compile.fsdp2_copies import fsdp2_copy_s
from simulator.compile.zero_part import gathered_block_bytes, gathers
from simulator.strategy import Framework, Offload, ParallelLayout, ZeroStage
from simulator.gather_reuse import GatherReuse
from simulator.strategy.formats import sync_dtype
from simulator.strategy.sync import pipeline_defers_grad_sync
from simulator.work import CommCall, CommKind, Transport

ParamFetch = offload_part.ParamFetch


class ChunkZero(NamedTuple):
    """A chunk's sharding calls and the compute-stream seconds they add (forward, backward)."""

    zero_fwd: tuple
    zero_bwd: tuple
    prefetch_calls: int
    copy_fwd_s: float
    """FSDP2's copies on the compute stream (:func:`.fsdp2_copies.fsdp2_copy_s`), forward and backward."""
    copy_bwd_s: float
    sync_fwd_s: float
    """Host time the compute stream waits for DeepSpeed's synchronised fetches (:mod:`.ds_zero3`)."""
    sync_bwd_s: float
    deferred: tuple = ()
    """The chunk's once-per-step reduce-scatters where torch's pipelining runtime defers FSDP2's gradient sync
    (:func:`.grad_sync.deferred_reduce_scatters`); the stage's gradient sync carries them."""
    reuse: GatherReuse | None = None
    """Where that runtime keeps the gathered parameters, which actions gather (:func:`gather_reuse`)."""


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


def deepspeed_zero3(layout: ParallelLayout) -> bool:
    """DeepSpeed's own ZeRO-3 gathers (:mod:`simulator.compile.ds_zero3`): per tensor, not per block; FSDP2's
    float8 all-gather is not DeepSpeed's, so it keeps the per-block path."""
    s = layout.strategy
    return s.zero is ZeroStage.ZERO3 and layout.framework is Framework.DEEPSPEED and not s.fp8_all_gather


def gather_reuse(layout: ParallelLayout) -> GatherReuse | None:
    """How torch's pipelining runtime keeps an FSDP2 stage's gathered parameters (:mod:`simulator.gather_reuse`):
    where it defers the gradient sync (:func:`pipeline_defers_grad_sync`, FSDP2 with pp > 1) it also turns
    ``reshard_after_backward`` off [src: torch-pipelining-fsdp-sync]; ZeRO-2 then keeps them over the step, ZeRO-3
    from a backward to the next forward. None: every action gathers."""
    s = layout.strategy
    if not pipeline_defers_grad_sync(s):
        return None
    return GatherReuse.STEP if s.zero is ZeroStage.ZERO2 else GatherReuse.UNTIL_FORWARD


def chunk_zero(cache: CostCache, workload, layout: ParallelLayout, c: int, cc: ChunkCompute, fetch: ParamFetch,
               dp_group: tuple, edp_group: tuple) -> ChunkZero:
    """Chunk ``c``'s sharding calls (module docstring); ``cc``: its compute (:func:`.compute_part.chunk_compute`)."""
    s, dp, layers = layout.strategy, layout.dp_cp, cc.blocks
    zero = zero_bwd = ()
    numels, prefetch = None, 1  # DeepSpeed's per-tensor gathers (ds_zero3) and their prefetch depth in calls
    gathered = dp > 1 and (s.zero is ZeroStage.ZERO3 or grad_sync.fsdp2_zero2(layout))  # reads the two below
    pbytes = sync_dtype(workload.dtype, s).param_bytes if gathered else None  # fp32 under autocast
    block_bytes = gathered_block_bytes(workload, layout, cc) if gathered else None
    if s.zero is ZeroStage.ZERO3 and dp > 1:
        if s.offload in (Offload.PARAMS, Offload.NVME):  # (experts fetched with the rest, over dp)
            sharing = offload_part.gpus_on_node(cache.cluster, layout.world_size)
            first = fetch_call(cache, s.offload, fetch, dp_group, (cc.layer_params + cc.edge_params) * pbytes, sharing)
            rest = fetch_call(cache, s.offload, fetch, dp_group, cc.layer_params * pbytes, sharing)
            zero = zero_bwd = (first,) + (rest,) * (max(layers, 1) - 1)
        else:
            zero = zero_bwd = gathers(cache, layout, cc, dp_group, edp_group, pbytes, block_bytes)
            numels = ds_zero3.chunk_tensor_numels(workload, layout, c) if deepspeed_zero3(layout) else None
            if numels is not None:  # one call per tensor, in trace order; backward in reverse
                zero, prefetch = ds_zero3.gathers(cache, dp_group, numels, pbytes, layout.tp)
    reduce_scatters = grad_sync.grad_reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers)
    sync_fwd_s = sync_bwd_s = 0.0  # host time the compute stream waits for (DeepSpeed's synchronised fetches)
    if numels is not None:  # DeepSpeed: list collectives, a full bucket one reduce-scatter per tensor (ds_zero3)
        events = ds_zero3.chunk_backward_events(workload, layout, c)  # recompute's re-gathers (ds_zero3_reuse)
        zero_bwd, sync_fwd_s, sync_bwd_s = ds_zero3.backward_stream(cache, layout, workload, dp_group, numels, zero,
                                                                    cc.bwd_s + cc.recompute_s, events)
    else:  # torch FSDP's hooks on its one stream (fsdp_order); other frameworks: the gathers, then the reduce-scatters
        zero_bwd = fsdp_order.backward_stream(layout, zero_bwd, reduce_scatters)
    zero_fwd = zero
    if grad_sync.fsdp2_zero2(layout) and dp > 1:  # reshard_after_forward=False: gathered in forward, kept for backward
        zero_fwd = gathers(cache, layout, cc, dp_group, edp_group, pbytes, block_bytes)
    copy_fwd, copy_bwd = fsdp2_copy_s(cache, workload, layout, cc)  # FSDP2's copies on the compute stream
    blocking = grad_sync.fsdp2_blocking_prefetch(layout, cache.cluster)  # FSDP2 on gloo: calls on the compute thread
    prefetch = prefetch if blocking is None else blocking
    if blocking is not None:  # their wait for a core: the one measured inside the FSDP2 model, where measured
        zero_fwd, zero_bwd = with_fsdp2_waits(cache.cluster, zero_fwd), with_fsdp2_waits(cache.cluster, zero_bwd)
    deferred = grad_sync.deferred_reduce_scatters(cache, workload, layout, dp_group, edp_group, cc, layers)
    reuse = gather_reuse(layout) if zero_fwd or zero_bwd else None
    return ChunkZero(zero_fwd, zero_bwd, prefetch, copy_fwd, copy_bwd, sync_fwd_s, sync_bwd_s, deferred, reuse)
