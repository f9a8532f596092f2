"""Count the ATen operators eager torch dispatches for the executor's model: what the compute model's
``Kernel.dispatches`` must add up to (:mod:`simulator.workload.eager_dispatch`).

Counted with a ``TorchDispatchMode`` (``torch.utils._python_dispatch``), which sees every operator that
reaches the dispatcher below autograd, views and in-place accumulations included, once per call. Deterministic:
no timing, one process, the executor's fp32 model on the CPU. The second iteration is counted, when every
parameter's ``.grad`` exists (the executor keeps it between micro-batches, ``zero_grad(set_to_none=False)``), so
a backward accumulates with ``add_`` rather than storing the first gradient.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from simulator.workload.transformer import TransformerSpec


class _Counter(TorchDispatchMode):
    """Counts each operator (its overload packet, e.g. ``aten.view``) dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if not name.startswith("profiler."):  # record_function markers, not operators
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class DispatchCounts:
    """Operators per phase, each a name → calls mapping."""

    forward: dict[str, int]
    backward: dict[str, int]
    optimizer: dict[str, int] | None = None

    @property
    def totals(self) -> tuple[int, ...]:
        """(forward, backward[, optimizer]) calls."""
        parts = (self.forward, self.backward) + (() if self.optimizer is None else (self.optimizer,))
        return tuple(sum(p.values()) for p in parts)


def count_block(spec: TransformerSpec, micro_batch: int, seed: int = 0) -> DispatchCounts:
    """One block of ``spec`` as the model runs it: :func:`count_model` of two blocks less that of one (the
    block's input then needs its gradient and its parameters have theirs, as in the model), per operator."""
    two, one = (count_model(replace(spec, layers=n), micro_batch, seed) for n in (2, 1))

    def less(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        return {k: a.get(k, 0) - b.get(k, 0) for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)}

    return DispatchCounts(forward=less(two.forward, one.forward), backward=less(two.backward, one.backward))


def count_model(spec: TransformerSpec, micro_batch: int, seed: int = 0) -> DispatchCounts:
    """The whole :class:`executor.model.GPT` of ``spec`` with its loss, and its AdamW step (torch's default on the
    CPU, as ``executor`` makes it): forward, backward, optimizer."""
    from executor.model import build_gpt

    model = build_gpt(spec, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=generator)
    targets = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=generator)
    for _ in range(2):
        with _Counter() as fwd:
            loss = model(tokens, targets)
        with _Counter() as bwd:
            loss.backward()
        with _Counter() as opt:
            optimizer.step()
    return DispatchCounts(forward=dict(fwd.counts), backward=dict(bwd.counts), optimizer=dict(opt.counts))
