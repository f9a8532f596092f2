"""Count FSDP2's collectives per training step on gloo and whether each is issued ``async_op`` (a blocking c10d
call waits for gloo's work on the calling thread) [src: own-fsdp2-call-count-2026-11-25].

Deterministic (no timing): 2 gloo processes, one thread each, a root module with one Linear and two ``fully_shard``
blocks of two Linears (the executor's wrapping: blocks, then the root, ``executor/strategies/data_parallel.py``),
2 micro-batches of backward then AdamW, ZeRO-2 (``reshard_after_forward=False``) and ZeRO-3; FSDP2's own calls
(``dist.all_gather_single``, ``dist.reduce_scatter_single``, ``dist.all_reduce``) wrapped to count them.
Usage: ``PYTHONPATH=. python benchmarks/fsdp2_call_count.py``. Results: docs/validation.md (fsdp16).
"""

from __future__ import annotations

import os
from collections import Counter

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CALLS = ("all_gather_single", "reduce_scatter_single", "all_reduce")
MICRO_BATCHES = 2


def _count(rank: int, zero: int, port: int) -> None:
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    log: list[tuple[str, bool]] = []
    for name in CALLS:
        def wrap(*args, _orig=getattr(dist, name), _name=name, **kwargs):
            log.append((_name, bool(kwargs.get("async_op", False))))
            return _orig(*args, **kwargs)
        setattr(dist, name, wrap)
    torch.manual_seed(0)
    block = lambda: torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.Linear(128, 32))  # noqa: E731
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), block(), block())
    for b in (model[1], model[2]):
        fully_shard(b, reshard_after_forward=zero == 3)
    fully_shard(model, reshard_after_forward=zero == 3)
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(2):  # the second step is counted
        log.clear()
        for _ in range(MICRO_BATCHES):
            model(torch.randn(2, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
    if rank == 0:
        counts = Counter(log)
        print(f"zero{zero}, per step of {MICRO_BATCHES} micro-batches: "
              + ", ".join(f"{n}{' (async_op)' if a else ' (blocking)'} x{k}" for (n, a), k in sorted(counts.items())))
    dist.destroy_process_group()


def main() -> None:
    for zero, port in ((2, 29731), (3, 29732)):
        mp.spawn(_count, args=(zero, port), nprocs=2)


if __name__ == "__main__":
    main()
