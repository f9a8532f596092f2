"""How the data-parallel family wraps its model for gradient sync and builds its optimizer.

- ZeRO 0-1 (:func:`wrap_ddp`): ``DistributedDataParallel`` over the dp group with ``bucket_cap_mb`` = the
  plan's bucket bytes (one bucket for all gradients when the plan has none), ``gradient_as_bucket_view``
  and the rank's :class:`~executor.strategies.ddp_sync.ReplayHook` as comm hook; the routed experts are
  left out of DDP. ZeRO 1: ``ZeroRedundancyOptimizer(AdamW)`` over the dense parameters, and over the
  experts' on their expert-data-parallel group (a plain optimizer when that group is one rank).
- ZeRO 2-3 (:func:`wrap_fsdp`): FSDP2 ``fully_shard`` on every block and on the root,
  ``reshard_after_forward`` False / True, ``CPUOffloadPolicy`` for optimizer or parameter offload,
  the run's ``MixedPrecisionPolicy``; each routed expert first over its expert-data-parallel group.

The runner that uses them, and the plan fields behind each choice: :mod:`executor.strategies.data_parallel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from executor.moe_parallel import expert_parameter_names, shard_experts
from executor.reference import OptimizerGroup, make_optimizer, optimizer_kwargs
from executor.strategies.base import OPTIMIZER
from executor.strategies.ddp_sync import ReplayHook, comm_hook
from executor.strategies.run_context import RunContext
from simulator.strategy import Offload, ZeroStage
from simulator.strategy.sync import AllReduceAlgorithm

ONE_BUCKET_MB = 1 << 20
"""bucket_cap_mb when the plan has one bucket for all gradients (larger than any model here)."""


@dataclass(frozen=True)
class Wrapped:
    """The model as the steps call it, its optimizer, and what the results file says about them."""

    module: torch.nn.Module
    """DDP around the model, or the model itself after ``fully_shard``."""
    opt: object
    """A torch optimizer or an :class:`~executor.reference.OptimizerGroup`."""
    expert_params: list
    """The routed experts' parameters as the model holds them now (FSDP2: DTensors)."""
    sync: str
    """The ``gradient sync`` component line."""
    optimizer_note: str = ""
    """Appended to the ``optimizer`` component line."""


def dense_params(model, expert_params) -> list:
    """The parameters of ``model`` other than ``expert_params`` (all of them without ep)."""
    experts = {id(p) for p in expert_params}
    return [p for p in model.parameters() if id(p) not in experts]


def wrap_ddp(ctx: RunContext, model, group, hook: ReplayHook, expert_params: list, ep, overlap: bool) -> Wrapped:
    """ZeRO 0-1 (module docstring); ``ep`` the rank's expert-parallel groups (None without ep)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    s = ctx.plan.strategy
    bucket, impl = ctx.layout.bucket_bytes, s.optimizer_impl
    cap_mb = ONE_BUCKET_MB if bucket is None else bucket / 2 ** 20
    if expert_params:  # each rank's own experts: neither broadcast from rank 0 nor averaged over dp
        DDP._set_params_and_buffers_to_ignore_for_model(model, expert_parameter_names(model))
    module = DDP(model, process_group=group, bucket_cap_mb=cap_mb, gradient_as_bucket_view=s.gradient_as_bucket_view,
                 device_ids=None if ctx.device.type == "cpu" else [ctx.device])
    module.register_comm_hook(hook, comm_hook)
    algo = s.dp_sync.algorithm
    how = ("dist.all_reduce" if algo is AllReduceAlgorithm.AUTO else
           f"{algo.value} schedule of the simulator replayed with isend/irecv (executor/p2p.py)")
    sync = (f"DDP bucket_cap_mb={cap_mb:g}, gradient_as_bucket_view={s.gradient_as_bucket_view}, comm hook: {how}, "
            + ("overlapped with backward" if overlap else "after backward (no_sync on every micro-batch)"))
    if s.zero is not ZeroStage.ZERO1:
        return Wrapped(module, make_optimizer(model.parameters(), impl=impl), expert_params, sync)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def zero1(params, on_group):
        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, process_group=on_group,
                                       lr=OPTIMIZER.lr, betas=OPTIMIZER.betas,
                                       weight_decay=OPTIMIZER.weight_decay, **optimizer_kwargs(impl))
    opts = [zero1(dense_params(model, expert_params), group)]
    if expert_params:
        opts.append(zero1(expert_params, ep.expert_dp_group) if len(ep.expert_dp_ranks) > 1
                    else make_optimizer(expert_params, impl=impl))
    note = " in ZeroRedundancyOptimizer (ZeRO-1)" + (
        "; the experts' over their expert-data-parallel group" if expert_params else "")
    return Wrapped(module, OptimizerGroup(opts), expert_params, sync, note)


def wrap_fsdp(ctx: RunContext, model, expert_params: list, ep) -> Wrapped:
    """ZeRO 2-3 (module docstring); ``ep`` the rank's expert-parallel groups (None without ep)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    s = ctx.plan.strategy
    reshard, impl, mp = s.zero is ZeroStage.ZERO3, s.optimizer_impl, ctx.mp_policy()
    offload = CPUOffloadPolicy(pin_memory=ctx.device.type == "cuda") \
        if s.offload in (Offload.OPTIMIZER, Offload.PARAMS) else OffloadPolicy()
    mesh = ctx.mesh["dp"]
    if expert_params:  # each expert over its expert-data-parallel group first: the blocks skip them
        shard_experts(model, ep, ctx.layout.dp_cp, reshard, ctx.device.type, mp)
    for block in model.layers:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard, offload_policy=offload, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard, offload_policy=offload, mp_policy=mp)
    if expert_params:  # the sharded parameters: DTensors on two meshes, one optimizer each
        names = set(expert_parameter_names(model))
        expert_params = [p for n, p in model.named_parameters() if n in names]
        opt = OptimizerGroup([make_optimizer(dense_params(model, expert_params), impl=impl),
                              make_optimizer(expert_params, impl=impl)])
    else:
        opt = make_optimizer(model.parameters(), impl=impl)
    sync = (f"FSDP2 fully_shard per block and root, reshard_after_forward={reshard} (ZeRO-{int(s.zero)}), "
            + (f"MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype={str(mp.reduce_dtype).removeprefix('torch.')}), "
               if ctx.bf16_params else "") + f"offload: {type(offload).__name__}"
            + ("; each routed expert fully_shard over its expert-data-parallel group, gradients summed there and "
               "divided by dp" if expert_params else ""))
    return Wrapped(model, opt, expert_params, sync)
