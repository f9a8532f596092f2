"""Single-process training of the plan's model: same init, same data, same AdamW.

The loss-equivalence tests compare every strategy's per-step loss with this run. The gradient of
the mean loss over the whole global batch equals the mean of equal-sized micro-batch means, so
one forward over the whole batch is the reference for any dp × micro-batch split (up to the order
of floating-point sums).
"""

from __future__ import annotations

import torch

from executor.data import global_batch
from executor.model import build_gpt
from executor.moe import apply_routing
from executor.strategies.base import OPTIMIZER, OptimizerConfig
from simulator.checks import positive_int
from simulator.strategy.kinds import OptimizerImpl
from simulator.workload import TransformerSpec
from simulator.workload.moe_routing import Routing


def optimizer_kwargs(impl: OptimizerImpl | None) -> dict:
    """``torch.optim.AdamW``'s implementation switches for the plan's ``optimizer_impl``: ``fused=True``,
    ``foreach=True`` or ``foreach=False``; None leaves torch's default (foreach on CUDA, the for-loop on the CPU),
    which is what the torch frameworks' default in the simulator assumes."""
    return {None: {}, OptimizerImpl.FUSED: {"fused": True}, OptimizerImpl.FOREACH: {"foreach": True},
            OptimizerImpl.FOR_LOOP: {"foreach": False}}[impl]


def make_optimizer(params, config: OptimizerConfig = OPTIMIZER, impl: OptimizerImpl | None = None) -> torch.optim.AdamW:
    """AdamW with ``config``, run as ``impl`` (:func:`optimizer_kwargs`; every family builds its optimizer
    through this)."""
    return torch.optim.AdamW(params, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay,
                             **optimizer_kwargs(impl))


class OptimizerGroup:
    """Several optimizers stepped as one (ZeRO-1 with ep: the dense parameters' and the experts')."""

    def __init__(self, optimizers: list):
        self.optimizers = optimizers

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)


def adam_state(opt) -> dict:
    """The Adam state this rank holds (a ZeroRedundancyOptimizer's: its local optimizer's)."""
    if isinstance(opt, OptimizerGroup):
        return {k: v for o in opt.optimizers for k, v in adam_state(o).items()}
    return opt.optim.state if hasattr(opt, "optim") else opt.state


def reference_losses(spec: TransformerSpec, *, seed: int, steps: int, global_batch_size: int) -> list[float]:
    """Loss of each of ``steps`` optimizer steps (before each update), fp32, one process."""
    return reference_run(spec, seed=seed, steps=steps, global_batch_size=global_batch_size)[0]


def reference_run(spec: TransformerSpec, *, seed: int, steps: int, global_batch_size: int,
                  moe_routing: Routing = Routing.LEARNED, micro_batch: int = 1) -> tuple[list[float], list[float]]:
    """(loss, gradient L2 norm) of each of ``steps`` optimizer steps, fp32, one process. Round-robin MoE
    routing counts tokens per ``micro_batch`` samples, as the plan's ranks do (``executor.moe``)."""
    positive_int("steps", steps)
    model = build_gpt(spec, seed=seed)
    apply_routing(model, moe_routing, micro_batch * spec.seq_len)
    opt = make_optimizer(model.parameters())
    losses, norms = [], []
    for step in range(steps):
        inputs, targets = global_batch(seed, step, batch=global_batch_size, seq=spec.seq_len, vocab=spec.vocab)
        loss = model(inputs, targets)
        loss.backward()
        norms.append(float(torch.stack([p.grad.pow(2).sum() for p in model.parameters()]).sum().sqrt()))
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return losses, norms
