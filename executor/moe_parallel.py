"""Expert parallelism in the executor: this rank's ep and expert-data-parallel groups, keeping its E/ep experts,
and synchronising the experts' gradients (plain sums over the expert-data-parallel group ÷ dp, or FSDP2 over it).

The rules — which ranks form an ep group, which experts a rank keeps, why an expert's gradient is the
group's sum divided by dp (dp·cp with context parallelism) — are in :mod:`executor.moe`'s docstring; the
MoE layer that routes over these groups is :class:`executor.moe.MoE`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from executor.moe import EpClock, moe_layers
from simulator.memory.moe import EXPERT_TENSOR

@dataclass(frozen=True)
class EpGroups:
    """This rank's ep group (token exchange) and expert-data-parallel group (expert gradients)."""

    ranks: tuple[int, ...]
    index: int
    """This rank's place in ``ranks``: it holds experts [index·E/ep, (index+1)·E/ep)."""
    group: object
    """``torch.distributed.ProcessGroup`` of ``ranks``."""
    expert_dp_ranks: tuple[int, ...]
    expert_dp_group: object


def _distinct(groups) -> list[tuple[int, ...]]:
    """``groups`` without repeats, in order of first appearance (the same on every rank)."""
    return list(dict.fromkeys(groups))


def make_ep_groups(layout, rank: int) -> EpGroups:
    """Create every ep group, then every expert-data-parallel group, of the layout (every rank calls this,
    in the same order) and return this rank's. Both are read from ``ParallelLayout`` at every dp·cp
    coordinate: with context parallelism an ep group is ep replicas at one context rank, an
    expert-data-parallel group the replicas ≡ mod ep at every context rank ((dp/ep)·cp ranks)."""
    mine, edp = None, None
    coords = [(p, t, d) for p in range(layout.pp) for t in range(layout.tp) for d in range(layout.dp_cp)]
    for ranks in _distinct(layout.ep_group(*c) for c in coords):
        group = dist.new_group(list(ranks))
        if rank in ranks:
            mine = (ranks, ranks.index(rank), group)
    for ranks in _distinct(layout.expert_dp_group(*c) for c in coords):
        group = dist.new_group(list(ranks))
        if rank in ranks:
            edp = (ranks, group)
    return EpGroups(ranks=mine[0], index=mine[1], group=mine[2], expert_dp_ranks=edp[0], expert_dp_group=edp[1])


def apply_expert_parallel(model, groups: EpGroups) -> EpClock:
    """Keep this rank's E/ep experts of every MoE layer (renumbered from 0) and route over the ep group;
    returns the clock all layers share. Apply to the seeded full model, before wrapping it."""
    clock, n = EpClock(), len(groups.ranks)
    for moe in moe_layers(model):
        local = moe.experts_total // n
        moe.experts = nn.ModuleList(list(moe.experts)[groups.index * local:(groups.index + 1) * local])
        moe.ep, moe.clock = groups, clock
    return clock


def expert_parameter_names(model) -> list[str]:
    """Names of the routed experts' parameters (``simulator.memory.moe.EXPERT_TENSOR``)."""
    return [name for name, _ in model.named_parameters() if EXPERT_TENSOR in f".{name}"]


@torch.no_grad()
def reduce_expert_gradients(params: list[torch.Tensor], groups: EpGroups, dp: int) -> None:
    """Sum the expert gradients over the expert-data-parallel group and divide by dp (:mod:`executor.moe`'s docstring); a
    tp-sharded expert's (DTensor) by its local shard."""
    from executor.strategies.grad_sync import _local, reduce_flat

    grads = [_local(p.grad) for p in params if p.grad is not None]
    if len(groups.expert_dp_ranks) > 1:
        reduce_flat(grads, groups.expert_dp_group, dp)
        return
    for g in grads:
        g /= dp


def shard_experts(model, groups: EpGroups, dp: int, reshard: bool, device_type: str, mp_policy=None,
                  mesh=None) -> None:
    """FSDP2 ``fully_shard`` on every routed expert over the expert-data-parallel group (ZeRO-2/3
    partition the experts there, as ``simulator.memory.moe`` has it); apply before sharding the blocks,
    which then skip them. The reduce-scatter sums over the group and divides by ``dp`` (the gradient rule of
    :mod:`executor.moe`'s docstring), with plain sums (gloo has no pre-multiplied sum) except on a one-rank group, where
    torch copies grad ÷ factor and would divide by the factor again after a forced sum. ``mp_policy``: the
    blocks' ``MixedPrecisionPolicy`` (None: the default, the parameters' own dtype); ``mesh``: that group's
    DeviceMesh (None: made from the group; tp > 1 needs one cut from the run's mesh, ``StageExperts.fsdp_mesh``)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = DeviceMesh.from_group(groups.expert_dp_group, device_type) if mesh is None else mesh
    for moe in moe_layers(model):
        for expert in moe.experts:
            fully_shard(expert, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp_policy or MixedPrecisionPolicy())
            expert.set_gradient_divide_factor(float(dp))
            expert.set_force_sum_reduction_for_comms(len(groups.expert_dp_ranks) > 1)
