"""The tensor, pipeline and pipeline-tensor families: one training step of tp, pp and dp combined.

- tp > 1: the blocks are tensor-parallel (:mod:`executor.strategies.tensor`), with sequence
  parallelism when the layout says so;
- pp > 1: each rank builds its stages and runs the simulator's schedule
  (:mod:`executor.strategies.pipeline`);
- dp > 1: replica d trains on its share of the global batch (``executor.data.replica_samples``)
  and the replicas average their gradients after backward, in the plan's buckets
  (:func:`executor.strategies.grad_sync.average_gradients`);
- mixture-of-experts layers: in each stage, with ep > 1 over the ep group of the stage's dp ranks (and tp
  coordinate), expert gradients over its expert-data-parallel group (:mod:`executor.strategies.stage_experts`),
  each expert split over tp (:mod:`executor.moe_tp`).

Every rank builds the same seeded model first (``build_gpt(spec, seed)``), so the run starts from
the reference's weights. The step's loss is the global batch's mean loss on every rank: the last
stage's mean over its micro-batches, broadcast along the pipeline, averaged over the replicas.
Without pp, the layout's micro-batches are accumulated (each micro-batch's loss scaled by 1/m).

What these families refuse (one line each, in :func:`check`), rather than run something else:
ZeRO-1 with tp or pp, offload, and a named all-reduce algorithm (the gradient average is ``dist.all_reduce``: NCCL's or gloo's own choice).
"""

from __future__ import annotations

from functools import partial

import time

import torch
import torch.distributed as dist
from torch import nn

from executor.data import batch_for, micro_batches, replica_samples
from executor.memory_measure import _storage_bytes
from executor.model import build_gpt
from executor.moe_parallel import shard_experts
from executor.moe_tp import check_moe_tp
from executor.phase_clock import ClockSum, PipelineClock, TpClock
from executor.recompute import RecomputeClock, apply_attention, apply_recompute
from executor.reference import OptimizerGroup, adam_state, make_optimizer
from executor.strategies.base import Family, FamilySpec, ModelStateBytes, Phase, StepRecord, register
from executor.strategies.run_context import RunContext
from executor.strategies.grad_sync import average_gradients
from executor.strategies.pipeline import (Stage, embedding_groups, load_schedule, rank_stages, stage_layers,
                                          sync_tied)
from executor.strategies.stage_experts import StageExperts
from executor.strategies.tensor import (check_tp, parallelize_blocks, parallelize_gpt, permute_fused_rows,
                                        shard_vocab, sp_gather_output)
from simulator.errors import SpecError
from simulator.strategy import ParallelLayout
from simulator.strategy.kinds import Offload, ZeroStage
from simulator.strategy.sync import AllReduceAlgorithm
from simulator.workload import Recompute


def check(plan, layout: ParallelLayout) -> None:
    """Refuse, in one line, what these families cannot run as the plan says (torch-free)."""
    s = layout.strategy
    if s.zero is ZeroStage.ZERO1 and layout.dp > 1:  # over one dp rank ZeRO-1 shards nothing: the plain optimizer
        raise SpecError("plan.strategy.zero", f"ZeRO 1 with tp={layout.tp} pp={layout.pp} is not run: "
                        "ZeroRedundancyOptimizer is not combined with DTensor parameters or pipeline stages here "
                        "(FSDP2 runs zero 2 and 3); use zero 0, 2 or 3")
    if s.offload is not Offload.NONE:
        raise SpecError("plan.strategy.offload", f"offload with tp={layout.tp} pp={layout.pp} is not run here; "
                        "use offload none")
    if getattr(s.dp_sync, "algorithm", AllReduceAlgorithm.AUTO) is not AllReduceAlgorithm.AUTO and layout.dp > 1:
        raise SpecError("plan.strategy.allreduce_algorithm", "the tensor/pipeline families average dp gradients "
                        "with dist.all_reduce (the library's own algorithm); use auto")
    spec = plan.model
    for name, count in (("attention heads", spec.heads), ("key/value heads", spec.n_kv_heads),
                        ("MLP width", spec.ffn_size)):
        if count % layout.tp:
            raise SpecError("plan.strategy.tp", f"{layout.tp} does not divide the model's {count} {name}")
    if getattr(spec, "moe", None) is not None:
        check_moe_tp(spec, layout.tp)


class ParallelRunner:
    """This rank's trainer for a (dp, pp, tp) layout with tp > 1 or pp > 1 (a :class:`StepRunner`)."""

    phase_notes = {
        Phase.FORWARD.value: "wall time of the forward calls (pp > 1: each stage's forward_one_chunk and the loss), "
                             "summed over micro-batches, less the tp time inside (FSDP2: with its all-gathers)",
        Phase.BACKWARD.value: "wall time of loss.backward() (pp > 1: backward_one_chunk), less the tp time inside "
                              "(FSDP2 at pp 1: with its reduce-scatters; recompute: with the recomputed forward)",
        Phase.RECOMPUTE.value: "the checkpointed blocks / attention cores rerun inside backward, less the tp "
                               "time inside (executor/recompute.py); backward excludes it",
        Phase.TP.value: "time inside DTensor's functional collectives and their waits (executor/phase_clock.py): "
                        "exposed tp communication",
        Phase.PP.value: "posting the schedule's sends/receives, receive waits after the sender posted, the final "
                        "send waits and the tied-embedding all-reduce (executor/phase_clock.py)",
        Phase.BUBBLE.value: "receive waits before the sender posted (another stage computing); the wait for the "
                            "pipeline's last rank after the schedule is in the clock's stamp exchange, which is "
                            "left out of the step with the loss broadcast (executor/phase_clock.py)",
        Phase.DP.value: "the bucketed dp gradient all-reduce after backward (no overlap) plus the loss average; "
                        "FSDP2: the loss average, and at pp > 1 each stage's perform_reduce_grad (torch's "
                        "REDUCE_GRAD: the step's one reduce-scatter per fully_shard module)",
        Phase.OPTIMIZER.value: "optimizer.step()",
        Phase.EP.value: "ep > 1: time inside the MoE layers' all-to-alls (expert counts, dispatch, combine) in the "
                        "stages' forward, backward and recompute, which exclude it (executor/moe.py)",
    }

    def __init__(self, ctx: RunContext, optimizer=None):
        """``optimizer``: builds the optimizer from a parameter list; None: AdamW as the plan's ``optimizer_impl``."""
        self.ctx, self.layout = ctx, ctx.layout
        optimizer = optimizer or partial(make_optimizer, impl=ctx.layout.strategy.optimizer_impl)
        self.coord = ctx.layout.coords(ctx.rank)
        layout = self.layout
        full = build_gpt(ctx.spec, seed=ctx.seed).to(ctx.device)
        self.tp_mesh = ctx.mesh["tp"] if layout.tp > 1 else None
        self.schedule = self.tied_group = self.pipe_clock = None
        self.tp_clock = TpClock()
        self.experts = StageExperts(ctx, full)  # before the stages: every rank creates the ep groups alike
        self.recompute = RecomputeClock(exclude=ClockSum(self.tp_clock, self.experts.clock))
        self.fsdp = layout.strategy.zero >= ZeroStage.ZERO2
        if layout.pp == 1:
            if self.tp_mesh is not None:
                parallelize_gpt(full, self.tp_mesh, layout.sequence_parallel)
            self.modules = [full]
            self._finish(full)
        else:
            self.modules = self._stages(full)
        self.model = self.modules[0] if len(self.modules) == 1 else nn.ModuleList(self.modules)
        self.params = [p for m in self.modules for p in m.parameters()]
        self.experts.mark(self.modules)
        dense, experts = self.experts.split(self.params)
        # FSDP2 puts the experts' shards on their own mesh: one optimizer per mesh
        self.optimizer = OptimizerGroup([optimizer(dense), optimizer(experts)]) if experts else optimizer(self.params)
        self.dp_group = ctx.mesh["dp"].get_group() if layout.dp > 1 else None

    def _stages(self, full) -> list[Stage]:
        from torch.distributed.pipelining import PipelineStage

        layout, ctx = self.layout, self.ctx
        if self.tp_mesh is not None:
            check_tp(full, layout.tp)
            permute_fused_rows(full, layout.tp)
        n, mine = layout.pp * layout.v, rank_stages(layout, self.coord.pp)
        modules = [Stage(full, stage_layers(layout, s), s == 0, s == n - 1) for s in mine]
        for module in modules:
            if self.tp_mesh is not None:
                shard_vocab(module, self.tp_mesh)
                parallelize_blocks(module.layers, full.spec, self.tp_mesh, layout.sequence_parallel)
                if layout.sequence_parallel:
                    sp_gather_output(module.layers[-1], self.tp_mesh)
            self._finish(module)
        pp_group = ctx.mesh["pp"].get_group()
        stages = [PipelineStage(m, s, n, ctx.device, group=pp_group) for m, s in zip(modules, mine)]
        self.schedule = load_schedule(layout.schedule, stages, layout.micro_batches)
        self.pipe_clock = PipelineClock(self.schedule, n, layout.micro_batches, self.tp_clock, ctx.synchronize,
                                        others=(self.experts.clock,) if self.experts.clock else ())
        if full.spec.tied_embeddings:
            self.tied_group = embedding_groups(layout)[(self.coord.dp, self.coord.tp)]
        return modules

    def _finish(self, module) -> None:
        """Recompute and attention kind (executor/recompute.py), then FSDP2 for ZeRO 2/3: each block,
        then the module, fully sharded over the dp mesh, resharded after forward for ZeRO-3 only;
        checkpointing goes first, as FSDP2 requires [src: torch-fsdp2]."""
        strategy = self.layout.strategy
        apply_recompute(module, strategy.recompute, self.recompute)
        apply_attention(module, strategy.attention)
        if not self.fsdp:
            return
        from torch.distributed.fsdp import fully_shard

        reshard, mp = strategy.zero is ZeroStage.ZERO3, self.ctx.mp_policy()
        if self.experts.groups is not None:  # each expert over its expert-data-parallel group: the blocks skip it
            shard_experts(module, self.experts.groups, self.layout.dp, reshard, self.ctx.device_type, mp,
                          self.experts.fsdp_mesh())
        for block in module.layers:
            fully_shard(block, mesh=self.ctx.mesh["dp"], reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(module, mesh=self.ctx.mesh["dp"], reshard_after_forward=reshard, mp_policy=mp)

    def train_step(self, step: int) -> StepRecord:
        """One optimizer step on global batch ``step``; the loss is the global mean, equal on every rank."""
        ctx, layout, phases = self.ctx, self.layout, {}
        recompute0 = self.recompute.seconds
        inputs, targets = (replica_samples(x, self.coord.dp, layout.dp).to(ctx.device) for x in batch_for(ctx, step))
        self.optimizer.zero_grad(set_to_none=True)
        self.check_s = 0.0
        if layout.pp > 1:
            loss = self._pipeline_step(inputs, targets, phases)
        else:
            loss = self._accumulate(inputs, targets, phases)
        if layout.strategy.recompute is not Recompute.NONE:
            phases[Phase.RECOMPUTE] = self.recompute.seconds - recompute0
            phases[Phase.BACKWARD] -= phases[Phase.RECOMPUTE]
        if layout.tp > 1:
            phases[Phase.TP] += self.experts.reduce_tp()
        if layout.dp > 1:
            start = time.perf_counter()
            if not self.fsdp:  # FSDP2 reduce-scattered every gradient (the experts' over their group) in backward
                average_gradients(self.experts.split(self.params)[0], self.dp_group, layout.dp, layout.bucket_bytes)
                self.experts.reduce(self.params)
            ctx.synchronize()
            phases[Phase.DP] = time.perf_counter() - start
            if self.pipe_clock is not None:  # pp > 1: FSDP2's one reduce-scatter per module, at torch's REDUCE_GRAD
                phases[Phase.DP] += self.pipe_clock.reduce_s
        start = time.perf_counter()
        norm = self.experts.grad_norm(self.modules, self.params, self.fsdp, self.dp_group)  # for the equivalence checks (StepRecord.grad_norm), not training: untimed
        self.check_s += time.perf_counter() - start
        start = time.perf_counter()
        self.optimizer.step()
        ctx.synchronize()
        phases[Phase.OPTIMIZER] = time.perf_counter() - start
        start = time.perf_counter()
        loss = self._global_loss(loss)
        return StepRecord(loss=loss, phases_s=phases, grad_norm=norm,
                          check_s=self.check_s + time.perf_counter() - start)

    def _global_loss(self, loss: torch.Tensor) -> float:
        """The mean loss over the dp replicas (each holds its own after the pipeline's broadcast)."""
        if self.layout.dp > 1:
            dist.all_reduce(loss, group=self.dp_group)
            loss /= self.layout.dp
        return float(loss)

    def _accumulate(self, inputs, targets, phases) -> torch.Tensor:
        m, total, tp = self.layout.micro_batches, torch.zeros((), device=self.ctx.device), self.tp_clock
        fwd = bwd = tp_fwd = tp_bwd = ep_fwd = ep_bwd = 0.0
        with tp.timing():
            for x, y in zip(micro_batches(inputs, m), micro_batches(targets, m)):
                tp0, ep0, start = tp.seconds, self.experts.seconds(), time.perf_counter()
                with self.ctx.autocast():
                    loss = self.modules[0](x, y) / m
                self.ctx.synchronize()
                tp1, ep1, mid = tp.seconds, self.experts.seconds(), time.perf_counter()
                loss.backward()
                self.ctx.synchronize()
                fwd, bwd = fwd + mid - start, bwd + time.perf_counter() - mid
                tp_fwd, tp_bwd = tp_fwd + tp1 - tp0, tp_bwd + tp.seconds - tp1
                ep_fwd, ep_bwd = ep_fwd + ep1 - ep0, ep_bwd + self.experts.seconds() - ep1
                total += loss.detach().float()
        phases[Phase.FORWARD], phases[Phase.BACKWARD] = fwd - tp_fwd - ep_fwd, bwd - tp_bwd - ep_bwd
        phases[Phase.TP] = tp_fwd + tp_bwd
        if self.experts.clock is not None:  # the all-to-alls, out of forward and backward
            phases[Phase.EP] = ep_fwd + ep_bwd
        return total

    def _pipeline_step(self, inputs, targets, phases) -> torch.Tensor:
        layout, first, last = self.layout, self.coord.pp == 0, self.coord.pp == self.layout.pp - 1
        losses: list[torch.Tensor] = []
        args = (inputs,) if first else ()
        kwargs = {"target": targets, "losses": losses} if last else {}
        clock, tp0, pp_group = self.pipe_clock, self.tp_clock.seconds, self.ctx.mesh["pp"].get_group()
        ep0 = self.experts.seconds()
        with clock.timing(), self.ctx.autocast():
            self.schedule.step(*args, **kwargs)
        self.ctx.synchronize()
        pp, bubble = clock.split(pp_group)
        start = time.perf_counter()
        if self.tied_group is not None:
            sync_tied(self.modules, self.tied_group)
        self.ctx.synchronize()
        phases.update({Phase.FORWARD: clock.forward_s, Phase.BACKWARD: clock.backward_s, Phase.BUBBLE: bubble,
                       Phase.TP: self.tp_clock.seconds - tp0, Phase.PP: pp + time.perf_counter() - start})
        if self.experts.clock is not None:  # the all-to-alls, out of forward, backward and recompute already
            phases[Phase.EP] = self.experts.seconds() - ep0
        start = time.perf_counter()  # the loss broadcast is the executor's check, not training (StepRecord.check_s)
        loss = torch.stack(losses).float().mean().detach() if last else torch.zeros((), device=self.ctx.device)
        src = layout.rank_of(self.coord.dp, layout.pp - 1, self.coord.tp)
        dist.broadcast(loss, src=src, group=pp_group)
        self.ctx.synchronize()
        self.check_s = time.perf_counter() - start + clock.exchange_s  # and the clock's stamp exchange
        return loss

    def model_state_bytes(self) -> ModelStateBytes:
        seen: dict[int, int] = {}
        params = _storage_bytes(self.params, seen)
        grads = _storage_bytes((p.grad for p in self.params), seen)
        states = (t for st in adam_state(self.optimizer).values() for t in st.values() if torch.is_tensor(t))
        return ModelStateBytes(params_bytes=params, grads_bytes=grads, optimizer_bytes=_storage_bytes(states, seen))

    def components(self) -> dict[str, str]:
        layout, out = self.layout, self.experts.components(self.ctx.spec, self.layout)
        if layout.tp > 1:
            out["tensor parallel"] = (f"DTensor parallelize_module over tp={layout.tp}: ColwiseParallel qkv, mlp.up "
                                      "(rows reordered per head / SwiGLU half), RowwiseParallel attn.out, mlp.down, "
                                      "vocab-parallel embedding and output layer (logits all-gathered)"
                                      + ("; SequenceParallel norms" if layout.sequence_parallel else ""))
        if layout.pp > 1:
            out["pipeline"] = (f"torch.distributed.pipelining _PipelineScheduleRuntime running the simulator's "
                               f"{layout.strategy.schedule.value} action lists (pp={layout.pp}, v={layout.v}, "
                               f"m={layout.micro_batches}); phases timed around its actions "
                               "(executor/phase_clock.py)")
        if layout.dp > 1:
            out["gradient sync"] = ("FSDP2 fully_shard over the dp mesh" if self.fsdp else
                                    f"dist.all_reduce of flat buckets of {layout.bucket_bytes} bytes after backward "
                                    "(no overlap); the dp phase is that exposed time")
        if layout.strategy.recompute is not Recompute.NONE:
            out["recompute"] = (f"{layout.strategy.recompute.value}: torch.utils.checkpoint (non-reentrant) around "
                                + ("each block" if layout.strategy.recompute is Recompute.FULL else
                                   "each attention core"))
        return out


def build(ctx: RunContext) -> ParallelRunner:
    return ParallelRunner(ctx)


for _family in (Family.TENSOR, Family.PIPELINE, Family.PIPELINE_TENSOR):
    register(FamilySpec(family=_family, check=check, build=build))
