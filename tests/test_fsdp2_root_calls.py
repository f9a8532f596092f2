"""FSDP2 gathers and reduce-scatters each ``fully_shard`` module apart, the root module (the chunk's edge parameters:
embedding, final norm, output layer) too (simulator/compile/comm_part.py, ``root_apart``). The executor wraps every
block and then the root (executor/strategies/data_parallel.py), and tests/test_fsdp2_host_bench.py counts torch's
``foreach_all_gather`` calls of one forward on a fake pair: blocks + 1. Checked here on the default suite's recorded
zero3 run (tests/data/suite_default, gpt3-125m tiny: 2 blocks, 2 micro-batches per rank) against its own figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.collectives.base import Op
from simulator.compile import compile_step
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import run_cluster, run_workload

DATA = Path(__file__).parent / "data" / "suite_default"


def _chunk(case: str, **changes):
    results = load_results(DATA / f"{case}.results.json")
    cluster, workload = run_cluster(results, str(DATA / "cluster.yaml")), run_workload(results)
    strategy = dataclasses.replace(results.run.plan.strategy, **changes)
    layout = build_layout(strategy, cluster, workload, gpus=results.run.plan._layout_gpus())
    return workload, compile_step(cluster, workload, strategy, layout=layout).stages[0].chunks[0]


def test_zero3_root_module_has_its_own_calls():
    workload, chunk = _chunk("zero3")
    assert workload.layers == 2 and chunk.layers == 2
    gathers = [c.nbytes for c in chunk.zero_fwd]
    assert len(gathers) == 3 and gathers[1] == gathers[2] != gathers[0]  # root, block, block (fp32 bytes)
    back = [(c.op, c.nbytes) for c in chunk.zero_bwd]
    assert [op for op, _ in back] == [Op.ALL_GATHER] * 3 + [Op.REDUCE_SCATTER] * 3
    assert [n for _, n in back[3:]] == [gathers[1], gathers[1], gathers[0]]  # the root's post-backward runs last


def test_the_calls_reach_both_engines():
    """One more gather forward and backward and one more reduce-scatter per micro-batch: the recorded zero3's
    estimate grows in both engines by at least the two extra gathers of one micro-batch (the rest may overlap)."""
    from simulator.analytical import estimate_work
    from simulator.engine.step import simulate

    results = load_results(DATA / "zero3.results.json")
    cluster, workload = run_cluster(results, str(DATA / "cluster.yaml")), run_workload(results)
    plan = results.run.plan
    layout = build_layout(plan.strategy, cluster, workload, gpus=plan._layout_gpus())
    work = compile_step(cluster, workload, plan.strategy, layout=layout)
    chunks = work.stages[0].chunks
    merged_chunk = dataclasses.replace(chunks[0], zero_fwd=chunks[0].zero_fwd[1:],
                                       zero_bwd=chunks[0].zero_bwd[1:3] + chunks[0].zero_bwd[3:5])
    merged = dataclasses.replace(work, stages=tuple(dataclasses.replace(s, chunks=(merged_chunk,))
                                                    for s in work.stages))
    extra = chunks[0].zero_fwd[0].time_s
    assert estimate_work(work).step_time_s - estimate_work(merged).step_time_s >= 2 * extra - 1e-9
    des_extra = simulate(work, cluster, seed=0).step_time_s - simulate(merged, cluster, seed=0).step_time_s
    assert des_extra >= 2 * extra - 1e-9


def _reduce_scatters_per_step(rank, world):
    """FSDP2 reduce-scatters counted on one rank over one step of the data-parallel runner (zero 3, dp 2:
    8 samples / (2 · micro-batch 2) = 2 micro-batches), at ``torch.distributed.reduce_scatter_single``, which
    FSDP2's ``foreach_reduce`` calls once per ``fully_shard`` module and backward."""
    import torch.distributed as dist

    from executor.strategies.data_parallel import DataParallelRunner
    from parallel_runs import GPT_TINY, context, plan_for

    runner = DataParallelRunner(context(plan_for(GPT_TINY, {"dp": 2, "zero": 3}), rank, world))
    calls, original = [], dist.reduce_scatter_single

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    dist.reduce_scatter_single = counted
    try:
        runner.train_step(0)
    finally:
        dist.reduce_scatter_single = original
    return len(calls), runner.ctx.layout.micro_batches, GPT_TINY.layers


@pytest.mark.multiproc
def test_the_executor_reduce_scatters_every_micro_batch_as_the_model_charges():
    """The one rule (``simulator.strategy.sync.reduces_every_micro_batch``): ZeRO-3 reduce-scatters in every
    micro-batch's backward, one call per block and one for the root; the executor used to skip all but the last
    micro-batch's (``set_requires_gradient_sync(last)``) while the model charged every one."""
    from executor.launch import run
    from simulator.strategy.sync import reduces_every_micro_batch

    for calls, m, blocks in run(_reduce_scatters_per_step, 2, timeout_s=240):
        assert m == 2 and calls == m * (blocks + 1), (calls, m, blocks)
    workload, chunk = _chunk("zero3")
    results = load_results(DATA / "zero3.results.json")
    assert reduces_every_micro_batch(results.run.plan.strategy)
    assert sum(1 for c in chunk.zero_bwd if c.op is Op.REDUCE_SCATTER) == workload.layers + 1


def _with_host(cluster, **fields):
    return dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=dataclasses.replace(
        cluster.node.host, **fields)))


def _chunk_on(case: str, cluster):
    results = load_results(DATA / f"{case}.results.json")
    workload, strategy = run_workload(results), results.run.plan.strategy
    layout = build_layout(strategy, cluster, workload, gpus=results.run.plan._layout_gpus())
    return workload, compile_step(cluster, workload, strategy, layout=layout).stages[0].chunks[0]


def test_zero2_backward_reads_its_own_host_term_where_stated():
    """``host.fsdp2_zero2_backward_module_us`` (no re-gather in ZeRO-2's backward) replaces
    ``fsdp2_backward_module_us`` for ZeRO-2 only: on the recorded zero2 run (2 processes on the recorded 2 cores:
    share 1) the first chunk's backward changes by (blocks + root) × (100 − 479) µs; ZeRO-3's does not move, and
    unset (None) leaves ZeRO-2 on the shared term."""
    results = load_results(DATA / "zero2.results.json")
    base = run_cluster(results, str(DATA / "cluster.yaml"))
    assert base.node.host.fsdp2_zero2_backward_module_us is None and base.node.host.fsdp2_backward_module_us == 479
    own = _with_host(base, fsdp2_zero2_backward_module_us=100.0)
    workload, before = _chunk_on("zero2", base)
    _, after = _chunk_on("zero2", own)
    assert after.bwd_s - before.bwd_s == pytest.approx((workload.layers + 1) * (100.0 - 479.0) * 1e-6, rel=1e-9)
    assert after.fwd_s == before.fwd_s
    assert _chunk_on("zero3", own)[1].bwd_s == _chunk_on("zero3", base)[1].bwd_s


def test_the_zero2_field_round_trips_and_is_optional(tmp_path):
    from simulator.cluster.io import load_cluster, save_cluster
    from simulator.errors import SpecError

    cpu = load_cluster("localhost-cpu")
    assert cpu.node.host.fsdp2_zero2_backward_module_us is None  # not stated: ZeRO-2 shares ZeRO-3's term
    stated = _with_host(cpu, fsdp2_zero2_backward_module_us=123.5)
    assert load_cluster(str(save_cluster(stated, tmp_path / "c.yaml"))).node.host.fsdp2_zero2_backward_module_us \
        == 123.5
    assert load_cluster(str(save_cluster(cpu, tmp_path / "d.yaml"))).node.host.fsdp2_zero2_backward_module_us is None
    with pytest.raises(SpecError, match="fsdp2_zero2_backward_module_us"):
        _with_host(cpu, fsdp2_zero2_backward_module_us=-1.0)
