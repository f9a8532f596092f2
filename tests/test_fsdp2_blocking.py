"""FSDP2 on gloo: every all-gather and reduce-scatter is a blocking call on the rank's one thread
(:func:`simulator.compile.grad_sync.fsdp2_blocking_prefetch`) [src: torch-fsdp2-blocking-calls]."""

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.analytical import estimate_work, exposed_gathers
from simulator.compile import compile_step
from simulator.compile.costs import CostCache
from simulator.engine.step import simulate
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import run_cluster, run_workload

DATA = Path(__file__).parent / "data" / "suite_default"


def _work(case: str, cluster=None):
    results = load_results(DATA / f"{case}.results.json")
    cluster = cluster or run_cluster(results, str(DATA / "cluster.yaml"))
    plan, workload = results.run.plan, run_workload(results)
    layout = build_layout(plan.strategy, cluster, workload, gpus=plan._layout_gpus())
    return compile_step(cluster, workload, plan.strategy, layout=layout,
                        cache=CostCache(cluster, replays_built_on=plan.cluster))


def _no_zero_time(work):
    def chunk(c):
        return replace(c, zero_fwd=tuple(replace(x, time_s=0.0) for x in c.zero_fwd),
                       zero_bwd=tuple(replace(x, time_s=0.0) for x in c.zero_bwd))
    return replace(work, stages=tuple(replace(s, chunks=tuple(map(chunk, s.chunks))) for s in work.stages))


@pytest.mark.parametrize("case, calls_per_micro_batch", [("zero2", 6), ("zero3", 9)])
def test_every_call_adds_its_whole_time(case, calls_per_micro_batch):
    """The recorded 2-rank runs: per micro-batch zero2 makes 3 all-gathers (root + 2 blocks) and 3 reduce-scatters,
    zero3 3 more all-gathers [src: own-fsdp2-call-count-2026-11-25]; none hides
    behind compute, so the analytical step is the step without their time plus micro-batches x their sum (prefetch
    one ahead would hide part of them: the block's compute overlaps the next gather), and the DES, which plays the
    same calls on the compute stream, gives the same step."""
    results = load_results(DATA / f"{case}.results.json")
    cluster = run_cluster(results, str(DATA / "cluster.yaml"))
    work = _work(case)
    chunk = work.stages[0].chunks[0]
    assert chunk.zero_prefetch_calls == 0
    assert len(chunk.zero_fwd) + len(chunk.zero_bwd) == calls_per_micro_batch
    total_s = work.micro_batches * sum(c.time_s for c in chunk.zero_fwd + chunk.zero_bwd)
    step_s = estimate_work(work).step_time_s
    assert step_s - estimate_work(_no_zero_time(work)).step_time_s == pytest.approx(total_s, rel=1e-9)
    assert simulate(work, cluster, seed=0, trace=False).step_time_s == pytest.approx(step_s, rel=1e-6)
    one_ahead = replace(work, stages=tuple(replace(s, chunks=tuple(replace(c, zero_prefetch_calls=1) for c in s.chunks))
                                           for s in work.stages))
    assert estimate_work(one_ahead).step_time_s < step_s - 1e-4
    assert simulate(one_ahead, cluster, seed=0, trace=False).step_time_s < step_s - 1e-4


def test_a_gpu_cluster_keeps_one_ahead():
    """The same plan on its GPU preset (NCCL: a blocking call only orders streams) keeps the one-ahead prefetch."""
    from simulator.cluster.io import load_cluster

    work = _work("zero3", load_cluster("dgx-h100"))
    assert work.stages[0].chunks[0].zero_prefetch_calls == 1


def test_closed_form_with_no_prefetch_is_the_sum():
    """``exposed_gathers`` with prefetch 0: the calls' sum whatever the compute (hand-worked: 1 + 2 ms)."""
    work = _work("zero3")
    calls = work.stages[0].chunks[0].zero_fwd[:2]
    calls = (replace(calls[0], time_s=1e-3), replace(calls[1], time_s=2e-3))
    for compute_s in (0.0, 1e-3, 1.0):
        assert exposed_gathers(calls, compute_s, 0.0, 0) == pytest.approx(3e-3)
