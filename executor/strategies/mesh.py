"""The layout's (dp, pp, tp) rank grid as a torch ``DeviceMesh``, and the bucketed data-parallel
gradient average the tensor/pipeline families use.

``ParallelLayout`` numbers ranks by its ``placement`` (innermost dimension first: ``tp-pp-dp``
puts tp neighbours on consecutive ranks); the mesh is built from ``layout.rank_of`` itself, so
``mesh["tp"]`` holds exactly ``layout.tp_groups`` and so on, whatever the placement.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from simulator.strategy import ParallelLayout

DIMS = ("dp", "pp", "tp")
"""Mesh dimension names, outermost first (torchtitan's names)."""


def layout_mesh(layout: ParallelLayout, device_type: str = "cpu"):
    """A 3-D DeviceMesh (dp, pp, tp) whose entry [d, p, t] is ``layout.rank_of(d, p, t)``."""
    from torch.distributed.device_mesh import DeviceMesh

    grid = torch.tensor([[[layout.rank_of(d, p, t) for t in range(layout.tp)] for p in range(layout.pp)]
                         for d in range(layout.dp)], dtype=torch.int)
    return DeviceMesh(device_type, grid, mesh_dim_names=DIMS)


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
            _reduce(bucket, group, size)
            bucket = []
        bucket.append(g)
    _reduce(bucket, group, size)


def _reduce(grads: list[torch.Tensor], group, size: int) -> None:
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
