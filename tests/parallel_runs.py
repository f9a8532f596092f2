"""Helpers for the tensor/pipeline/parameter-server tests: a tiny plan, its RunContext on each rank, and
single-process references (AdamW from executor.reference; SGD, whose update scales with the gradient,
so a gradient off by a constant factor shows in the loss)."""

from __future__ import annotations

import torch

from executor.data import global_batch
from executor.model import build_gpt
from simulator.cluster.io import load_cluster
from simulator.plan_file import Plan
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.transformer import ActivationKind, BiasKind, NormKind, PositionKind, TransformerSpec

GPT_TINY = TransformerSpec(name="gpt-tiny", layers=4, hidden=32, heads=4, vocab=64, seq_len=16)
"""GPT-2 style: learned positions, LayerNorm with biases, GELU, tied embeddings."""
LLAMA_TINY = TransformerSpec(name="llama-tiny", layers=4, hidden=32, heads=4, kv_heads=2, vocab=64, seq_len=16,
                             ffn=64, activation=ActivationKind.SWIGLU, norm=NormKind.RMSNORM,
                             position=PositionKind.ROTARY, bias=BiasKind.NONE, tied_embeddings=False)
"""Llama style: rotary, RMSNorm, SwiGLU (fused gate/up), grouped-query attention, untied head."""
BATCH = 8
STEPS = 3
SGD_LR = 0.5
"""Large enough that three SGD steps move the loss well beyond float32 rounding."""


def plan_for(spec: TransformerSpec, flat: dict, cluster: str = "dgx-h100") -> Plan:
    """A plan of ``spec`` with the flat strategy keys ``flat`` (global batch 8, micro-batch 2 unless given);
    a parameter-server plan lays out over every GPU of ``cluster`` (localhost-cpu: 2 workers)."""
    world = flat.get("dp", 1) * flat.get("tp", 1) * flat.get("pp", 1)
    strategy = strategy_from_flat({"global_batch": BATCH, "micro_batch": 2, **flat})
    plan = Plan(model=spec, cluster=load_cluster(cluster), gpus=world, strategy=strategy)
    plan.layout()
    return plan


def context(plan: Plan, rank: int, world: int):
    """The runner's own RunContext (``executor.run.build_context``: its mesh; none for a parameter server)."""
    from executor.run import build_context
    from executor.strategies.base import Backend, Precision

    return build_context(plan, rank=rank, world=world, local_rank=rank, backend=Backend.GLOO, seed=0,
                         precision=Precision.FP32)


def sgd(params):
    return torch.optim.SGD(params, lr=SGD_LR)


def sgd_reference(spec: TransformerSpec, steps: int = STEPS) -> list[float]:
    model = build_gpt(spec, seed=0)
    opt = sgd(model.parameters())
    losses = []
    for step in range(steps):
        inputs, targets = global_batch(0, step, batch=BATCH, seq=spec.seq_len, vocab=spec.vocab)
        loss = model(inputs, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
