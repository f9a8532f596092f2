"""The library's own collectives (``dist.all_reduce`` and friends) and reference results for checks.

``native_call`` returns a zero-argument callable running one call of ``op`` on a rank's buffer
with the backend's built-in implementation (the "native" algorithm of the bench). ``reference``
computes what a correct replay must leave in the buffer, from every rank's input gathered with
``dist.all_gather`` (works for sizes that do not split evenly, which the ``*_tensor`` ops reject);
for all-reduce it is ``dist.all_reduce`` itself. Buffer semantics: ``simulator/collectives/base.py``.
"""

from __future__ import annotations

from typing import Callable

from simulator.collectives.base import Op, split
from simulator.errors import SpecError


def native_call(op: Op, buf, rank: int, world: int, root: int = 0) -> Callable[[], object]:
    """One call of ``op`` on ``buf`` (1-D) with the backend's own implementation."""
    import torch
    import torch.distributed as dist

    n = buf.numel()
    if op in (Op.REDUCE_SCATTER, Op.ALL_GATHER, Op.ALL_TO_ALL) and n % world:
        raise SpecError("bytes", f"native {op.value} needs a buffer that splits evenly over {world} ranks; "
                                 f"{n} elements do not")
    if op is Op.ALL_REDUCE:
        return lambda: dist.all_reduce(buf)
    if op is Op.BROADCAST:
        return lambda: dist.broadcast(buf, src=root)
    if op is Op.REDUCE:
        return lambda: dist.reduce(buf, dst=root)
    if op is Op.REDUCE_SCATTER:
        out = torch.empty(n // world, dtype=buf.dtype, device=buf.device)
        return lambda: dist.reduce_scatter_tensor(out, buf)
    if op is Op.ALL_GATHER:
        chunk = n // world
        own = buf[rank * chunk:(rank + 1) * chunk].clone()
        return lambda: dist.all_gather_single(buf, own)
    if op is Op.ALL_TO_ALL:
        out = torch.empty_like(buf)
        return lambda: dist.all_to_all_single(out, buf)
    if op is Op.SEND_RECV:
        return _send_recv(buf, rank)
    raise SpecError("op", f"no native implementation of {op.value}")


def _send_recv(buf, rank: int) -> Callable[[], object]:
    import torch.distributed as dist

    if rank == 0:
        return lambda: dist.send(buf, dst=1)
    if rank == 1:
        return lambda: dist.recv(buf, src=0)
    return lambda: None


def reference(op: Op, data, rank: int, world: int, root: int = 0):
    """What rank ``rank``'s buffer must hold after ``op`` on inputs ``data``; None where undefined.

    Returns ``(expected, region)``: compare ``result[region]`` with ``expected[region]``.
    """
    import torch
    import torch.distributed as dist

    if op is Op.ALL_REDUCE:
        expected = data.clone()
        dist.all_reduce(expected)
        return expected, slice(None)
    inputs = [torch.empty_like(data) for _ in range(world)]
    dist.all_gather(inputs, data)
    element = data.element_size()
    slices = [slice(o // element, (o + n) // element) for o, n in split(data.numel() * element, world)]
    total = torch.stack(inputs).sum(dim=0)
    if op is Op.REDUCE_SCATTER:
        return total, slices[rank]
    if op is Op.REDUCE:
        return total, slice(None) if rank == root else slice(0, 0)
    if op is Op.BROADCAST:
        return inputs[root], slice(None)
    if op is Op.SEND_RECV:
        return inputs[0], slice(None) if rank == 1 else slice(0, 0)
    if op is Op.ALL_GATHER:
        expected = torch.empty_like(data)
        for j, region in enumerate(slices):
            expected[region] = inputs[j][region]
        return expected, slice(None)
    if op is Op.ALL_TO_ALL:
        expected = torch.empty_like(data)
        for j, region in enumerate(slices):
            mine = slices[rank]
            if region.stop - region.start != mine.stop - mine.start:
                raise SpecError("bytes", "all-to-all check needs a buffer that splits evenly over the ranks")
            expected[region] = inputs[j][mine]
        return expected, slice(None)
    raise SpecError("op", f"no reference result for {op.value}")


def prepare_input(op: Op, data, rank: int, world: int):
    """The input a replay starts from: all-gather ranks hold only their own slice (rest zero)."""
    if op is not Op.ALL_GATHER:
        return data.clone()
    element = data.element_size()
    offset, nbytes = split(data.numel() * element, world)[rank]
    buf = data.new_zeros(data.shape)
    buf[offset // element:(offset + nbytes) // element] = data[offset // element:(offset + nbytes) // element]
    return buf
