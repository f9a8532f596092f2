"""The bucketed data-parallel gradient average the tensor/pipeline families use (the mesh itself is
the runner's: ``executor.run.build_context``)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The rank's own shard of a DTensor (its storage, so in-place ops reach the DTensor), else the tensor."""
    return tensor._local_tensor if hasattr(tensor, "_local_tensor") else tensor


@torch.no_grad()
def average_gradients(params, group, size: int, bucket_bytes: int | None = None) -> None:
    """Average gradients over a data-parallel group after backward: gradients packed in reverse
    parameter order into flat buckets of at most ``bucket_bytes`` (None: one bucket holding all),
    one ``dist.all_reduce`` per bucket (DDP's bucketing without its overlap, Li et al. VLDB 2020);
    DTensor gradients by their local shards."""
    grads = [_local(p.grad) for p in reversed(list(params)) if p.grad is not None]
    if size == 1 or not grads:
        return
    bucket: list[torch.Tensor] = []
    for g in grads:
        if bucket and bucket_bytes is not None and \
                sum(t.numel() * t.element_size() for t in bucket) + g.numel() * g.element_size() > bucket_bytes:
            reduce_flat(bucket, group, size)
            bucket = []
        bucket.append(g)
    reduce_flat(bucket, group, size)


@torch.no_grad()
def reduce_flat(grads: list[torch.Tensor], group, size: int) -> None:
    """``grads`` summed over ``group`` in one flat ``dist.all_reduce``, divided by ``size``, written back."""
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
