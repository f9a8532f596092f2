"""Communication side of a compiled step: tensor-parallel, pipeline, data-parallel, ZeRO and PS calls.

- Tensor parallel (Megatron-LM, Shoeybi et al. 2019 §3): per block, forward all-reduces the
  attention output and the MLP output (2 calls), backward all-reduces the input gradients of the
  two column-parallel regions (2 calls), each of ``b·s·h`` activation elements. With sequence
  parallelism (Korthikanti et al. 2022 §4.2.2) each all-reduce becomes a reduce-scatter plus an
  all-gather of the same tensor: 2 of each forward, 2 of each backward. The embedding's
  vocabulary-parallel lookup adds one forward all-reduce (SP: reduce-scatter) on the first chunk;
  the logits' input gradient one backward all-reduce (SP: reduce-scatter; and one forward
  all-gather) on the last. Full recomputation repeats the forward calls inside backward, listed
  before the backward calls of the same block. torch's own tensor parallelism (DTensor) issues a different list:
  :mod:`simulator.compile.torch_tp`.
- Pipeline: ``b·s·h`` activations per micro-batch forward, the same size of gradients backward
  (÷t with sequence parallelism, Korthikanti et al. §4.2.2), one send/recv between the two
  stages' representative ranks.
- Data parallel (DDP, Li et al. VLDB 2020 §3.2): gradients in buckets of ``bucket_bytes``, last
  layers first; bucket j is ready when the backward has produced the bytes up to its end (a
  bucket's ready point is its cumulative byte fraction of the chunk's gradients: gradient bytes
  are taken to appear at a constant rate over the backward, an assumption). All-reduce under ZeRO
  0/1, reduce-scatter under ZeRO 2/3; ZeRO-1/2 all-gather the updated parameters after the step.
  Gradient accumulation is DDP's ``no_sync``: only the last micro-batch communicates.
- ZeRO-3 (Rajbhandari et al. SC'20 §5.3): every micro-batch all-gathers each block's parameters
  before its forward and again before its backward (the re-gather also serves recomputation, which
  runs inside that backward), prefetched one block ahead; the chunk's edge parameters are gathered
  with its first block. DeepSpeed's ZeRO-3 gathers per tensor instead (:mod:`simulator.compile.ds_zero3`).
- ZeRO-2/3 gradients as the frameworks issue them (:func:`zero_grad_reduce_scatters`): every
  micro-batch's backward reduce-scatters its gradients, accumulation or not (DeepSpeed's ZeRO-2/3
  reduce in the backward hooks into the partitioned gradient buffer, ``stage_1_and_2.py`` /
  ``stage3.py`` [src: deepspeed-zero]; FSDP2 reduce-scatters each ``fully_shard`` unit's gradients in
  every backward unless told not to sync [src: torch-fsdp2]). Granularity by framework: FSDP2 one
  call per block (its ``fully_shard`` unit, torchtitan's wrapping; the edge parameters with the
  first), DeepSpeed one per reduce bucket (``reduce_bucket_size``, ``bucket_bytes``). They ride the
  chunk's ZeRO stream with the gathers (the block-by-block play of ``zero_bwd``). ZeRO-0/1 keep
  DDP's ``no_sync``: one all-reduce (reduce-scatter) per step, on the last micro-batch.
- torch's ZeRO-1 (``ZeroRedundancyOptimizer``) does not all-gather: after its local step it broadcasts every
  parameter tensor from the rank that stepped it, one call per tensor (:func:`torch_zero1_broadcasts`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from operator import attrgetter

import numpy as np

from simulator.collectives.base import Op
from simulator.collectives.gloo import async_broadcast_time_s
from simulator.compile.costs import CostCache
from simulator.errors import SpecError
from simulator.receive_first import receive_first_time_s
from simulator.work import CommCall, CommKind, Transport


def call(cache: CostCache, kind: CommKind, op: Op, group: tuple[int, ...], nbytes: float, concurrent: int,
         algorithm: str = "auto", replayed: bool = False) -> CommCall | None:
    """One timed call, or None when it costs nothing (a group of one, an empty message).

    ``SEND_RECV`` is a point-to-point transfer (``algorithm`` unused); any other op a collective,
    ``algorithm`` a registry name or ``auto``; ``replayed``: run as a host loop's replay of the named
    algorithm's schedule (:mod:`simulator.collectives.replayed`).

    Remembered in ``cache`` per its arguments (the call is a function of them and the cache's cluster): a search's
    chunks ask the same tp and p2p calls many times (GPT-3 on 1,024 A100s, 5,000 candidates: 24,326 asks of
    1,361 distinct), and a call is an immutable record that every chunk asking it may hold."""
    nbytes = int(round(nbytes))
    if len(group) < 2 or nbytes <= 0:
        return None
    return cache.memo(("call", kind, op, group, nbytes, concurrent, algorithm, replayed),
                      lambda: _call(cache, kind, op, group, nbytes, concurrent, algorithm, replayed))


def _call(cache: CostCache, kind: CommKind, op: Op, group: tuple[int, ...], nbytes: int, concurrent: int,
          algorithm: str, replayed: bool) -> CommCall:
    """:func:`call` computed, for a group of two or more and a positive whole ``nbytes``."""
    if op is Op.SEND_RECV:
        time_s = cache.p2p(group[0], group[1], nbytes)
        return CommCall(kind=kind, op=op, group=group, nbytes=nbytes, transport=Transport.P2P, time_s=time_s,
                        concurrent_groups=concurrent,
                        receive_first_time_s=receive_first_time_s(cache.cluster, time_s, cache.p2p_wait_s()))
    t, algo = cache.collective(group, op, nbytes, algorithm, replayed)
    return CommCall(kind=kind, op=op, group=group, nbytes=nbytes, transport=Transport.COLLECTIVE, algorithm=algo,
                    time_s=t, concurrent_groups=concurrent)


def tp_calls(cache: CostCache, group: tuple[int, ...], nbytes: int, *, sp: bool, layers: int, first: bool,
             last: bool, full_recompute: bool, concurrent: int,
             attention_only: int = 0) -> tuple[tuple[CommCall, ...], tuple[CommCall, ...]]:
    """(forward calls, backward calls) of one chunk's micro-batch on its tp group. ``attention_only`` of the
    ``layers`` blocks have no MLP tp region under sequence parallelism: MoE blocks whose token dispatcher
    gathers and scatters the dispatched copies over tp itself (:func:`simulator.compile.ep_part.ep_calls`;
    Megatron-Core's alltoall dispatcher: permute, all-to-all over ep, all-gather over tp, experts,
    reduce-scatter over tp, all-to-all back, on the sequence shard [src: megatron-core])."""
    if len(group) < 2:
        return (), ()
    if sp:
        ag = call(cache, CommKind.TP, Op.ALL_GATHER, group, nbytes, concurrent)
        rs = call(cache, CommKind.TP, Op.REDUCE_SCATTER, group, nbytes, concurrent)
        block_fwd, block_bwd = (ag, rs, ag, rs), (ag, rs, ag, rs)
        short = (ag, rs)  # the attention's region alone
        embed_fwd, head_fwd, head_bwd = (rs,), (ag,), (rs,)
    else:
        ar = call(cache, CommKind.TP, Op.ALL_REDUCE, group, nbytes, concurrent)
        block_fwd = block_bwd = (ar, ar)
        short, attention_only = (), 0
        embed_fwd, head_fwd, head_bwd = (ar,), (), (ar,)
    full = layers - attention_only
    fwd = (embed_fwd if first else ()) + block_fwd * full + short * attention_only + (head_fwd if last else ())
    per_block_bwd = (block_fwd if full_recompute else ()) + block_bwd
    per_short_bwd = (short if full_recompute else ()) + short
    bwd = (head_bwd if last else ()) + per_block_bwd * full + per_short_bwd * attention_only
    return fwd, bwd


MAX_BUCKETS = 100_000
"""Buckets one gradient sync is split into at most: a guard on work, not a model limit (each bucket is
a call both engines play; 1-byte buckets of a 125M model were 250 million calls and never finished).
Frameworks never split a parameter tensor across buckets (DDP assigns whole tensors, Li et al. VLDB
2020 §3.2.3), so a real job has at most one bucket per tensor: thousands, not 100,000."""


def torch_zero1_broadcasts(cache: CostCache, group: tuple[int, ...], tensor_bytes: list[int],
                           concurrent: int) -> tuple[CommCall, ...]:
    """torch ``ZeroRedundancyOptimizer.step`` after its local step (``parameters_as_bucket_view=False``, the
    default): ``_sync_params`` calls ``_broadcast_params_from_rank`` for every rank, which issues one
    ``dist.broadcast(param.data, src=owner)`` per parameter tensor that rank owns, so every rank takes part in
    one broadcast per parameter tensor of its model, ``tensor_bytes`` each, in the model's order; all are
    issued asynchronously and waited at the end, charged here one after another
    (``torch/distributed/optim/zero_redundancy_optimizer.py``, torch 2.13, lines 760-827 and 1124-1152)
    [src: torch-zero1-broadcasts]; each at the measured cost of a broadcast of such a batch where the cluster has
    one (:func:`simulator.collectives.gloo.async_broadcast_time_s`), else at a blocking call's. Equal sizes share
    one CommCall object."""
    made: dict[int, CommCall | None] = {}
    out = []
    for nbytes in tensor_bytes:
        if nbytes not in made:
            made[nbytes] = c = call(cache, CommKind.ZERO, Op.BROADCAST, group, nbytes, concurrent)
            batched_s = async_broadcast_time_s(cache.cluster, len(group), nbytes) if c is not None else None
            if batched_s is not None:
                made[nbytes] = replace(c, transport=Transport.ASYNC_BATCH, time_s=batched_s)
        if made[nbytes] is not None:
            out.append(made[nbytes])
    return tuple(out)


def param_tensor_bytes_key(workload, layout, stage: int, dt) -> tuple:
    """Everything :func:`param_tensor_bytes` reads."""
    return ("param_tensor_bytes", workload, layout.tp, layout.pp, stage, layout.layers_per_stage, layout.ep, dt)


def stage_shapes(cache: CostCache, workload, layout, stage: int) -> tuple | None:
    """:func:`simulator.memory.stage_param_shapes` of pipeline stage ``stage`` (tuple), remembered per what it reads
    of ``layout`` (tp, pp, the layer split, ep): the optimizer's tensor count, torch's DTensors and its SP norms each
    name the stage's tensors, for thousands of a search's structures that share a few hundred stages. None for a
    workload without parameter shapes."""
    if not getattr(workload, "has_activation_shapes", False):
        return None
    from simulator.memory import stage_param_shapes

    return cache.memo(("stage param shapes", workload, layout.tp, layout.pp, stage, layout.layers_per_stage, layout.ep),
                      lambda: tuple(stage_param_shapes(workload, tp=layout.tp, pp=layout.pp, stage=stage,
                                                       layers=layout.layer_indices(stage), ep=layout.ep)))


def param_tensor_bytes(workload, layout, stage: int, param_bytes: float) -> list[int]:
    """Bytes of each parameter tensor pipeline stage ``stage``'s ranks hold (their tensor-parallel shards), in
    the model's order; none for a workload without parameter shapes."""
    from simulator.memory import stage_param_shapes
    from simulator.memory.shapes import numel

    if not getattr(workload, "has_activation_shapes", False):
        return []
    shapes = stage_param_shapes(workload, tp=layout.tp, pp=layout.pp, stage=stage,
                                layers=layout.layer_indices(stage), ep=layout.ep)
    return [int(round(numel(shape) * param_bytes)) for _, shape in shapes]


def bucket_runs(total_bytes: float, bucket_bytes: int | None) -> list[tuple[int, int]]:
    """:func:`buckets` as runs of equal sizes: [(size, count), ...] in issue order."""
    total = int(round(total_bytes))
    if total <= 0:
        return []
    if bucket_bytes is None or bucket_bytes >= total:
        return [(total, 1)]
    if -(-total // bucket_bytes) > MAX_BUCKETS:
        raise SpecError("bucket_bytes", f"{bucket_bytes:,}-byte buckets split {total:,} bytes of gradients into more "
                        f"than {MAX_BUCKETS:,} calls; give at least {-(-total // MAX_BUCKETS):,} bytes (frameworks "
                        "never split a tensor, so smaller buckets are one per parameter tensor anyway)")
    full, rest = divmod(total, bucket_bytes)
    return [(bucket_bytes, full)] + ([(rest, 1)] if rest else [])


def buckets(total_bytes: float, bucket_bytes: int | None) -> list[int]:
    """Bucket sizes in issue order: full buckets, the remainder last (None: one bucket of all)."""
    return [size for size, count in bucket_runs(total_bytes, bucket_bytes) for _ in range(count)]


def bucketed(cache: CostCache, kind: CommKind, op: Op, group: tuple[int, ...], total_bytes: float,
             bucket_bytes: int | None, algorithm: str, concurrent: int, replayed: bool = False) -> tuple[CommCall, ...]:
    """One call per bucket (``replayed`` as :func:`call`); equal buckets share one CommCall object (their times
    are equal). Remembered in ``cache`` per arguments: the structures of a search that sync the same bytes over
    the same group share one tuple (and its :func:`kept_ready_fractions`)."""
    return cache.memo(("bucketed", kind, op, group, total_bytes, bucket_bytes, algorithm, concurrent, replayed),
                      lambda: _bucketed(cache, kind, op, group, total_bytes, bucket_bytes, algorithm, concurrent,
                                        replayed))


def _bucketed(cache: CostCache, kind: CommKind, op: Op, group: tuple[int, ...], total_bytes: float,
              bucket_bytes: int | None, algorithm: str, concurrent: int, replayed: bool) -> tuple[CommCall, ...]:
    out: tuple[CommCall, ...] = ()
    for size, count in bucket_runs(total_bytes, bucket_bytes):
        made = call(cache, kind, op, group, size, concurrent, algorithm, replayed)
        if made is not None:
            out += (made,) * count
    return out


_NBYTES = attrgetter("nbytes")


def ready_fractions(calls: tuple[CommCall, ...], overlap: bool) -> tuple[float, ...]:
    """Cumulative byte fraction at each bucket's end (its ready point), or all 1.0 without overlap."""
    if not overlap:
        return (1.0,) * len(calls)
    done = np.cumsum(np.fromiter(map(_NBYTES, calls), dtype=np.int64, count=len(calls)))
    if not len(done) or done[-1] >= 2 ** 53:  # past float64's exact integers: Python's exact int / int
        total = sum(c.nbytes for c in calls)
        return tuple(int(d) / total for d in done)
    return tuple((done / done[-1]).tolist())  # exact integers, one rounding each: as int / int


def kept_ready_fractions(cache: CostCache, calls: tuple[CommCall, ...], overlap: bool) -> tuple[float, ...]:
    """:func:`ready_fractions`, remembered in ``cache`` per tuple of calls (one per bucketed sync, :func:`bucketed`;
    thousands of buckets for a large model), keyed by the tuple's id: the entry holds the tuple, so no other
    object takes that id while the cache lives."""
    kept = cache.memo(("ready fractions", id(calls), overlap), lambda: (calls, ready_fractions(calls, overlap)))
    return kept[1] if kept[0] is calls else ready_fractions(calls, overlap)


def zero3_gathers(cache: CostCache, group: tuple[int, ...], layer_bytes: float, edge_bytes: float, layers: int,
                  concurrent: int, root_apart: bool = False) -> tuple[CommCall, ...]:
    """Per-block parameter all-gathers of one chunk: the edge parameters with the first block, or, with
    ``root_apart`` (FSDP2: ``fully_shard`` on every block and then on the root module, which keeps the chunk's edge
    parameters, as :mod:`executor.strategies.data_parallel` and torchtitan wrap a model), in a call of their own
    before the blocks': FSDP2 all-gathers each ``fully_shard`` module's parameters apart, the root's too
    [src: torch-fsdp2-host-path]."""
    if len(group) < 2 or layers == 0 and edge_bytes <= 0:
        return ()
    if layers == 0:  # a layer-list chunk: everything in one gather
        return tuple(c for c in (call(cache, CommKind.ZERO, Op.ALL_GATHER, group, edge_bytes, concurrent),)
                     if c is not None)
    rest = call(cache, CommKind.ZERO, Op.ALL_GATHER, group, layer_bytes, concurrent)
    if root_apart:
        root = call(cache, CommKind.ZERO, Op.ALL_GATHER, group, edge_bytes, concurrent) if edge_bytes > 0 else None
        return tuple(c for c in (root,) + (rest,) * layers if c is not None)
    first = call(cache, CommKind.ZERO, Op.ALL_GATHER, group, layer_bytes + edge_bytes, concurrent)
    return (first,) + (rest,) * (layers - 1)


def partition(numel: float, dp: int) -> float:
    """Elements of one rank's ZeRO partition: ⌈numel / dp⌉ (DeepSpeed's flat, padded split)."""
    return float(math.ceil(numel / dp))


def zero_grad_reduce_scatters(cache: CostCache, group: tuple[int, ...], layer_bytes: float, edge_bytes: float,
                              layers: int, bucket_bytes: int | None, per_block: bool, concurrent: int,
                              algorithm: str = "auto") -> tuple[CommCall, ...]:
    """One micro-batch's gradient reduce-scatters of a chunk under ZeRO-2/3 (module docstring).

    ``per_block`` (FSDP2): one call per ``fully_shard`` module as :func:`zero3_gathers` splits the parameters with
    ``root_apart``: one per block, then the root module's edge gradients in a call of their own (its post-backward
    runs last, once the embedding's gradient is ready) [src: torch-fsdp2-host-path]; otherwise (DeepSpeed) one call
    per bucket of ``bucket_bytes`` over the chunk's gradient bytes, last layers first (:func:`bucketed`).
    """
    if len(group) < 2:
        return ()
    if not per_block or layers == 0:
        return bucketed(cache, CommKind.ZERO, Op.REDUCE_SCATTER, group, layers * layer_bytes + edge_bytes,
                        bucket_bytes, algorithm, concurrent)
    rest = call(cache, CommKind.ZERO, Op.REDUCE_SCATTER, group, layer_bytes, concurrent, algorithm)
    root = (call(cache, CommKind.ZERO, Op.REDUCE_SCATTER, group, edge_bytes, concurrent, algorithm)
            if edge_bytes > 0 else None)
    return tuple(c for c in (rest,) * layers + (root,) if c is not None)
