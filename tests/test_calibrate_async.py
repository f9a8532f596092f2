"""The calibration's asynchronous-batch probe (:mod:`executor.calibrate_async`): the call pattern of torch
``ZeroRedundancyOptimizer._sync_params`` [src: torch-zero1-broadcasts], checked on a recording fake and on 2 gloo
processes."""

from __future__ import annotations

import math

from executor.calibrate_async import async_broadcast_us, batch_s


class _Handle:
    def __init__(self, log, i):
        self.log, self.i = log, i

    def wait(self):
        self.log.append(("wait", self.i))


class _Dist:
    def __init__(self):
        self.log = []

    def barrier(self):
        self.log.append(("barrier",))

    def broadcast(self, t, src, async_op):
        self.log.append(("broadcast", t, src, async_op))
        return _Handle(self.log, t) if async_op else None


def test_batch_is_every_broadcast_issued_by_owner_then_waited():
    """5 tensors on 2 ranks: owner 0 issues 0, 2, 4, owner 1 issues 1, 3, all async; then 5 waits in issue order."""
    fake = _Dist()
    batch_s(fake, [0, 1, 2, 3, 4], 2)
    assert fake.log == [("barrier",)] + [("broadcast", i, i % 2, True) for i in (0, 2, 4, 1, 3)] + [
        ("wait", i) for i in (0, 2, 4, 1, 3)]
    fake = _Dist()
    batch_s(fake, [0, 1], 2, async_op=False)
    assert fake.log == [("barrier",), ("broadcast", 0, 0, False), ("broadcast", 1, 1, False)]


def test_probe_on_two_gloo_processes():
    out = async_broadcast_us([1, 2], k=4, nbytes=64, batches=2, warmup=1)
    assert set(out) == {2} and out[2] > 0 and math.isfinite(out[2])
