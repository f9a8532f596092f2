"""executor.rank_exit: a rank that leaves while gloo's workers still hold tensors made in Python ends cleanly
(exit status as given, its buffered output kept), instead of SIGABRT "terminate called without an active
exception" from a worker thread taking the GIL of a finalizing interpreter (the module docstring)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from executor.launch import free_port

ROOT = Path(__file__).resolve().parents[1]

# Each rank queues many asynchronous all-reduces of tensors made in Python and drops every reference at
# once, so gloo's workers are still running them, and release the tensors, while the process ends. With
# sys.exit(3) in place of exit_rank(3), a rank aborted in 7 of 12 runs (2026-11-26, 2-core VM at load
# 7-15; executor/rank_exit.py); the output check fails every time os._exit is reached without a flush
# (checked with os._exit(3) in its place: both ranks' stdout empty).
_RANK = """
import sys, torch, torch.distributed as dist
from executor.rank_exit import exit_rank
dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
for _ in range(400):
    dist.all_reduce(torch.full((1 << 16,), float(rank)), async_op=True)
print(f"rank {rank} leaving")  # not flushed: exit_rank must flush it
exit_rank(3)
"""


@pytest.mark.multiproc
def test_a_rank_leaving_with_gloo_work_in_flight_exits_with_its_code_and_output():
    port = str(free_port())
    env = os.environ | {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
                        "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": ""}  # buffered stdout: the flush is checked
    procs = [subprocess.Popen([sys.executable, "-c", _RANK], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env | {"RANK": str(r)}) for r in range(2)]
    for rank, proc in enumerate(procs):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 3, err[-2000:]
        assert "terminate called" not in err, err[-2000:]
        assert out.strip() == f"rank {rank} leaving", (out, err[-2000:])
