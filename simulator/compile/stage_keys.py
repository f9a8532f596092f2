"""The memo keys of a pipeline stage's parts (:func:`simulator.compile.step.stage_work`), built once per layout.

A search compiles thousands of structures whose stages share parts: the chunks of structures that differ only in
their all-reduce's buckets or options (ZeRO 0/1), the gradient sync of structures that differ only in micro-batch,
recompute or sequence parallelism. Each part is remembered in the :class:`CostCache` per what it reads
(:func:`chunks_key`, :func:`simulator.compile.grad_sync.grad_sync_key`) and the pipeline rank; the keys, forty
strategy fields each, are interned once per layout (:func:`stage_keys`) so that a stage hashes an object and a rank.
"""

from __future__ import annotations

from dataclasses import fields
from operator import attrgetter

from simulator.compile import grad_sync
from simulator.compile.costs import CostCache
from simulator.compile.offload_part import ParamFetch
from simulator.strategy import ParallelLayout, ParamServerSync, Strategy
from simulator.strategy.sync import partitions_gradients

_ALL_BUT_SYNC = attrgetter(*(f.name for f in fields(Strategy) if f.name != "dp_sync"))


def chunks_key(workload, layout: ParallelLayout, fetch: ParamFetch) -> tuple:
    """Everything a pipeline rank's chunks read but the rank (:func:`simulator.compile.step._chunk_work`): the
    workload, the fetch, the layout's world size and every strategy field, the gradient sync's fields only where a
    chunk carries that sync's calls (ZeRO-2/3's reduce-scatters, per micro-batch or deferred to the step's end,
    :func:`simulator.compile.grad_sync.grad_reduce_scatters` / ``deferred_reduce_scatters``: its algorithm and
    buckets) or where they place the workers (a parameter server's nodes). Otherwise the chunks read only the sync's type (DDP's host time per
    forward, :func:`simulator.framework_host.ddp_wrapped`): a search's ZeRO-0/1 structures that differ only in
    buckets or all-reduce options share their chunks. ``tests/test_stage_chunks_memo.py``."""
    s = layout.strategy
    sync = s.dp_sync if partitions_gradients(s) or isinstance(s.dp_sync, ParamServerSync) else type(s.dp_sync)
    return ("stage chunks", workload, fetch, layout.world_size, _ALL_BUT_SYNC(s), sync)


def stage_keys(cache: CostCache, workload, layout: ParallelLayout, fetch: ParamFetch) -> tuple[object, object]:
    """(:func:`chunks_key`, :func:`grad_sync.grad_sync_key`) of ``layout``, each interned in ``cache`` as one
    object per distinct key: a stage's memo keys are then that object and the rank (hashed by identity), not the
    strategy's forty fields hashed again per stage. A step's stages build them once (``stage_work``'s ``keys``)."""
    return (cache.memo(chunks_key(workload, layout, fetch), object),
            cache.memo(grad_sync.grad_sync_key(workload, layout), object))


