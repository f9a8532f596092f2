"""Gradient sync of the data-parallel family under DDP, and how its exposed part is timed.

- :class:`ReplayHook` / :func:`comm_hook`: DDP's communication hook; each bucket is all-reduced by
  ``dist.all_reduce`` (algorithm ``auto``) or by replaying the simulator's schedule for the dp group
  with ``isend``/``irecv`` (:mod:`executor.p2p`), then averaged.
- :func:`all_reduce_after_backward`: ``overlap_grad_reduce`` off: the accumulated gradients are
  all-reduced bucket by bucket, in reverse parameter order, after backward (the ``dp`` phase).
- :func:`backward_with_exposed_sync`: overlap on: the time from the last bucket handed to the comm hook
  (``GradBucket.is_last``: DDP calls it once the last parameter gradient is computed and copied into its
  bucket) to ``backward()``'s return, DDP waiting for its buckets, is the exposed ``dp`` phase; the rest is
  ``backward``. The stamp is taken in the hook DDP already calls: until 2026-11-25 (ddp15) a multi-grad hook
  over every parameter was registered and removed each step for it, which cost the rank ~0.1 ms in a tight
  loop and ~0.3 ms per step outside every phase in the runs (docs/validation.md, "The 2-process cases").

The runner that uses them is :mod:`executor.strategies.data_parallel`.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from executor.p2p import replay_schedule
from executor.strategies.base import Phase
from executor.strategies.run_context import RunContext
from simulator.collectives.base import Op
from simulator.collectives.registry import build_schedule
from simulator.strategy.sync import AllReduceAlgorithm


class ReplayHook:
    """DDP comm hook: all-reduce each bucket by replaying the simulator's schedule (then average)."""

    def __init__(self, ctx: RunContext, group, ranks: tuple[int, ...], buckets: dict[int, int]):
        self.ctx, self.group, self.ranks, self.buckets = ctx, group, ranks, buckets
        self.algorithm = ctx.plan.strategy.dp_sync.algorithm
        self.schedules: dict[int, object] = {}
        self.last_bucket_s: float | None = None
        """``time.perf_counter`` when DDP handed this backward's last bucket to the hook (after a device
        synchronise); None until then (:func:`backward_with_exposed_sync` resets it)."""

    def all_reduce(self, flat: torch.Tensor) -> None:
        """Sum ``flat`` (1-D, contiguous) over the dp group in place."""
        if self.algorithm is AllReduceAlgorithm.AUTO:
            dist.all_reduce(flat, group=self.group)
            return
        nbytes = flat.numel() * flat.element_size()
        if nbytes not in self.schedules:
            self.schedules[nbytes] = build_schedule(self.ctx.plan.cluster, self.ranks, Op.ALL_REDUCE, nbytes,
                                                    self.algorithm.value)
        replay_schedule(self.schedules[nbytes], flat, self.ranks.index(self.ctx.rank))

    def on_bucket(self, bucket) -> torch.futures.Future:
        if bucket.is_last():  # every gradient computed: the exposed sync starts here
            self.ctx.synchronize()
            self.last_bucket_s = time.perf_counter()
        buf = bucket.buffer()
        self.buckets[buf.untyped_storage().data_ptr()] = buf.untyped_storage().nbytes()
        self.all_reduce(buf)
        buf.div_(len(self.ranks))
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut


def comm_hook(state: ReplayHook, bucket):  # unannotated return: DDP compares it with a non-string type
    """The DDP communication hook (``state`` is the rank's :class:`ReplayHook`)."""
    return state.on_bucket(bucket)


def all_reduce_after_backward(params, hook: ReplayHook, bucket_bytes: int | None, dp_size: int) -> None:
    """No overlap: all-reduce the accumulated gradients bucket by bucket, in reverse order, then
    divide by ``dp_size``; ``bucket_bytes`` None: one bucket holding all."""
    grads = [p.grad for p in reversed(list(params)) if p.grad is not None]
    cap = bucket_bytes or sum(g.numel() * g.element_size() for g in grads)
    bucket: list[torch.Tensor] = []
    for g in grads + [None]:
        size = sum(t.numel() * t.element_size() for t in bucket)
        if bucket and (g is None or size + g.numel() * g.element_size() > cap):
            flat = torch.cat([t.reshape(-1) for t in bucket])
            hook.all_reduce(flat)
            flat.div_(dp_size)
            for t, new in zip(bucket, torch._utils._unflatten_dense_tensors(flat, bucket)):
                t.copy_(new)
            bucket = []
        if g is not None:
            bucket.append(g)


def backward_with_exposed_sync(ctx: RunContext, hook: ReplayHook, loss: torch.Tensor,
                               phases: dict[Phase, float]) -> None:
    """DDP's synchronising backward: the time from the last bucket handed to ``hook`` (every parameter
    gradient computed) to ``backward()``'s return (DDP waiting for its bucket all-reduces) is the exposed
    ``dp`` phase, the rest ``backward``; no bucket (nothing to sync): all ``backward``."""
    hook.last_bucket_s = None
    ctx.synchronize()
    t0 = time.perf_counter()
    loss.backward()
    ctx.synchronize()
    t1 = time.perf_counter()
    tail = t1 - hook.last_bucket_s if hook.last_bucket_s is not None else 0.0
    phases[Phase.BACKWARD] = phases.get(Phase.BACKWARD, 0.0) + (t1 - t0) - tail
    phases[Phase.DP] = phases.get(Phase.DP, 0.0) + tail
