"""Tensor parallelism inside the mixture-of-experts layers (tp > 1, with or without ep), as the simulator models it.

**Placement** (``simulator.strategy.rules``, rule ``ep``; ``simulator.compile.ep_part``): expert tensor
parallelism equals tp (Megatron-Core's ``expert_tensor_parallel_size`` default [src: megatron-core]); each
routed expert and the shared experts are split like a dense MLP, ``up`` by output rows (SwiGLU's gate and up
halves each split, :func:`executor.strategies.tensor.permute_fused_rows`' interleave) and ``down`` by input
columns, as DTensors ``Shard(0)`` / ``Shard(1)`` over the tp mesh whose local shards the experts compute with
(``executor.moe.ExpertMLP``); the router (and Qwen's shared gate) stays replicated, as the memory model has it
(``simulator.memory.moe.moe_mlp_shapes``). The tp ranks of a data-parallel index hold the same E/ep experts,
and each exchanges tokens over the ep group of its own tp coordinate (``ParallelLayout.ep_group(pp, tp, dp)``).

**Collectives per MoE layer and micro-batch**, those the compiled step lists for a MoE block with tp > 1
(``simulator.compile.step._chunk_work``: the block's tp calls from ``comm_part.tp_calls``, then, with ep > 1,
``ep_part.ep_calls``):

- without sequence parallelism, every tp rank holds all T tokens of its replica's micro-batch, routes them (the
  same choice on every tp rank: the same input and router), dispatches its T·k copies by all-to-all over its ep
  group and gets their outputs back (combine), each a partial sum over its shard of the expert width; the layer's
  output is then all-reduced over tp once (the block's MLP all-reduce) and in backward the gradient of its input
  once (the column-parallel region's): Megatron-LM's ``f`` and ``g`` (Shoeybi et al. 2019 §3) around the whole
  layer (:func:`_tp_region`) instead of around each expert;
- with sequence parallelism and ep 1, the same region over the sequence shards: the input all-gathered, the
  output reduce-scattered (the block's MLP all-gather and reduce-scatter; the simulator has no ep calls at ep 1);
- with sequence parallelism and ep > 1, as ``ep_part.dispatch_bytes`` has it after Megatron-Core's alltoall
  dispatcher [src: megatron-core]: each tp rank routes its own T/tp tokens and dispatches their copies over its
  ep group, the tp group all-gathers the copies it received (the tp peers then hold the same rows, each expert
  runs on them with its shard), reduce-scatters their partial outputs, and the combine all-to-all returns them
  (:func:`_gathered_rows`; the sizes differ per rank: the collectives pad to the largest). The shared experts
  see every token: their own tp region over the token shards. The expert counts are exchanged first (an
  all-to-all of E integers, an all-gather of the count matrix over tp), which the simulator does not count.

**Gradients**: the routing probabilities weight partial outputs (or a tp rank's own tokens under sequence
parallelism), so the router's (and shared gate's) gradient on a tp rank is a partial sum too;
:func:`reduce_replicated_grads` sums it over tp after backward, as Megatron-Core sums the tp-replicated router's
gradient (``finalize_model_grads``, parameters marked ``sequence_parallel`` [src: megatron-core]). Without
sequence parallelism the gradient reaching the layer's input through the router is partial as well and joins
the rest in the input all-reduce.

**ZeRO-2/3**: FSDP2 over the experts' tp shards (2-D DTensors), on an expert-data-parallel mesh cut from the
run's mesh (``StageExperts.fsdp_mesh``: FSDP2 requires the dp and tp meshes to share a root).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from executor.moe import ExpertMLP, MoE, moe_layers
from simulator.errors import SpecError


def check_moe_tp(spec, tp: int) -> None:
    """Raise SpecError unless ``tp`` splits the routed experts' and the shared experts' width evenly."""
    moe = spec.moe
    for name, width in (("expert width", moe.expert_ffn), ("shared experts' width", moe.shared_width)):
        if width and width % tp:
            raise SpecError("plan.strategy.tp", f"{tp} does not divide the model's {width} {name}")


@torch.no_grad()
def _shard_mlp(mlp: ExpertMLP, tp_mesh) -> None:
    """``mlp``'s up rows (per SwiGLU half) and down columns split over ``tp_mesh`` (module docstring)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    from executor.strategies.tensor import _blocks

    tp = tp_mesh.size()
    up = mlp.up.weight.detach()
    rows = _blocks(list(up.chunk(2)), tp) if mlp.swiglu else up
    mlp.up.weight = nn.Parameter(distribute_tensor(rows.contiguous(), tp_mesh, [Shard(0)]))
    mlp.down.weight = nn.Parameter(distribute_tensor(mlp.down.weight.detach(), tp_mesh, [Shard(1)]))


def _tp_region(module: nn.Module, tp_mesh, layout) -> None:
    """Megatron-LM's ``f`` and ``g`` around ``module`` over ``tp_mesh``, whose input and output are in ``layout``
    (``Replicate``, or a sequence / token shard under sequence parallelism): the input gathered to ``Replicate``
    (nothing to do when replicated), its gradient, a partial sum, reduced back to ``layout`` in backward (DTensor
    declares it ``Partial``); the output, this rank's partial sum, reduced to ``layout`` (``PrepareModuleOutput``
    from ``Partial``: an all-reduce, or a reduce-scatter), its gradient gathered in backward."""
    from torch.distributed.tensor import DTensor, Partial, Replicate
    from torch.distributed.tensor.parallel import PrepareModuleOutput, parallelize_module

    def gather(_, args):
        x = args[0] if isinstance(args[0], DTensor) else DTensor.from_local(args[0], tp_mesh, [layout], run_check=False)
        return (x.redistribute(tp_mesh, [Replicate()]).to_local(grad_placements=[Partial()]),) + tuple(args[1:])

    module.register_forward_pre_hook(gather)
    parallelize_module(module, tp_mesh, PrepareModuleOutput(output_layouts=Partial(), desired_output_layouts=layout))


def parallelize_moe(moe: MoE, tp_mesh, sequence_parallel: bool = False) -> None:
    """Expert tensor parallelism on ``moe`` over ``tp_mesh`` (a 1-D DeviceMesh), in place (module docstring).
    Apply after :func:`executor.moe_parallel.apply_expert_parallel` (the rank's experts chosen)."""
    from torch.distributed.tensor import Replicate, Shard

    for mlp in [*moe.experts, *([moe.shared] if moe.shared is not None else [])]:
        _shard_mlp(mlp, tp_mesh)
    moe.tp_group = tp_mesh.get_group()
    if not (sequence_parallel and moe.ep is not None):  # the whole layer in one tp region, as a dense MLP
        _tp_region(moe, tp_mesh, Shard(1) if sequence_parallel else Replicate())
        return
    rank, tp = tp_mesh.get_local_rank(), tp_mesh.size()
    moe.register_forward_pre_hook(lambda _, args: (args[0].to_local(),) + tuple(args[1:]))  # this rank's tokens
    moe.token_index = lambda shape, device: _sp_token_index(shape, rank, tp, device)
    moe.tp_rows = lambda received, matrix: _gathered_rows(moe, received, matrix)
    if moe.shared is not None:  # the shared experts see every token: gathered over tp (the flat tokens' dim 0)
        _tp_region(moe.shared, tp_mesh, Shard(0))


def _sp_token_index(shape, rank: int, tp: int, device) -> torch.Tensor:
    """Index in the micro-batch (its b·s tokens, sample-major) of each of this tp rank's b·s/tp tokens."""
    i = torch.arange(shape[0] * shape[1], device=device)
    return (i // shape[1]) * (shape[1] * tp) + rank * shape[1] + i % shape[1]


def _gathered_rows(moe: MoE, received: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """Outputs of the copies this rank received (``MoE.expert_rows``' order) under sequence parallelism: the copy
    counts, then the copies, all-gathered over tp, every local expert run on its rows from every tp peer with this
    rank's shard, the partial outputs reduce-scattered back (module docstring)."""
    group, clock = moe.tp_group, moe.clock
    tp = dist.get_world_size(group)
    matrices = matrix.new_empty((tp * matrix.shape[0], matrix.shape[1]))  # (tp peer, source) × local expert
    clock.timed(dist.all_gather_single, matrices, matrix.contiguous(), group=group)
    sizes = matrices.view(tp, -1).sum(1).tolist()
    if max(sizes) == 0:  # every tp peer received nothing (the same answer on each)
        return moe.expert_rows(received, matrix)
    gathered = _GatherRows.apply(received, sizes, group, clock)
    return _ScatterRows.apply(moe.expert_rows(gathered, matrices), sizes, group, clock)


def _padded(x: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.cat([x, x.new_zeros((rows - len(x),) + tuple(x.shape[1:]))]) if len(x) < rows else x


def _all_gather_rows(x, sizes, group, clock) -> torch.Tensor:
    """Rank p's ``sizes[p]`` rows, from every rank, in rank order (padded to the largest for the collective)."""
    pad = max(sizes)
    buf = x.new_empty((pad * len(sizes),) + tuple(x.shape[1:]))
    clock.timed(dist.all_gather_single, buf, _padded(x.contiguous(), pad), group=group)
    return torch.cat([buf[p * pad:p * pad + n] for p, n in enumerate(sizes)])


def _reduce_scatter_rows(x, sizes, group, clock) -> torch.Tensor:
    """The sum over ranks of this rank's ``sizes[rank]`` rows of ``x`` (every rank's rows in rank order)."""
    pad = max(sizes)
    out = x.new_empty((pad,) + tuple(x.shape[1:]))
    clock.timed(dist.reduce_scatter_tensor, out, torch.cat([_padded(piece, pad) for piece in x.split(sizes)]),
                group=group)
    return out[:sizes[dist.get_rank(group)]]


class _GatherRows(torch.autograd.Function):
    """All-gather of rows over tp (uneven sizes); backward: the reduce-scatter of their gradients."""

    @staticmethod
    def forward(ctx, x, sizes, group, clock):
        ctx.args = sizes, group, clock
        return _all_gather_rows(x, sizes, group, clock)

    @staticmethod
    def backward(ctx, grad):
        return _reduce_scatter_rows(grad, *ctx.args), None, None, None


class _ScatterRows(torch.autograd.Function):
    """Reduce-scatter of rows over tp (uneven sizes); backward: the all-gather of their gradients."""

    @staticmethod
    def forward(ctx, x, sizes, group, clock):
        ctx.args = sizes, group, clock
        return _reduce_scatter_rows(x, sizes, group, clock)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_rows(grad, *ctx.args), None, None, None


def replicated_params(modules) -> list[nn.Parameter]:
    """The tp-replicated parameters of the MoE layers whose gradients are partial sums over tp: routers and
    shared gates (empty unless :func:`parallelize_moe` ran)."""
    return [p for m in modules for moe in moe_layers(m) if getattr(moe, "tp_group", None) is not None
            for sub in (moe.router, moe.shared_gate) if sub is not None for p in sub.parameters()]


def reduce_replicated_grads(params: list[nn.Parameter], tp_group) -> None:
    """Sum the gradients of :func:`replicated_params` over the tp group (one all-reduce of them all)."""
    from executor.strategies.grad_sync import _local, reduce_flat

    reduce_flat([_local(p.grad) for p in params if p.grad is not None], tp_group, 1)
