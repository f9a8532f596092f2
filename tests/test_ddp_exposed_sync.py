"""The exposed ``dp`` phase of DDP with overlap, stamped in the comm hook DDP already calls (executor/strategies/
ddp_sync.py), on 2 gloo ranks.

Until 2026-11-25 (ddp15) the stamp came from a multi-grad hook over every parameter, registered and removed each step:
~0.1 ms of host time per step in a tight loop on the tiny model and ~0.3 ms outside every phase in the suite's runs
(6.6 ms per step over 292 parameters on the H200, docs/hardware_measured.md), time the executor added to what it
measured. Checked: no multi-grad hook is registered in a step; the last bucket's stamp falls inside the synchronising
backward; with overlap the dp phase is > 0 (it holds the last bucket's all-reduce, whatever the load) and backward
+ dp fit in the step; with several buckets only the last one stamps.
"""

import time

import pytest

from executor.launch import run
from parallel_runs import GPT_TINY, context, plan_for


def _steps(rank, world, flat):
    import torch

    from executor.strategies.data_parallel import DataParallelRunner

    def refuse(*_a, **_k):
        raise AssertionError("a multi-grad hook registered in the step")

    torch.autograd.graph.register_multi_grad_hook = refuse
    runner = DataParallelRunner(context(plan_for(GPT_TINY, flat), rank, world))
    calls = []
    on_bucket = runner.hook.on_bucket

    def counted(bucket):
        calls.append(bucket.is_last())
        return on_bucket(bucket)

    runner.hook.on_bucket = counted
    out = []
    for step in range(2):
        calls.clear()
        start = time.perf_counter()
        record = runner.train_step(step)
        wall = time.perf_counter() - start
        out.append(({p.value: s for p, s in record.phases_s.items()}, wall, runner.hook.last_bucket_s - start,
                     list(calls)))
    return out


@pytest.mark.multiproc
def test_the_exposed_sync_is_stamped_by_the_last_bucket_without_a_per_step_hook():
    for flat in ({"dp": 2}, {"dp": 2, "bucket_bytes": 4096}):
        for rank_rows in run(_steps, 2, args=(flat,), timeout_s=240):
            for phases, wall, stamp_s, calls in rank_rows:
                assert phases["dp"] > 0 and phases["backward"] > 0, (flat, phases)
                assert 0 < stamp_s < wall, (flat, stamp_s, wall)
                assert calls and calls[-1] and not any(calls[:-1]), (flat, calls)
            if "bucket_bytes" in flat:  # DDP rebuilds its buckets after the first step: 17 of them here
                assert len(rank_rows[-1][3]) > 1, rank_rows[-1][3]
