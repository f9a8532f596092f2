"""Pipeline parallelism with ``torch.distributed.pipelining``, running the simulator's own schedule.

The layout says which layers each (virtual) stage holds (``layout.layers_per_stage``; stage s on
pp rank ``s mod pp``) and ``layout.schedule`` is the per-rank action list the simulator plays
(:mod:`simulator.schedules`). Each rank builds its stages' modules from the one seeded model, then
runs that list: it is written with :func:`simulator.schedules.to_csv` and loaded by torch's
``_PipelineScheduleRuntime._load_csv`` [src: torch-pipelining] (which adds the sends and
receives; ``PipelineScheduleMulti`` itself pairs them by time step and needs idle-padded lists), so torch executes exactly the
simulator's actions in the simulator's order, for GPipe and 1F1B (one stage per rank) as well as
interleaved 1F1B. torch scales the summed micro-batch gradients by 1/m (``scale_grads``), which
makes them the full batch's mean-loss gradients.

Tied embeddings across stages (GPT): the last stage keeps its own copy of the token embedding for
the logits, and after each step the first and last stage of a pipeline all-reduce the two copies'
gradients (Megatron-LM's embedding group, Shoeybi et al. 2019), so both copies stay equal (under
FSDP2 both copies are sharded alike over dp, and the local shards are summed).
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from executor.model import GPT, project_logits
from simulator.schedule_dry_run import validate
from simulator.schedules import PipelineSchedule, to_csv
from simulator.strategy import ParallelLayout
from simulator.workload.transformer import PositionKind


class Stage(nn.Module):
    """One pipeline stage: the embedding (first stage), some blocks, the final norm and logits (last)."""

    def __init__(self, model: GPT, layer_ids: tuple[int, ...], first: bool, last: bool):
        super().__init__()
        self.spec, self.first, self.last = model.spec, first, last
        if first:
            self.embed = model.embed
        self.layers = nn.ModuleList(model.layers[i] for i in layer_ids)
        if last:
            self.norm_f = model.norm_f
            if model.spec.tied_embeddings:
                source = model.embed.tok.weight
                self.tied_head = source if first else nn.Parameter(source.detach().clone())
            else:
                self.head = model.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            tokens = x
            x = self.embed.tok(tokens)
            if self.spec.position is PositionKind.LEARNED:
                x = x + self.embed.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.layers:
            x = block(x)
        if self.last:
            weight = self.tied_head if self.spec.tied_embeddings else self.head.weight
            x = project_logits(self.norm_f(x), weight)
        return x


def stage_layers(layout: ParallelLayout, stage: int) -> tuple[int, ...]:
    """Model layer indices of global stage ``stage`` (``layout.layers_per_stage`` in model order)."""
    start = sum(layout.layers_per_stage[:stage])
    return tuple(range(start, start + layout.layers_per_stage[stage]))


def rank_stages(layout: ParallelLayout, pp_rank: int) -> tuple[int, ...]:
    """Global stages pp rank ``pp_rank`` holds: ``pp_rank, pp_rank + pp, ...`` (looped placement)."""
    return tuple(range(pp_rank, layout.pp * layout.v, layout.pp))


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch (the model's own loss)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def load_schedule(schedule: PipelineSchedule, stages: list, n_microbatches: int):
    """torch's schedule runtime over ``stages`` running ``schedule``'s action lists, loaded from the
    simulator's CSV form (``to_csv``) with torch's ``_load_csv``, which adds the sends and receives
    each compute action implies (``_PipelineScheduleRuntime``, the ``PipelineScheduleMulti``
    subclass torch runs loaded schedules with)."""
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    validate(schedule)
    runner = _PipelineScheduleRuntime(stages, n_microbatches=n_microbatches, loss_fn=token_loss)
    fd, path = tempfile.mkstemp(suffix=".csv", prefix="trainplan-schedule-")
    try:
        with os.fdopen(fd, "w", newline="") as out:
            out.write(to_csv(schedule))
        runner._load_csv(path)
    finally:
        os.unlink(path)
    return runner


def embedding_groups(layout: ParallelLayout):
    """Per (dp, tp) coordinate, the group of its pipeline's first and last rank (tied embeddings);
    every rank creates every group, in the same order, as ``new_group`` requires."""
    groups = {}
    for d in range(layout.dp):
        for t in range(layout.tp):
            pair = (layout.rank_of(d, 0, t), layout.rank_of(d, layout.pp - 1, t))
            groups[(d, t)] = dist.new_group(list(pair))
    return groups


@torch.no_grad()
def sync_tied(stages: list, group) -> None:
    """Sum the tied embedding's gradient over the first and last stage (both copies get the total)."""
    for module in stages:
        weight = module.embed.tok.weight if module.first else getattr(module, "tied_head", None)
        if weight is not None and weight.grad is not None and not (module.first and module.last):
            grad = weight.grad
            dist.all_reduce(grad._local_tensor if hasattr(grad, "_local_tensor") else grad, group=group)
