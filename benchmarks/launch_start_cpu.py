"""CPU a rank of ``executor.launch.run`` spends from its start to the end of one 2-rank all-reduce: ranks
started with ``spawn`` (what the launcher does) against ranks forked from a ``forkserver`` that imported torch
once. Evidence for docs/quality.md (test21): most of a launch's cost in the test suite is the ranks' torch import.

Run from the repository root: ``python benchmarks/launch_start_cpu.py [ROUNDS]``; prints, per round and start
method, the launch's wall time and each rank's ``time.process_time()`` at the end of its work (a forked rank's
clock starts at the fork, a spawned rank's at its interpreter start).
"""

from __future__ import annotations

import sys
import time


def cpu_so_far(rank: int, world: int) -> float:
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(4))
    return time.process_time()


def main(rounds: int) -> None:
    import torch.multiprocessing as mp

    from executor import launch

    spawn = mp.get_context
    server = spawn("forkserver")
    server.set_forkserver_preload(["torch", "torch.distributed", "executor.launch"])
    for r in range(rounds):
        for kind in ("spawn", "forkserver"):
            mp.get_context = spawn if kind == "spawn" else (lambda _method: server)
            start = time.perf_counter()
            cpus = launch.run(cpu_so_far, 2)
            print(f"{kind:10s} round {r}: wall {time.perf_counter() - start:5.1f} s, "
                  f"rank CPU {', '.join(f'{c:.2f}' for c in cpus)} s", flush=True)
    mp.get_context = spawn


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
