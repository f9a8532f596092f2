"""executor.own_cpu: the suite's "other work" check must count the CPU of ranks forked from the forkserver
(they are the server's children, invisible to getrusage), or every case of a quiet machine reads as noisy."""

from __future__ import annotations

import time

import pytest

from executor import launch
from executor.own_cpu import own_cpu_s
from executor.launch import StartMethod


def _burn(rank: int, world: int, cpu_s: float) -> float:
    start = time.process_time()
    while time.process_time() - start < cpu_s:
        sum(i * i for i in range(1000))
    return time.process_time() - start


@pytest.mark.multiproc
def test_forked_ranks_cpu_counts_as_our_own():
    launch.run(_burn, 2, (0.0,), start=StartMethod.FORKSERVER)  # the server is up: its start is not in the window
    before = own_cpu_s()
    burned = launch.run(_burn, 2, (0.4,), start=StartMethod.FORKSERVER)
    used = own_cpu_s() - before
    assert sum(burned) >= 0.8
    assert used >= 0.9 * sum(burned)  # getrusage alone saw ~0 of the ranks' 0.8 s
