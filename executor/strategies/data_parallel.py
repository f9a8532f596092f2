"""The data-parallel family (tp = pp = 1): DDP, ZeRO-1, FSDP2 ZeRO-2/3, CPU offload, recompute.

Plan field → torch component:

- ZeRO 0: ``DistributedDataParallel`` with ``bucket_cap_mb`` = the plan's bucket bytes (one bucket
  for all gradients when the plan has none) and ``gradient_as_bucket_view``; gradient accumulation
  over the plan's m micro-batches with ``no_sync()`` on all but the last; DDP overlaps each bucket's
  all-reduce with the rest of backward (Li et al. VLDB 2020).
- ZeRO 1: the same DDP, with ``ZeroRedundancyOptimizer(AdamW)`` (whole-tensor state partitioning).
- ``overlap_grad_reduce`` off: backward runs under ``no_sync()`` for every micro-batch, then the
  gradients are all-reduced bucket by bucket after backward (timed: the exposed ``dp`` phase).
- All-reduce algorithm: ``auto`` → ``dist.all_reduce`` (the backend picks: NCCL's tuner, gloo's
  ring); any other → the simulator's schedule for the dp group (``build_schedule``) replayed with
  ``isend``/``irecv`` (:mod:`executor.p2p`) inside a DDP communication hook. On NCCL the algorithm
  also sets ``NCCL_ALGO`` (``executor.run.nccl_environment``).
- ZeRO 2 / 3: FSDP2 ``fully_shard`` on every block and on the root, ``reshard_after_forward`` False /
  True, accumulation with ``set_requires_gradient_sync(False)`` until the last micro-batch.
- Offload ``optimizer`` / ``params`` (ZeRO 2-3): ``CPUOffloadPolicy`` (torch offloads parameters,
  gradients and optimizer state together, and runs AdamW on the CPU). ZeRO 1 with optimizer offload
  and NVMe offload are refused: torch has no such component.
- Recompute and attention: :mod:`executor.recompute`.
- Context parallelism (cp > 1): :mod:`executor.context` splits each sample's sequence over the cp
  ranks of a replica (ring or all-to-all attention core, balanced or contiguous split); the DDP or
  FSDP2 group is the mesh's ``dp`` dimension, dp·cp ranks, so weight gradients are averaged over
  dp·cp as the simulator's layout has it (``ParallelLayout.dp_cp``).

Phases (wall clock, ``time.perf_counter`` after ``ctx.synchronize()``): ``forward`` (FSDP2: with its
parameter all-gathers), ``backward`` (FSDP2: with its reduce-scatters),
``optimizer`` (ZeRO 1: with the parameter broadcast), ``dp``: under DDP the gradient sync backward
did not hide (with overlap: from the moment the last parameter gradient is computed, seen by a
multi-grad hook, until ``backward()`` returns, which DDP holds until every bucket is reduced;
without overlap: the bucketed all-reduce after backward); FSDP2's is not separated.
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist

from executor.context import apply_context, make_cp_group, split_description
from executor.data import batch_for, micro_batches, replica_samples
from executor.memory_measure import storage_bytes
from executor.model import build_gpt
from executor.recompute import RecomputeClock, apply_attention, apply_recompute
from executor.reference import make_optimizer
from executor.strategies.base import (OPTIMIZER, Family, FamilySpec, ModelStateBytes, Phase, RunContext, StepRecord,
                                      register)
from executor.strategies.ddp_sync import ReplayHook, all_reduce_after_backward, backward_with_exposed_sync, comm_hook
from simulator.collectives.base import Op
from simulator.collectives.registry import build_schedule
from simulator.errors import SpecError
from simulator.strategy import Offload, ZeroStage
from simulator.strategy.sync import AllReduceAlgorithm
from simulator.workload import Recompute

_ONE_BUCKET_MB = 1 << 20
"""bucket_cap_mb when the plan has one bucket for all gradients (larger than any model here)."""


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
        Phase.DP.value: "DDP with overlap: from the last parameter gradient computed (a multi-grad hook) to "
                        "backward()'s return, DDP waiting for its buckets; without overlap: the bucketed "
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
        apply_attention(model, s.attention)
        self.tokens = None
        """Sequence positions this rank holds under context parallelism (None: all)."""
        if layout.cp > 1:
            self.tokens = apply_context(model, make_cp_group(layout, ctx.rank), s.context, ctx.spec.seq_len)
        self.recompute = RecomputeClock()
        apply_recompute(model, s.recompute, self.recompute)
        self.model = model
        self.fsdp = s.zero >= ZeroStage.ZERO2
        self._components = {"model": f"executor.model.GPT ({ctx.spec.name}), recompute {s.recompute.value} "
                            f"(torch.utils.checkpoint), attention {s.attention.value}",
                            "optimizer": f"torch.optim.AdamW lr={OPTIMIZER.lr}"}
        if self.tokens is not None:
            self._components["context parallel"] = split_description(ctx.spec.seq_len, s.context)
        if ctx.spec.dropout:
            self._components["dropout"] = f"p={ctx.spec.dropout:g} not run (executor.model has no dropout layers)"
        if self.fsdp:
            self._shard(s)
        else:
            self._ddp(s)

    def _ddp(self, s) -> None:
        from torch.nn.parallel import DistributedDataParallel as DDP

        bucket = self.ctx.layout.bucket_bytes
        cap_mb = _ONE_BUCKET_MB if bucket is None else bucket / 2 ** 20
        self.module = DDP(self.model, process_group=self.group, bucket_cap_mb=cap_mb,
                          gradient_as_bucket_view=s.gradient_as_bucket_view,
                          device_ids=None if self.ctx.device.type == "cpu" else [self.ctx.device])
        self.module.register_comm_hook(self.hook, comm_hook)
        algo = s.dp_sync.algorithm
        how = ("dist.all_reduce" if algo is AllReduceAlgorithm.AUTO else
               f"{algo.value} schedule of the simulator replayed with isend/irecv (executor/p2p.py)")
        self._components["gradient sync"] = (f"DDP bucket_cap_mb={cap_mb:g}, gradient_as_bucket_view="
                                             f"{s.gradient_as_bucket_view}, comm hook: {how}, "
                                             + ("overlapped with backward" if self.overlap else
                                                "after backward (no_sync on every micro-batch)"))
        if s.zero is ZeroStage.ZERO1:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            self.opt = ZeroRedundancyOptimizer(self.model.parameters(), optimizer_class=torch.optim.AdamW,
                                               process_group=self.group, lr=OPTIMIZER.lr, betas=OPTIMIZER.betas,
                                               weight_decay=OPTIMIZER.weight_decay)
            self._adam_state = lambda: self.opt.optim.state
            self._components["optimizer"] += " in ZeroRedundancyOptimizer (ZeRO-1)"
        else:
            self.opt = make_optimizer(self.model.parameters())
            self._adam_state = lambda: self.opt.state

    def _shard(self, s) -> None:
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

        reshard = s.zero is ZeroStage.ZERO3
        offload = CPUOffloadPolicy(pin_memory=self.ctx.device.type == "cuda") \
            if s.offload in (Offload.OPTIMIZER, Offload.PARAMS) else OffloadPolicy()
        mesh = self.ctx.mesh["dp"]
        for block in self.model.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard, offload_policy=offload)
        fully_shard(self.model, mesh=mesh, reshard_after_forward=reshard, offload_policy=offload)
        self.module = self.model
        self.opt = make_optimizer(self.model.parameters())
        self._adam_state = lambda: self.opt.state
        self._components["gradient sync"] = (f"FSDP2 fully_shard per block and root, reshard_after_forward="
                                             f"{reshard} (ZeRO-{int(s.zero)}), offload: "
                                             f"{type(offload).__name__}")

    def _accumulating(self, last: bool):
        if self.fsdp:
            self.model.set_requires_gradient_sync(last)
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
        inputs, targets = (replica_samples(t, self.dp_rank, layout.dp) for t in batch_for(self.ctx, step))
        if self.tokens is not None:
            inputs, targets = inputs[:, self.tokens], targets[:, self.tokens]
        inputs, targets = inputs.to(self.ctx.device), targets.to(self.ctx.device)
        m = layout.micro_batches
        local, recompute0 = torch.zeros((), device=self.ctx.device), self.recompute.seconds
        for i, (x, y) in enumerate(zip(micro_batches(inputs, m), micro_batches(targets, m))):
            with self._accumulating(last=i == m - 1):
                def forward():
                    with self.ctx.autocast():
                        return self.module(x, y) / m
                loss = self._timed(phases, Phase.FORWARD, forward)
                if i == m - 1 and self.overlap and not self.fsdp:
                    backward_with_exposed_sync(self.ctx, self.model.parameters(), loss, phases)
                else:
                    self._timed(phases, Phase.BACKWARD, loss.backward)
            local += loss.detach().float()
        if layout.strategy.recompute is not Recompute.NONE:
            phases[Phase.RECOMPUTE] = self.recompute.seconds - recompute0
            phases[Phase.BACKWARD] -= phases[Phase.RECOMPUTE]
        if not self.fsdp and not self.overlap:
            self._timed(phases, Phase.DP, lambda: all_reduce_after_backward(
                self.model.parameters(), self.hook, self.ctx.layout.bucket_bytes, len(self.dp_ranks)))
        norm = self._grad_norm()
        self._timed(phases, Phase.OPTIMIZER, self.opt.step)
        self.opt.zero_grad(set_to_none=False)
        dist.all_reduce(local, group=self.group)
        # each of the dp·cp ranks holds the mean loss over an equal share of the global batch's tokens
        return StepRecord(loss=float(local) / layout.dp_cp, phases_s=phases, grad_norm=norm)

    def _grad_norm(self) -> float:
        """L2 norm of the synchronised gradient (FSDP2: of the shards, summed over the dp group)."""
        grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                 for p in self.model.parameters() if p.grad is not None]
        squares = torch.stack([g.float().pow(2).sum() for g in grads]).sum()
        if self.fsdp:
            squares = squares.to(self.ctx.device)
            dist.all_reduce(squares, group=self.group)
        return float(squares.sqrt())

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
