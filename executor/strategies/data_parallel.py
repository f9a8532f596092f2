"""The data-parallel family (tp = pp = 1): DDP, ZeRO-1, FSDP2 ZeRO-2/3, CPU offload, recompute.

Plan field → torch component:

- ZeRO 0: ``DistributedDataParallel`` with ``bucket_cap_mb`` = the plan's bucket bytes (one bucket
  for all gradients when the plan has none) and ``gradient_as_bucket_view``; gradient accumulation
  over the plan's m micro-batches with ``no_sync()`` on all but the last; DDP overlaps each bucket's
  all-reduce with the rest of backward (Li et al. VLDB 2020).
- ZeRO 1: the same DDP, with ``ZeroRedundancyOptimizer(AdamW)`` (whole-tensor state partitioning).
  The DDP and FSDP2 wrapping and the optimizers: :mod:`executor.strategies.dp_wrap`.
- ``overlap_grad_reduce`` off: backward runs under ``no_sync()`` for every micro-batch, then the
  gradients are all-reduced bucket by bucket after backward (timed: the exposed ``dp`` phase).
- All-reduce algorithm: ``auto`` → ``dist.all_reduce`` (the backend picks: NCCL's tuner, gloo's
  ring); any other → the simulator's schedule for the dp group (``build_schedule``) replayed with
  ``isend``/``irecv`` (:mod:`executor.p2p`) inside a DDP communication hook. On NCCL the algorithm
  also sets ``NCCL_ALGO`` (``executor.run.nccl_environment``).
- ZeRO 2 / 3: FSDP2 ``fully_shard`` on every block and on the root, ``reshard_after_forward`` False /
  True; each micro-batch's backward reduce-scatters its gradients (``set_requires_gradient_sync`` as
  ``simulator.strategy.sync.reduces_every_micro_batch`` says, the rule the simulator charges: FSDP2's default).
- Offload ``optimizer`` / ``params`` (ZeRO 2-3): ``CPUOffloadPolicy`` (torch offloads parameters,
  gradients and optimizer state together, and runs AdamW on the CPU). ZeRO 1 with optimizer offload
  and NVMe offload are refused: torch has no such component.
- Recompute and attention: :mod:`executor.recompute`.
- FP8 (``precision fp8``, GPU only): :mod:`executor.fp8` swaps the blocks' linear layers for torchao
  ``Float8Linear`` before DDP or FSDP2 wraps the model.
- Context parallelism (cp > 1): :mod:`executor.context` splits each sample's sequence over the cp
  ranks of a replica (ring or all-to-all attention core, balanced or contiguous split); the DDP or
  FSDP2 group is the mesh's ``dp`` dimension, dp·cp ranks, so weight gradients are averaged over
  dp·cp as the simulator's layout has it (``ParallelLayout.dp_cp``).
- Expert parallelism (ep > 1): :mod:`executor.moe` keeps this rank's E/ep experts of every
  MoE layer and routes tokens over its ep group by all-to-all; the experts' parameters are left out of
  DDP and their gradients summed over the expert-data-parallel group and divided by dp after backward
  (``reduce_expert_gradients``, timed into ``dp``); under ZeRO-1 the dense parameters' optimizer is
  partitioned over dp and the experts' over the expert-data-parallel group, as the memory model has it.
  Under ZeRO-2/3 each expert is its own FSDP2 module over the expert-data-parallel group (gradient
  divide factor dp, sum reductions), the blocks and root over dp hold the rest; no offload with ep.
  With cp > 1 as well, "dp" here is dp·cp: each context rank exchanges its own tokens over the ep group
  of its context rank, and the expert-data-parallel group spans the context ranks (executor/moe.py).

Phases (wall clock, ``time.perf_counter`` after ``ctx.synchronize()``): ``forward`` (FSDP2: with its
parameter all-gathers), ``backward`` (FSDP2: with its reduce-scatters),
``optimizer`` (ZeRO 1: with the parameter broadcast), ``dp``: under DDP the gradient sync backward
did not hide (with overlap: from the moment DDP hands its last bucket to the comm hook, every
parameter gradient computed, until ``backward()`` returns, which DDP holds until every bucket is reduced;
without overlap: the bucketed all-reduce after backward); FSDP2's is not separated. ``ep``: the time
inside the MoE layers' all-to-alls (:class:`executor.moe.EpClock`, forward and backward, with the count
exchanges), taken out of forward, backward and recompute.
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist

from executor.context import apply_context, make_cp_group, split_description
from executor.data import batch_for, micro_batches, replica_samples
from executor.fp8 import apply_fp8
from executor.memory_measure import storage_bytes
from executor.model import build_gpt
from executor.moe import apply_routing, route_context_tokens
from executor.moe_parallel import (apply_expert_parallel, expert_parameter_names, make_ep_groups,
                                   reduce_expert_gradients)
from executor.recompute import RecomputeClock, apply_attention, apply_recompute
from executor.reference import adam_state
from executor.strategies.base import OPTIMIZER, Family, FamilySpec, ModelStateBytes, Phase, StepRecord, register
from executor.strategies.ddp_sync import ReplayHook, all_reduce_after_backward, backward_with_exposed_sync
from executor.strategies.dp_wrap import dense_params, wrap_ddp, wrap_fsdp
from executor.strategies.run_context import RunContext
from simulator.collectives.base import Op
from simulator.collectives.registry import build_schedule
from simulator.errors import SpecError
from simulator.strategy import Offload, ZeroStage
from simulator.strategy.sync import AllReduceAlgorithm, reduces_every_micro_batch
from simulator.workload import Recompute
from simulator.workload.fp8 import MatmulPrecision

def check(plan, layout) -> None:
    """Refuse, in one line, what torch cannot run in this family."""
    s = plan.strategy
    sync = s.dp_sync
    if s.offload is Offload.NVME:
        raise SpecError("plan.strategy.offload", "nvme: torch has no NVMe offload (ZeRO-Infinity); FSDP2's "
                        "CPUOffloadPolicy offloads to host memory only; use offload params")
    if s.offload is Offload.OPTIMIZER and s.zero is ZeroStage.ZERO1:
        raise SpecError("plan.strategy.offload", "optimizer offload with ZeRO 1: ZeroRedundancyOptimizer cannot "
                        "offload; use zero 2 or 3 (FSDP2 CPUOffloadPolicy)")
    if sync.fusion_cycle_s:
        raise SpecError("plan.strategy.fusion_cycle_s", "is Horovod's fusion timer; torch DDP launches a bucket "
                        "when it is full and has no timer; use 0")
    if s.zero >= ZeroStage.ZERO2 and sync.algorithm is not AllReduceAlgorithm.AUTO:
        raise SpecError("plan.strategy.allreduce_algorithm", f"{sync.algorithm.value}: FSDP2 reduce-scatters "
                        "gradients with the backend's own collective; use auto with zero 2 or 3")
    if layout.ep > 1 and s.offload is not Offload.NONE:
        raise SpecError("plan.strategy.offload", f"{s.offload.value} with ep {layout.ep}: this executor does not "
                        "offload the experts' FSDP2 shards (not implemented); use offload none, or ep 1")
    if sync.algorithm is not AllReduceAlgorithm.AUTO and layout.dp > 1:
        build_schedule(plan.cluster, layout.dp_groups[0], Op.ALL_REDUCE, 4 * layout.dp, sync.algorithm.value)


class DataParallelRunner:
    """One rank of a tp = pp = 1 plan (see the module docstring)."""

    phase_notes = {
        Phase.FORWARD.value: "wall time of the forward calls, summed over micro-batches (FSDP2: with all-gathers)",
        Phase.BACKWARD.value: "wall time of loss.backward() (DDP: with the all-reduce backward did not hide; "
                              "FSDP2: with reduce-scatters)",
        Phase.RECOMPUTE.value: "the checkpointed blocks / attention cores rerun inside backward "
                               "(executor/recompute.py); backward excludes it",
        Phase.OPTIMIZER.value: "optimizer.step() (ZeRO-1: with the parameter broadcast)",
        Phase.EP.value: "ep > 1: time inside the MoE layers' all-to-alls (expert counts, dispatch, combine; forward, "
                        "backward and recomputed), including the wait for the ep group's slowest rank "
                        "(executor/moe.py); taken out of forward, backward and recompute",
        Phase.DP.value: "DDP with overlap: from the last bucket handed to the comm hook (every parameter "
                        "gradient computed) to backward()'s return, DDP waiting for its buckets; without overlap: the bucketed "
                        "all-reduce after backward; FSDP2: not separated (inside backward)",
    }

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        layout, s = ctx.layout, ctx.plan.strategy
        self.dp_rank = layout.coords(ctx.rank).dp // layout.cp
        self.dp_ranks = next(g for g in layout.dp_groups if ctx.rank in g)
        self.group = ctx.mesh["dp"].get_group()
        self.buckets: dict[int, int] = {}
        self.hook = ReplayHook(ctx, self.group, self.dp_ranks, self.buckets)
        self.overlap = s.dp_sync.overlap_grad_reduce
        model = build_gpt(ctx.spec, seed=ctx.seed).to(ctx.device)
        fp8 = apply_fp8(model, s, ctx.spec) if s.precision is MatmulPrecision.FP8 else None  # before any wrapper
        apply_attention(model, s.attention)
        routing = apply_routing(model, s.moe_routing, s.micro_batch * ctx.spec.seq_len)
        self.tokens = None
        """Sequence positions this rank holds under context parallelism (None: all)."""
        if layout.cp > 1:
            self.tokens = apply_context(model, make_cp_group(layout, ctx.rank), s.context, ctx.spec.seq_len)
            route_context_tokens(model, self.tokens, ctx.spec.seq_len)  # round-robin: tokens' micro-batch index
        self.ep = self.ep_clock = None
        expert_names: set[str] = set()
        if layout.ep > 1:
            self.ep = make_ep_groups(layout, ctx.rank)
            self.ep_clock = apply_expert_parallel(model, self.ep)
            expert_names = set(expert_parameter_names(model))
        self.expert_params = [p for n, p in model.named_parameters() if n in expert_names]
        self.recompute = RecomputeClock(exclude=self.ep_clock)
        apply_recompute(model, s.recompute, self.recompute)
        self.model = model
        self.fsdp = s.zero >= ZeroStage.ZERO2
        self._components = {"model": f"executor.model.GPT ({ctx.spec.name}), recompute {s.recompute.value} "
                            f"(torch.utils.checkpoint), attention {s.attention.value}",
                            "optimizer": f"torch.optim.AdamW lr={OPTIMIZER.lr}, implementation "
                            f"{s.optimizer_impl.value if s.optimizer_impl else 'torch default'}"}
        if fp8 is not None:
            self._components["fp8"] = fp8
        if routing is not None:
            self._components["moe routing"] = routing
        if self.tokens is not None:
            self._components["context parallel"] = split_description(ctx.spec.seq_len, s.context)
        if self.ep is not None:
            self._components["expert parallel"] = (
                f"ep={layout.ep}: {ctx.spec.moe.experts // layout.ep} of {ctx.spec.moe.experts} experts per rank, "
                "dispatch and combine by dist.all_to_all_single over the ep group (executor/moe.py); expert "
                f"gradients summed over the expert-data-parallel group of {len(self.ep.expert_dp_ranks)} "
                "rank(s) and divided by dp, " + ("in FSDP2's reduce-scatter there" if s.zero >= ZeroStage.ZERO2
                                                 else "not all-reduced by DDP"))
        if ctx.spec.dropout:
            self._components["dropout"] = f"p={ctx.spec.dropout:g} not run (executor.model has no dropout layers)"
        wrapped = (wrap_fsdp(ctx, model, self.expert_params, self.ep) if self.fsdp else
                   wrap_ddp(ctx, model, self.group, self.hook, self.expert_params, self.ep, self.overlap))
        self.module, self.opt, self.expert_params = wrapped.module, wrapped.opt, wrapped.expert_params
        self._components["gradient sync"] = wrapped.sync
        self._components["optimizer"] += wrapped.optimizer_note
        self._adam_state = lambda: adam_state(self.opt)

    def _accumulating(self, last: bool):
        if self.fsdp:  # ZeRO-2/3: the reduce-scatter in every micro-batch's backward that the simulator charges
            self.model.set_requires_gradient_sync(last or reduces_every_micro_batch(self.ctx.layout.strategy))
            return contextlib.nullcontext()
        return contextlib.nullcontext() if last and self.overlap else self.module.no_sync()

    def _timed(self, phases: dict[Phase, float], phase: Phase, fn):
        self.ctx.synchronize()
        t0 = time.perf_counter()
        out = fn()
        self.ctx.synchronize()
        phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - t0
        return out

    def train_step(self, step: int) -> StepRecord:
        layout, phases = self.ctx.layout, {}
        self.buckets.clear()  # this step's buckets: DDP rebuilds them after the first step and frees the old ones
        inputs, targets = (replica_samples(t, self.dp_rank, layout.dp) for t in batch_for(self.ctx, step))
        if self.tokens is not None:
            inputs, targets = inputs[:, self.tokens], targets[:, self.tokens]
        inputs, targets = inputs.to(self.ctx.device), targets.to(self.ctx.device)
        m = layout.micro_batches
        local, recompute0 = torch.zeros((), device=self.ctx.device), self.recompute.seconds
        ep0, ep_fwd = self._ep_seconds(), 0.0
        for i, (x, y) in enumerate(zip(micro_batches(inputs, m), micro_batches(targets, m))):
            with self._accumulating(last=i == m - 1):
                def forward():
                    with self.ctx.autocast():
                        return self.module(x, y) / m
                f0 = self._ep_seconds()
                loss = self._timed(phases, Phase.FORWARD, forward)
                ep_fwd += self._ep_seconds() - f0
                if i == m - 1 and self.overlap and not self.fsdp:
                    backward_with_exposed_sync(self.ctx, self.hook, loss, phases)
                else:
                    self._timed(phases, Phase.BACKWARD, loss.backward)
            local += loss.detach().float()
        if layout.strategy.recompute is not Recompute.NONE:
            phases[Phase.RECOMPUTE] = self.recompute.seconds - recompute0
            phases[Phase.BACKWARD] -= phases[Phase.RECOMPUTE]
        if self.ep is not None:  # the all-to-alls (recompute's excluded already by its clock)
            phases[Phase.EP] = self._ep_seconds() - ep0
            phases[Phase.FORWARD] -= ep_fwd
            phases[Phase.BACKWARD] -= phases[Phase.EP] - ep_fwd
        if not self.fsdp and not self.overlap:
            self._timed(phases, Phase.DP, lambda: all_reduce_after_backward(
                self._dense_params(), self.hook, self.ctx.layout.bucket_bytes, len(self.dp_ranks)))
        if self.ep is not None and not self.fsdp:  # FSDP2 reduce-scatters them over their group in backward
            self._timed(phases, Phase.DP, lambda: reduce_expert_gradients(self.expert_params, self.ep, layout.dp_cp))
        norm0 = time.perf_counter()
        norm = self._grad_norm()  # for the equivalence checks (StepRecord.grad_norm), not training: untimed
        norm_s = time.perf_counter() - norm0
        self._timed(phases, Phase.OPTIMIZER, self.opt.step)
        self.opt.zero_grad(set_to_none=False)
        check0 = time.perf_counter()
        dist.all_reduce(local, group=self.group)
        # each of the dp·cp ranks holds the mean loss over an equal share of the global batch's tokens
        loss = float(local) / layout.dp_cp
        return StepRecord(loss=loss, phases_s=phases, grad_norm=norm, check_s=norm_s + time.perf_counter() - check0)

    def _dense_params(self) -> list:
        """The parameters other than the routed experts (all of them without ep), as the model holds them now
        (FSDP2's ``fully_shard`` replaces the module's parameters by DTensors)."""
        return dense_params(self.model, self.expert_params)

    def _ep_seconds(self) -> float:
        return 0.0 if self.ep_clock is None else self.ep_clock.seconds

    def _grad_norm(self) -> float:
        """L2 norm of the synchronised gradient (FSDP2: of the shards, summed over the dp group; ep: the
        experts' squares summed over the ep group, whose ranks hold every expert once)."""
        def squares(params):
            grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in params if p.grad is not None]
            return torch.stack([g.float().pow(2).sum() for g in grads]).sum() if grads else torch.zeros(())
        if self.fsdp:  # the dp ranks' shards (the experts': over ep × expert-dp, the dp ranks) hold each element once
            total = squares(list(self.model.parameters())).to(self.ctx.device)
            dist.all_reduce(total, group=self.group)
            return float(total.sqrt())
        total = squares(self._dense_params())
        if self.expert_params:
            experts = squares(self.expert_params).to(self.ctx.device)
            dist.all_reduce(experts, group=self.ep.group)
            total = total.to(self.ctx.device) + experts
        return float(total.sqrt())

    def model_state_bytes(self) -> ModelStateBytes:
        params = list(self.model.parameters())
        grad_seen: dict[int, int] = {}
        grads = storage_bytes((p.grad for p in params), grad_seen)
        state = self._adam_state()
        moments = [v for s in state.values() for v in s.values() if torch.is_tensor(v)]
        host = 0
        if self.ctx.device.type != "cpu":
            host = storage_bytes(t for t in params + [p.grad for p in params] + moments
                                 if t is not None and (t.to_local() if hasattr(t, "to_local") else t).is_cpu)
        return ModelStateBytes(params_bytes=storage_bytes(params), grads_bytes=grads,
                               optimizer_bytes=storage_bytes(moments),
                               buffers_bytes=sum(n for ptr, n in self.buckets.items() if ptr not in grad_seen),
                               host_bytes=host)

    def components(self) -> dict[str, str]:
        return dict(self._components)


register(FamilySpec(family=Family.DATA_PARALLEL, check=check, build=DataParallelRunner))
