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
- ZeRO with experts: the routed experts' parameters and gradients are partitioned over the
  expert-data-parallel group, the rest over dp, so every ZeRO call of a block is two: the dense part
  over dp, then the experts' over the dp/ep ranks holding the same experts (:func:`interleave`: the
  block-by-block play then runs two half-block slices per block, each after its own gather).
- Tensor parallelism inside the experts is tp (expert tensor parallelism = tp, Megatron-Core's
  default): each tp rank exchanges the tokens of its own ep group, the tp all-reduce after the MLP is
  the block's usual one (:mod:`simulator.compile.comm_part`).
"""

from __future__ import annotations

from simulator.collectives.base import Op
from simulator.compile.comm_part import bucketed, call
from simulator.compile.costs import CostCache
from simulator.work import CommCall, CommKind
from simulator.workload.moe import expert_tokens


def dispatch_bytes(workload, micro_batch: int, skew: float, ep: int) -> float:
    """Bytes one all-to-all moves per rank: the busiest rank's token copies × h × e (module docstring)."""
    tokens = micro_batch * workload.seq_len
    return expert_tokens(workload.moe, tokens, skew, ep) * workload.hidden * workload.dtype.activation_bytes


def ep_calls(cache: CostCache, group: tuple[int, ...], nbytes: float, *, moe_blocks: int, full_recompute: bool,
             concurrent: int) -> tuple[tuple[CommCall, ...], tuple[CommCall, ...]]:
    """(forward, backward) all-to-alls of one chunk's micro-batch: two per MoE block each way."""
    if len(group) < 2 or moe_blocks == 0:
        return (), ()
    a2a = call(cache, CommKind.EP, Op.ALL_TO_ALL, group, nbytes, concurrent)
    if a2a is None:
        return (), ()
    pair = (a2a, a2a)
    fwd = pair * moe_blocks
    bwd = ((pair if full_recompute else ()) + pair) * moe_blocks
    return fwd, bwd


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
