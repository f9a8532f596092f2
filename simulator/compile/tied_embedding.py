"""The tied word embedding's gradient all-reduce of torch's pipelines (:func:`tied_embedding_sync`).

A model that ties its word embedding to its output layer, split into pipeline stages, holds the embedding on the
first stage and a copy on the last (for the logits); after each step's schedule the two copies' gradients are
summed between the first and the last stage of every pipeline (Megatron-LM's embedding group, Shoeybi et al. 2019),
which the executor does for torch's pipelines (``sync_tied`` in ``executor/strategies/pipeline.py``, called
by ``ParallelRunner._pipeline_step`` after ``schedule.step``). Megatron-LM's own is not charged yet
(:mod:`simulator.compile.megatron_step`).
"""

from __future__ import annotations

from simulator.collectives.base import Op
from simulator.compile.comm_part import call
from simulator.pipeline_runtime import torch_pipeline
from simulator.strategy import ZeroStage
from simulator.strategy.formats import sync_dtype
from simulator.work import CommKind


def tied_embedding_sync(cache, workload, layout, stage: int) -> tuple:
    """The all-reduce of a tied word embedding's gradient between a pipeline's first and last stage, once per step
    after the schedule (the executor's ``sync_tied`` over Megatron-LM's embedding group, Shoeybi et al. 2019: the
    last stage holds a copy of the embedding for the logits and both copies' gradients are summed so the copies
    stay equal): one :class:`simulator.work.CommCall` on pp rank ``stage`` when it holds
    the first or the last stage of a :func:`~simulator.pipeline_runtime.torch_pipeline` whose model ties its
    embeddings; else ``()``.

    Bytes: ``V · h / tp`` gradients (the vocabulary-sharded copy on each tp rank) in the data-parallel sync's
    format (:func:`simulator.strategy.formats.sync_dtype`), ``/ dp`` under FSDP2 (ZeRO ≥ 2: both copies are
    sharded alike over FSDP2's mesh dimension, dp·cp ranks (``ParallelLayout.dp_cp``; the executor's
    ``executor/strategies/data_parallel.py``), and the local shards are summed). The group is the representative's
    pair (dp 0, tp 0); the ``dp · cp · tp`` pairs run at once. Megatron-LM's own (``finalize_model_grads``) is not charged yet
    (:mod:`simulator.compile.megatron_step`)."""
    if not torch_pipeline(layout) or not getattr(workload, "tied_embeddings", False) or stage not in (0, layout.pp - 1):
        return ()
    shards = layout.tp * (layout.dp_cp if layout.strategy.zero >= ZeroStage.ZERO2 else 1)
    nbytes = workload.vocab * workload.hidden / shards * sync_dtype(workload.dtype, layout.strategy).grad_bytes
    group = (layout.rank_of(0, 0, 0), layout.rank_of(0, layout.pp - 1, 0))
    tied = call(cache, CommKind.DP, Op.ALL_REDUCE, group, nbytes, layout.dp_cp * layout.tp)
    return () if tied is None else (tied,)
