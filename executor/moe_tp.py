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
(``simulator.compile.step._chunk_work``: the block's tp calls from ``comm_part.tp_calls``, then
``ep_part.ep_calls``), without sequence parallelism: every tp rank holds all T tokens of its replica's
micro-batch, routes them (the same choice on every tp rank: the same input and router), dispatches its T·k
copies by all-to-all over its ep group and gets their outputs back (combine), each a partial sum over its
shard of the expert width; the layer's output is then all-reduced over tp once (the block's MLP all-reduce,
``PrepareModuleOutput`` from ``Partial`` to ``Replicate``), and in backward the gradient of its input is
all-reduced over tp once (the column-parallel region's all-reduce, :func:`_copy_to_tp`: the identity forward,
whose gradient DTensor treats as ``Partial``). Megatron-LM's ``f`` and ``g`` (Shoeybi et al. 2019 §3) around
the whole layer instead of around each expert.

**Gradients**: the routing probabilities weight partial outputs, so the router's (and shared gate's)
gradient on a tp rank is a partial sum too; :func:`reduce_replicated_grads` sums it over tp after backward,
as Megatron-Core sums the tp-replicated router's gradient (``finalize_model_grads``, parameters marked
``sequence_parallel`` [src: megatron-core]). The gradient reaching the layer's input through the router is
partial as well and joins the rest in the input all-reduce.

Not run (refused in ``executor.strategies.parallel.check``): sequence parallelism with MoE layers, where the
simulator (and Megatron-Core, which refuses MoE with tp but without it in training) gathers the dispatched
copies over tp and reduce-scatters their outputs; FSDP2 (ZeRO-2/3) over the experts.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from executor.moe import ExpertMLP, MoE, moe_layers
from simulator.errors import SpecError


def check_moe_plan(spec, layout) -> None:
    """Refuse, in one line, a MoE model with tp > 1 under sequence parallelism or ZeRO-2/3 (module docstring;
    torch-free checks before launch)."""
    from simulator.strategy.kinds import ZeroStage

    zero = layout.strategy.zero
    if getattr(spec, "moe", None) is None or layout.tp == 1 or not (layout.sequence_parallel or zero >= ZeroStage.ZERO2):
        return
    field, got = ("sequence_parallel", "true") if layout.sequence_parallel else ("zero", f"{zero.value}")
    raise SpecError(f"plan.strategy.{field}", f"{got} with tp={layout.tp} and {spec.name}'s mixture-of-experts layers "
                    "is not run here (executor/moe_tp.py); simulate the plan, or execute it with sequence_parallel "
                    "false and zero 0")


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


def _copy_to_tp(tp_mesh):
    """Forward pre-hook: the input as is; its gradient all-reduced over tp in backward (DTensor: ``Replicate``
    forward, the incoming gradient declared ``Partial``)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    def hook(module, args):
        x = DTensor.from_local(args[0], tp_mesh, [Replicate()], run_check=False)
        return (x.to_local(grad_placements=[Partial()]),) + tuple(args[1:])
    return hook


def parallelize_moe(moe: MoE, tp_mesh) -> None:
    """Expert tensor parallelism on ``moe`` over ``tp_mesh`` (a 1-D DeviceMesh), in place (module docstring).
    Apply after :func:`executor.moe.apply_expert_parallel` (the rank's experts chosen)."""
    from torch.distributed.tensor import Partial, Replicate
    from torch.distributed.tensor.parallel import PrepareModuleOutput, parallelize_module

    for mlp in [*moe.experts, *([moe.shared] if moe.shared is not None else [])]:
        _shard_mlp(mlp, tp_mesh)
    moe.register_forward_pre_hook(_copy_to_tp(tp_mesh))
    parallelize_module(moe, tp_mesh, PrepareModuleOutput(output_layouts=Partial(), desired_output_layouts=Replicate()))
    moe.tp_group = tp_mesh.get_group()


def replicated_params(modules) -> list[nn.Parameter]:
    """The tp-replicated parameters of the MoE layers whose gradients are partial sums over tp: routers and
    shared gates (empty unless :func:`parallelize_moe` ran)."""
    return [p for m in modules for moe in moe_layers(m) if getattr(moe, "tp_group", None) is not None
            for sub in (moe.router, moe.shared_gate) if sub is not None for p in sub.parameters()]


@torch.no_grad()
def reduce_replicated_grads(params: list[nn.Parameter], tp_group) -> None:
    """Sum the gradients of :func:`replicated_params` over the tp group (one all-reduce of them all)."""
    grads = [p.grad._local_tensor if hasattr(p.grad, "_local_tensor") else p.grad for p in params
             if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=tp_group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
