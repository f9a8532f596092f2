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

The engines split an action's compute evenly over its calls (one slice per call, the tensors' FLOPs
are not weighed: an approximation). Backward gathers run in reverse trace order. Workloads without
tensor shapes (layer lists), expert-parallel layouts (ep > 1) and offloaded parameters keep the
per-block gathers.
"""

from __future__ import annotations

from simulator.bucket_defaults import DEEPSPEED_ZERO3, DeepSpeedZero3Config
from simulator.collectives.base import Op
from simulator.compile import comm_part
from simulator.compile.costs import CostCache
from simulator.work import CommCall, CommKind


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
            made[n] = comm_part.call(cache, CommKind.ZERO, Op.ALL_GATHER, group, n * pbytes, concurrent)
    calls = tuple(made[n] for n in gathered if made[n] is not None)
    return calls, config.prefetch_calls(gathered)


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
