"""One training step of tensor, pipeline and data parallelism combined on the layout's DeviceMesh.

- tp > 1: the blocks are tensor-parallel (:mod:`executor.strategies.tensor`), with sequence
  parallelism when the layout says so;
- pp > 1: each rank builds its stages and runs the simulator's schedule
  (:mod:`executor.strategies.pipeline`);
- dp > 1: replica d trains on rows ``d·B/dp .. (d+1)·B/dp`` of the global batch and the replicas
  average their gradients after backward (:func:`executor.strategies.mesh.average_gradients`).

Every rank builds the same seeded model first, so the run starts from the single-process model's
weights. The step's loss is the global batch's mean loss on every rank: the last pipeline stage's
mean over its micro-batches, broadcast along the pipeline, averaged over the replicas.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from executor.model import build_gpt
from executor.strategies.mesh import average_gradients, layout_mesh
from executor.strategies.pipeline import (Stage, embedding_groups, load_schedule, rank_stages, stage_layers,
                                          sync_tied)
from executor.strategies.tensor import check_tp, parallelize_blocks, parallelize_gpt, permute_fused_rows, \
    sp_gather_output
from simulator.strategy import ParallelLayout


def adamw(params, lr: float = 1e-3):
    """The default optimizer: AdamW (Loshchilov & Hutter 2019) at torch's defaults but ``lr``;
    ``foreach=False`` since a rank may mix DTensor and plain parameters."""
    return torch.optim.AdamW(params, lr=lr, foreach=False)


class HybridRunner:
    """The (dp, pp, tp) layout's training step on this rank; ``train_step(tokens, targets)`` takes the
    global batch (B, s) and returns the global mean loss."""

    def __init__(self, layout: ParallelLayout, spec, rank: int, *, seed: int = 0,
                 optimizer: Callable = adamw, device_type: str = "cpu"):
        self.layout, self.rank = layout, rank
        self.coord = layout.coords(rank)
        self.mesh = layout_mesh(layout, device_type)
        self.device = torch.device(device_type)
        model = build_gpt(spec, seed).to(self.device)
        tp_mesh = self.mesh["tp"] if layout.tp > 1 else None
        if layout.pp == 1:
            self.model = parallelize_gpt(model, tp_mesh, layout.sequence_parallel) if tp_mesh else model
            self.modules = [self.model]
        else:
            self.modules = self._stages(model, tp_mesh)
        self.params = [p for m in self.modules for p in m.parameters()]
        self.optimizer = optimizer(self.params)

    def _stages(self, model, tp_mesh) -> list[Stage]:
        from torch.distributed.pipelining import PipelineStage

        layout = self.layout
        if tp_mesh is not None:
            check_tp(model, layout.tp)
            permute_fused_rows(model, layout.tp)
        n = layout.pp * layout.v
        modules = [Stage(model, stage_layers(layout, s), s == 0, s == n - 1)
                   for s in rank_stages(layout, self.coord.pp)]
        for module in modules:
            if tp_mesh is not None:
                parallelize_blocks(module.layers, model.spec, tp_mesh, layout.sequence_parallel)
                if layout.sequence_parallel:
                    sp_gather_output(module.layers[-1], tp_mesh)
        pp_group = self.mesh["pp"].get_group()
        stages = [PipelineStage(m, s, n, self.device, group=pp_group)
                  for m, s in zip(modules, rank_stages(layout, self.coord.pp))]
        self.schedule = load_schedule(layout.schedule, stages, layout.micro_batches)
        self.tied_group = embedding_groups(layout)[(self.coord.dp, self.coord.tp)] \
            if model.spec.tied_embeddings else None
        return modules

    def _replica_rows(self, batch: torch.Tensor) -> torch.Tensor:
        share = batch.shape[0] // self.layout.dp
        return batch[self.coord.dp * share:(self.coord.dp + 1) * share].to(self.device)

    def train_step(self, tokens: torch.Tensor, targets: torch.Tensor) -> float:
        """One optimizer step on the global batch; returns its mean loss (the same on every rank)."""
        tokens, targets = self._replica_rows(tokens), self._replica_rows(targets)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._pipeline_step(tokens, targets) if self.layout.pp > 1 else self._step(tokens, targets)
        if self.layout.dp > 1:
            average_gradients(self.params, self.mesh["dp"].get_group(), self.layout.dp)
            dist.all_reduce(loss, group=self.mesh["dp"].get_group())
            loss /= self.layout.dp
        self.optimizer.step()
        return float(loss)

    def _step(self, tokens, targets) -> torch.Tensor:
        loss = self.model(tokens, targets)
        loss.backward()
        return loss.detach().clone()

    def _pipeline_step(self, tokens, targets) -> torch.Tensor:
        layout, first, last = self.layout, self.coord.pp == 0, self.coord.pp == self.layout.pp - 1
        losses: list[torch.Tensor] = []
        args = (tokens,) if first else ()
        kwargs = {"target": targets, "losses": losses} if last else {}
        self.schedule.step(*args, **kwargs)
        if self.tied_group is not None:
            sync_tied(self.modules, self.tied_group)
        loss = torch.stack(losses).mean().detach() if last else torch.zeros((), device=self.device)
        src = layout.rank_of(self.coord.dp, layout.pp - 1, self.coord.tp)
        dist.broadcast(loss, src=src, group=self.mesh["pp"].get_group())
        return loss
