"""Seeded synthetic token batches: the global batch of step ``k`` is a pure function of (seed, k).

Every rank of every strategy, and the single-process reference (:mod:`executor.reference`), build
the same global batch and take their part of it, so all runs train on the same samples in the same
order: ``replica_samples`` gives dp replica ``d`` of ``dp`` the contiguous samples
``[d·B/dp, (d+1)·B/dp)``, and ``micro_batches`` splits those in order. Tokens are uniform over the
vocabulary (an untrained model's loss starts near ln V); targets are the inputs shifted by one.
"""

from __future__ import annotations

import torch

from simulator.errors import SpecError

_MIX = 0x9E3779B97F4A7C15
"""Golden-ratio constant (Knuth's multiplicative hashing) to spread (seed, step) over the seed space."""


def stream_seed(seed: int, step: int) -> int:
    """The generator seed of step ``step`` of run ``seed`` (distinct for distinct pairs in practice)."""
    return (seed * _MIX + step * 0xBF58476D1CE4E5B9 + 1) % (2 ** 63)


def global_batch(seed: int, step: int, *, batch: int, seq: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)``, each ``(batch, seq)`` int64 on the CPU, for optimizer step ``step``."""
    g = torch.Generator().manual_seed(stream_seed(seed, step))
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g, dtype=torch.int64)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def batch_for(ctx, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of ``step`` for a :class:`~executor.strategies.run_context.RunContext`'s plan and model."""
    spec = ctx.spec
    return global_batch(ctx.seed, step, batch=ctx.plan.strategy.global_batch, seq=spec.seq_len, vocab=spec.vocab)


def replica_samples(x: torch.Tensor, dp_rank: int, dp: int) -> torch.Tensor:
    """Replica ``dp_rank``'s contiguous share of the global batch ``x`` (its first dimension)."""
    if x.shape[0] % dp:
        raise SpecError("global_batch", f"{x.shape[0]} samples do not split over dp={dp}")
    n = x.shape[0] // dp
    return x[dp_rank * n:(dp_rank + 1) * n]


def micro_batches(x: torch.Tensor, count: int) -> list[torch.Tensor]:
    """``x`` split along its first dimension into ``count`` equal micro-batches, in order."""
    if x.shape[0] % count:
        raise SpecError("micro_batch", f"{x.shape[0]} samples do not split into {count} micro-batches")
    return list(x.split(x.shape[0] // count))
