"""Expert-parallel communication of a compiled step: the token all-to-alls of the MoE layers and the
expert gradients' reduction over the expert-data-parallel group.

- Dispatch and combine (GShard, Lepikhin et al. 2021 §2.2 [src: lepikhin-2021]; DeepSpeed-MoE
  [src: deepspeed-moe]; Megatron-Core's ``alltoall`` token dispatcher [src: megatron-core]): in every
  MoE layer's forward each rank of an ep group sends the ``T·k`` copies of its tokens to the ranks holding their experts (dispatch) and
  receives the expert outputs back (combine): two all-to-alls of ``T·k·h·e`` bytes per rank
  (nccl-tests' size convention, :mod:`simulator.collectives.direct`), on the ep group's real ranks, so
  an ep group inside a node runs on NVLink and one spread over nodes on the network (the collective
  registry picks and times the algorithm). Backward runs the same two on the gradients. With routing
  skew ``σ`` the busiest rank receives ``σ·T·k`` copies (capped by the capacity factor); the exchange
  is timed as a uniform all-to-all of that volume, an upper bound set by the busiest receiver. Full
  recomputation repeats the forward pair inside backward.
- The all-to-alls block the compute (the experts need their tokens; the next layer needs the combined
  output): they join the chunk's blocking calls, with :attr:`CommKind.EP`. One call stands for the
  ``dp/ep · tp`` ep groups that run it at the same moment (``concurrent_groups``).
- Batch-level overlap (strategy field ``moe_a2a_overlap``: Megatron-Core's ``overlap_moe_expert_parallel_comm``
  with ``delay_wgrad_compute``, MCore v0.14 [src: megatron-core-moe-a2a-overlap]): the steady state of the 1F1B
  schedule runs the forward of one micro-batch and the backward of another together, layer by layer, with each
  one's all-to-alls on a communication stream under the other's compute. For a chunk whose all-to-alls take ``A``
  (forward, backward and recompute legs of one micro-batch) and whose compute takes ``C``, the pair takes
  ``max(A, C + f·A)`` instead of ``C + A``: the compute under the all-to-alls runs on ``1 − f`` of the SMs (``f``
  the collective kernels' share, :func:`simulator.interference.cluster_sm_fraction`). So ``max(A − C, f·A)`` stays
  exposed (:func:`batch_overlap`), spread over the chunk's EP calls in proportion to their times and charged as
  :attr:`~simulator.work.Transport.OVERLAPPED` remainders (timed delays; the DES does not put their flows on the
  links). Every micro-batch is charged as paired: the warm-up forwards and cool-down backwards of the pipeline
  schedule, which have no partner, are left out (optimistic by their share; the compiled micro-batch cannot
  depend on the number of micro-batches), and so are the dependencies inside a layer that keep the two streams
  from interleaving perfectly.
- ZeRO with experts: the routed experts' parameters and gradients are partitioned over the
  expert-data-parallel group, the rest over dp, so every ZeRO call of a block is two: the dense part
  over dp, then the experts' over the dp/ep ranks holding the same experts (:func:`interleave`: the
  block-by-block play then runs two half-block slices per block, each after its own gather).
- Tensor parallelism inside the experts is tp (expert tensor parallelism = tp, Megatron-Core's
  default): each tp rank exchanges the tokens of its own ep group, the tp all-reduce after the MLP is
  the block's usual one (:mod:`simulator.compile.comm_part`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.collectives.base import Op
from simulator.compile.comm_part import bucketed, call
from simulator.compile.costs import CostCache
from simulator.work import CommCall, CommKind, Transport
from simulator.workload.moe import expert_tokens
from simulator.workload.moe_routing import Dispatcher, distinct_units


@dataclass(frozen=True)
class Dispatch:
    """The bytes one rank moves per all-to-all of a MoE layer (module docstring), at the busiest
    receiver's load: ``inter_bytes`` over the network (DeepEP only: one copy per destination node),
    ``intra_bytes`` per-expert copies (per-expert) or per-rank copies forwarded inside the node
    (DeepEP), and ``tp_gather_bytes`` the tp group's all-gather of the dispatched copies (0 unless
    sequence parallelism splits the tokens over tp > 1)."""

    dispatcher: Dispatcher
    inter_bytes: float
    intra_bytes: float
    tp_gather_bytes: float


def dispatch_bytes(workload, strategy, ep: int, tp: int, sp: bool, nodes: int) -> Dispatch:
    """Dispatch volumes per rank (module docstring): with ``T`` tokens per rank (the micro-batch's
    ``b·s``, over tp under sequence parallelism), load ratio ``λ`` = busiest rank's copies ÷ ``T·k``
    (skew, capacity; :func:`simulator.workload.moe.expert_tokens`), ``h·e`` bytes a token:

    - per-expert: ``λ·T·k·h·e`` on the ep group;
    - DeepEP over the ``N`` = ``nodes`` nodes of the ep group (:func:`group_nodes`): ``λ·T·n_N·h·e`` between nodes and
      ``λ·T·n_R·h·e`` inside them, ``n_N``/``n_R`` the expected distinct nodes/ranks of a token
      (:func:`simulator.workload.moe_routing.distinct_units`).
    """
    moe = workload.moe
    split = tp if sp and tp > 1 else 1
    tokens = strategy.micro_batch * workload.seq_len / split
    token_bytes = workload.hidden * workload.dtype.activation_bytes
    ratio = expert_tokens(moe, tokens, strategy.routing_skew, ep) / (tokens * moe.top_k)
    gather = ratio * tokens * split * moe.top_k * token_bytes if split > 1 else 0.0
    if strategy.moe_dispatcher is Dispatcher.PER_EXPERT:
        return Dispatch(Dispatcher.PER_EXPERT, 0.0, ratio * tokens * moe.top_k * token_bytes, gather)
    routing = strategy.moe_routing
    inter = distinct_units(moe, routing, nodes) * ratio * tokens * token_bytes if nodes > 1 else 0.0
    intra = distinct_units(moe, routing, ep) * ratio * tokens * token_bytes
    return Dispatch(Dispatcher.DEEPEP, inter, intra, gather)


def group_nodes(cluster, group: tuple[int, ...]) -> int:
    """Nodes the ep group spans evenly (1 when its nodes hold unequal numbers of its ranks: then
    DeepEP is timed as one all-to-all of per-rank copies)."""
    split = node_split(cluster, group)
    return 1 if split is None else len(split[1])


def node_split(cluster, group: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(the ep ranks on ``group[0]``'s node, the rail: the ep rank at the same position on every
    node of the group), or None when the group's nodes hold unequal numbers of its ranks."""
    by_node: dict[int, list[int]] = {}
    for rank in group:
        by_node.setdefault(cluster.place(rank)[0], []).append(rank)
    sizes = {len(v) for v in by_node.values()}
    if len(sizes) != 1:
        return None
    own = tuple(by_node[cluster.place(group[0])[0]])
    return own, tuple(ranks[0] for ranks in by_node.values())


def ep_calls(cache: CostCache, group: tuple[int, ...], tp_group: tuple[int, ...], volume: Dispatch, *,
             moe_blocks: int, full_recompute: bool,
             concurrent: int) -> tuple[tuple[CommCall, ...], tuple[CommCall, ...]]:
    """(forward, backward) calls of one chunk's micro-batch: per MoE block a dispatch and a combine
    each way (module docstring); the tp all-gather/reduce-scatter of the copies between them when
    sequence parallelism splits the tokens."""
    if len(group) < 2 or moe_blocks == 0:
        return (), ()
    legs = _legs(cache, group, volume, concurrent)
    tp_groups = concurrent * len(group) // max(1, len(tp_group))  # the same ranks, in groups of tp
    ag = call(cache, CommKind.EP, Op.ALL_GATHER, tp_group, volume.tp_gather_bytes, tp_groups)
    rs = call(cache, CommKind.EP, Op.REDUCE_SCATTER, tp_group, volume.tp_gather_bytes, tp_groups)
    block = legs + tuple(c for c in (ag, rs) if c is not None) + legs
    fwd = block * moe_blocks
    bwd = ((block if full_recompute else ()) + block) * moe_blocks
    return fwd, bwd


def _legs(cache: CostCache, group: tuple[int, ...], volume: Dispatch, concurrent: int) -> tuple[CommCall, ...]:
    """One all-to-all's calls: the whole ep group (per-expert), or DeepEP's network leg on the rail
    then the NVLink leg inside the node, timed one after the other (an upper bound: DeepEP pipelines
    them)."""
    split = node_split(cache.cluster, group) if volume.dispatcher is Dispatcher.DEEPEP else None
    if split is None or volume.inter_bytes == 0.0:
        only = call(cache, CommKind.EP, Op.ALL_TO_ALL, group, volume.intra_bytes, concurrent)
        return () if only is None else (only,)
    node, rail = split
    inter = call(cache, CommKind.EP, Op.ALL_TO_ALL, rail, volume.inter_bytes, concurrent * len(node))
    intra = call(cache, CommKind.EP, Op.ALL_TO_ALL, node, volume.intra_bytes, concurrent * len(rail))
    return tuple(c for c in (inter, intra) if c is not None)


def expert_grad_sync(cache: CostCache, group: tuple[int, ...], nbytes: float, bucket_bytes: int | None,
                     algorithm: str, concurrent: int) -> tuple[CommCall, ...]:
    """The routed experts' gradient all-reduce over the expert-data-parallel group (the ranks holding
    the same experts: DeepSpeed-MoE's expert-data-parallel group [src: deepspeed-moe]), bucketed as
    the dense gradients are."""
    return bucketed(cache, CommKind.DP, Op.ALL_REDUCE, group, nbytes, bucket_bytes, algorithm, concurrent)


def interleave(dense: tuple[CommCall, ...], experts: tuple[CommCall, ...]) -> tuple[CommCall, ...]:
    """Per-block calls of the dense part and of the experts, block by block (dense first); calls past
    the shorter list (buckets of unequal counts) follow in order."""
    out = [c for pair in zip(dense, experts) for c in pair]
    n = min(len(dense), len(experts))
    return tuple(out) + dense[n:] + experts[n:]


def batch_overlap(fwd: tuple[CommCall, ...], bwd: tuple[CommCall, ...], compute_s: float,
                  sm_fraction: float) -> tuple[tuple[CommCall, ...], tuple[CommCall, ...]]:
    """The EP calls of one chunk's micro-batch under batch-level all-to-all overlap (module docstring): the
    exposed ``max(A − C, f·A)`` of the all-to-alls' ``A`` seconds under the chunk's ``C = compute_s``, spread over
    the EP calls in proportion to their times as OVERLAPPED remainders; the other calls unchanged."""
    total = sum(c.time_s for c in fwd + bwd if c.kind is CommKind.EP)
    if total <= 0.0:
        return fwd, bwd
    scale = max(total - compute_s, sm_fraction * total) / total

    def hidden(calls: tuple[CommCall, ...]) -> tuple[CommCall, ...]:
        return tuple(replace(c, transport=Transport.OVERLAPPED, algorithm=None, time_s=c.time_s * scale)
                     if c.kind is CommKind.EP else c for c in calls)
    return hidden(fwd), hidden(bwd)
