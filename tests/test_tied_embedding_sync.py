"""The tied word embedding's gradient all-reduce between a torch pipeline's first and last stage
(simulator/compile/tied_embedding.py ``tied_embedding_sync``; the executor's ``sync_tied``,
executor/strategies/pipeline.py):
its bytes and group hand-worked on the default suite's recorded GPipe run (tests/data/suite_default, tiny gpt3-125m:
vocab 128, hidden 32, fp32), its place in both engines' step, and where it is not made."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.compile import tied_embedding as pr
from simulator.cluster.io import load_cluster
from simulator.collectives.base import Op
from simulator.compile import compile_step
from simulator.compile.costs import CostCache
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.strategy.framework import Framework
from simulator.validate import estimate_run, run_cluster, run_workload
from simulator.work import CommKind

DATA = Path(__file__).parent / "data" / "suite_default"


def _recorded(case: str = "pp-gpipe"):
    results = load_results(DATA / f"{case}.results.json")
    return results, run_cluster(results, str(DATA / "cluster.yaml")), run_workload(results)


def _layout(results, cluster, workload, **changes):
    plan = results.run.plan
    strategy = dataclasses.replace(plan.strategy, **changes)
    return build_layout(strategy, cluster, workload, gpus=plan._layout_gpus())


def test_first_and_last_stage_all_reduce_the_tied_gradient_once():
    """V · h · 4 B = 128 · 32 · 4 = 16,384 B (fp32 run), one all-reduce over ranks (0, 1), on both pp ranks, ready
    after the last backward, priced by the cluster's all-reduce of those bytes on that pair."""
    results, cluster, workload = _recorded()
    assert (workload.vocab, workload.hidden, workload.tied_embeddings) == (128, 32, True)
    layout = _layout(results, cluster, workload)
    cache = CostCache(cluster)
    for stage in (0, 1):
        (call,) = pr.tied_embedding_sync(cache, workload, layout, stage)
        assert (call.kind, call.op, call.group, call.nbytes) == (CommKind.DP, Op.ALL_REDUCE, (0, 1), 16_384)
        assert call.time_s == pytest.approx(cache.collective((0, 1), Op.ALL_REDUCE, 16_384)[0], rel=1e-12)
    work = compile_step(cluster, workload, results.run.plan.strategy, layout=layout)
    for st in work.stages:
        assert [c.nbytes for c in st.grad_sync] == [16_384] and st.grad_ready_fraction == (1.0,)


def test_recorded_gpipe_step_grows_by_the_all_reduce_in_both_engines():
    """GPipe at p = 2: the first stage finishes last (its last backward closes the schedule), then all-reduces
    the tied gradient before its optimizer step, so both engines' step grows by exactly the call's time over the
    same step without it; an untied model makes no call."""
    from simulator.analytical import estimate_work
    from simulator.engine.step import simulate

    results, cluster, workload = _recorded()
    layout = _layout(results, cluster, workload)
    (call,) = pr.tied_embedding_sync(CostCache(cluster), workload, layout, 0)
    untied = dataclasses.replace(workload, tied_embeddings=False)
    assert pr.tied_embedding_sync(CostCache(cluster), untied, _layout(results, cluster, untied), 0) == ()
    with_call = compile_step(cluster, workload, results.run.plan.strategy, layout=layout)
    without = dataclasses.replace(with_call, stages=tuple(dataclasses.replace(st, grad_sync=(), grad_ready_fraction=())
                                                          for st in with_call.stages))
    steps = results.summary()["step_time_s"]["steps"]

    def des(work):
        return simulate(work, cluster, seed=0, steps=steps, trace=False).step_time_s

    assert estimate_work(with_call).step_time_s - estimate_work(without).step_time_s == pytest.approx(
        call.time_s, rel=1e-6)
    assert des(with_call) - des(without) == pytest.approx(call.time_s, rel=1e-6)
    analytical, engine = estimate_run(results, cluster)
    assert (analytical.step_time_s, engine.step_time_s) == pytest.approx(
        (estimate_work(with_call).step_time_s, des(with_call)), rel=1e-9)


def test_not_made_outside_torch_pipelines_or_the_edge_stages():
    results, cluster, workload = _recorded()
    cache = CostCache(cluster)
    megatron = _layout(results, cluster, workload, framework=Framework.MEGATRON)
    assert pr.tied_embedding_sync(cache, workload, megatron, 0) == ()  # Megatron-LM's own: not charged yet
    deep = dataclasses.replace(workload, layers=4)
    torch_pp4 = dataclasses.replace(results.run.plan.strategy, pp=4, framework=Framework.TORCH_DDP)
    h100 = load_cluster("dgx-h100")
    four = build_layout(torch_pp4, h100, deep, gpus=4)
    assert [len(pr.tied_embedding_sync(CostCache(h100), deep, four, r)) for r in range(4)] == [1, 0, 0, 1]
    ddp, _, flat_workload = _recorded("ddp-overlap")
    flat = _layout(ddp, cluster, flat_workload)
    assert flat.pp == 1 and pr.tied_embedding_sync(cache, flat_workload, flat, 0) == ()


def test_fsdp2_shards_the_tied_gradient_over_dp_times_cp():
    """Under FSDP2 (ZeRO ≥ 2) both copies are sharded over the mesh's dp dimension, which holds dp·cp ranks
    (executor/strategies/data_parallel.py): dp 2 · cp 1 and dp 1 · cp 2 shard alike, V·h/2 · 4 B = 8,192 B, and
    dp·cp·tp = 2 pairs run at once in both. (Sharding over dp alone gave 16,384 B and 1 pair at cp 2.)"""
    from simulator.strategy import ZeroStage
    from simulator.strategy.kinds import AttentionKind

    results, _, workload = _recorded()
    deep = dataclasses.replace(workload, layers=2)
    h100 = load_cluster("dgx-h100")
    base = dataclasses.replace(results.run.plan.strategy, framework=Framework.FSDP2, zero=ZeroStage.ZERO2, pp=2, tp=1,
                               attention=AttentionKind.FLASH, global_batch=8, micro_batch=1)
    calls = []
    for dp, cp in ((2, 1), (1, 2)):
        layout = build_layout(dataclasses.replace(base, dp=dp, cp=cp), h100, deep, gpus=2 * dp * cp)
        assert (layout.dp, layout.cp) == (dp, cp)
        (call,) = pr.tied_embedding_sync(CostCache(h100), deep, layout, 0)
        calls.append((call.nbytes, call.concurrent_groups))
    assert calls == [(8_192, 2), (8_192, 2)]
