"""Replay a simulator :class:`~simulator.collectives.base.Schedule` with torch.distributed isend/irecv.

The executor runs the very transfer list the simulator times, so a ring or tree all-reduce here is
"written with point-to-point operations following the same schedule as the simulator", and its
result can be checked against ``dist.all_reduce``.

Semantics followed (``simulator/collectives/base.py``):
- Steps run in order; a step ends when all its transfers (on this rank) have completed.
- Every transfer of a step reads the sender's buffer *as it stood at the end of the previous step*:
  sends are posted from views of the buffer, and the buffer is not modified until every send and
  receive of the step has completed; received bytes land in scratch tensors first.
- After the step, the receiver adds (``reduce=True``) or writes its bytes at ``recv_offset``, in
  schedule order.
- All-to-all uses a separate send and receive buffer: transfers read the send buffer (the input)
  and write the receive buffer. A rank's own slice ``i`` is copied locally from its send buffer to
  its receive buffer (no message; the schedule has no transfer for it).
- ``src``/``dst`` are group indices; ``schedule.ranks`` maps them to global ranks.
- Byte offsets become element offsets by the tensor's element size; a boundary that is not a
  multiple of it is an error. Zero-length transfers are skipped on both sides.
"""

from __future__ import annotations

import time

from simulator.collectives.base import Op, Schedule, Transfer, split
from simulator.errors import SpecError


def replay_schedule(schedule: Schedule, tensor, group_rank: int, *, group=None, step_ends: list | None = None):
    """Run ``schedule`` on this rank's 1-D contiguous ``tensor``; return the result buffer.

    For every op but all-to-all the result is ``tensor`` itself, updated in place (as
    ``dist.all_reduce`` does). For all-to-all ``tensor`` is the send buffer and a new receive
    buffer of the same shape is returned (as ``dist.all_to_all_single`` fills its output).
    ``group_rank`` is this rank's index in ``schedule.ranks``. ``step_ends``, when given, gets
    ``time.perf_counter()`` appended after each step (its receives applied): a probe's stamps
    (``benchmarks/replay_step_wait_probe.py``); the executor passes none.
    """
    _check(schedule, tensor, group_rank)
    element = tensor.element_size()
    if schedule.op is Op.ALL_TO_ALL:
        send, recv = tensor, _own_slice_copy(schedule, tensor, group_rank)
    else:
        send = recv = tensor
    for step in schedule.steps():
        _run_step(schedule, step, send, recv, group_rank, element, group)
        if step_ends is not None:
            step_ends.append(time.perf_counter())
    return recv


def _check(schedule: Schedule, tensor, group_rank: int) -> None:
    if tensor.dim() != 1 or not tensor.is_contiguous():
        raise SpecError("tensor", "replay needs a 1-D contiguous tensor; pass tensor.view(-1)")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes != schedule.nbytes:
        raise SpecError("tensor", f"holds {nbytes} bytes but the schedule is for {schedule.nbytes}")
    if not 0 <= group_rank < len(schedule.ranks):
        raise SpecError("group_rank", f"{group_rank} is not an index of a group of {len(schedule.ranks)}")


def _own_slice_copy(schedule: Schedule, tensor, group_rank: int):
    """The all-to-all receive buffer, with this rank's own slice already in place."""
    import torch

    recv = torch.zeros_like(tensor)
    offset, length = split(schedule.nbytes, len(schedule.ranks))[group_rank]
    own = _elements(offset, length, tensor.element_size())
    recv[own].copy_(tensor[own])
    return recv


def _elements(offset: int, nbytes: int, element: int) -> slice:
    if offset % element or nbytes % element:
        raise SpecError("schedule", f"byte range [{offset}, {offset + nbytes}) does not fall on "
                                    f"{element}-byte element boundaries of the tensor's dtype")
    return slice(offset // element, (offset + nbytes) // element)


def _run_step(schedule: Schedule, step: list[Transfer], send, recv, me: int, element: int, group) -> None:
    """Post this rank's sends and receives of one step, wait for all, then apply the receives."""
    import torch
    import torch.distributed as dist

    ranks = schedule.ranks
    pending, landed = [], []
    for t in step:
        if t.nbytes == 0 or (t.src != me and t.dst != me):
            continue
        src_range = _elements(t.offset, t.nbytes, element)
        dst_range = _elements(t.recv_offset, t.nbytes, element)
        if t.src == me and t.dst == me:
            landed.append((t, dst_range, send[src_range].clone()))
        elif t.src == me:
            pending.append(dist.isend(send[src_range], dst=ranks[t.dst], group=group))
        else:
            scratch = torch.empty(dst_range.stop - dst_range.start, dtype=recv.dtype, device=recv.device)
            pending.append(dist.irecv(scratch, src=ranks[t.src], group=group))
            landed.append((t, dst_range, scratch))
    for work in pending:
        work.wait()
    for t, dst_range, data in landed:
        if t.reduce:
            recv[dst_range].add_(data)
        else:
            recv[dst_range].copy_(data)
