"""torch ZeRO-1 (``ZeroRedundancyOptimizer``) re-synchronises parameters with one broadcast per parameter tensor
(simulator/compile/comm_part.py ``torch_zero1_broadcasts`` [src: torch-zero1-broadcasts]), checked by hand on
the localhost-cpu preset and on the default suite's recorded zero1 run (tests/data/suite_default: ``trainplan
validate --suite default --calibrate --runs``, 2026-11-25, the lead's quiet run 1 on this project's 2-core VM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cluster.io import load_cluster
from simulator.collectives.base import Op
from simulator.compile import compile_step
from simulator.compile.costs import CostCache
from simulator.results import Category
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import estimate_run, run_cluster, run_workload
from simulator.work import CommKind

DATA = Path(__file__).parent / "data" / "suite_default"

# gpt3-125m at --scale tiny (hidden 32, ffn 128, vocab 128, 16 positions, 2 layers, tied embedding), fp32, in
# the model's order: wte 128·32, wpe 16·32, per layer ln1 w/b 32+32, qkv w/b 96·32+96, proj w/b 32·32+32,
# ln2 w/b 32+32, fc1 w/b 128·32+128, fc2 w/b 32·128+32, final ln w/b 32+32; 4 bytes each.
LAYER = [32, 32, 3072, 96, 1024, 32, 32, 32, 4096, 128, 4096, 32]
TINY_TENSOR_BYTES = [4 * n for n in [4096, 512] + LAYER * 2 + [32, 32]]
assert len(TINY_TENSOR_BYTES) == 28 and sum(TINY_TENSOR_BYTES) == 120_320

# localhost-cpu: gloo call 100 us + loopback hop 50 us + bytes at 2.5 GB/s per broadcast on 2 processes (one hop).
HAND_ZERO_S = 28 * 150e-6 + 120_320 / 2.5e9  # 4.248128 ms


def _work(results, cluster):
    plan = results.run.plan
    workload = run_workload(results)
    layout = build_layout(plan.strategy, cluster, workload, gpus=plan._layout_gpus())
    return compile_step(cluster, workload, plan.strategy, layout=layout)


def test_one_broadcast_per_tensor_by_hand():
    results = load_results(DATA / "zero1.results.json")
    cluster = run_cluster(results, "localhost-cpu")
    after = _work(results, cluster).stages[0].after_step
    broadcasts = [c for c in after if c.op is Op.BROADCAST]
    assert [c.nbytes for c in broadcasts] == TINY_TENSOR_BYTES
    assert all(c.kind is CommKind.ZERO for c in broadcasts) and not [c for c in after if c.op is Op.ALL_GATHER]
    analytical, des = estimate_run(results, cluster)
    for estimate in (analytical, des):
        assert estimate.breakdown[Category.ZERO] == pytest.approx(HAND_ZERO_S, rel=1e-9)


def test_recorded_zero1_pays_each_broadcast_on_the_recorded_cluster():
    """The recorded run's calibrated cluster (call latency 1646.5 us): the ZeRO time is the 28 broadcasts' costs,
    at least 28 call latencies, where one bucketed all-gather of 120,320 bytes paid one."""
    results = load_results(DATA / "zero1.results.json")
    cluster = run_cluster(results, str(DATA / "cluster.yaml"))
    cache = CostCache(cluster)
    each = [cache.collective((0, 1), Op.BROADCAST, n)[0] for n in TINY_TENSOR_BYTES]
    analytical, des = estimate_run(results, cluster)
    for estimate in (analytical, des):
        assert estimate.breakdown[Category.ZERO] == pytest.approx(sum(each), rel=1e-9)
        assert estimate.breakdown[Category.ZERO] > 28 * cluster.comm.call_latency_us * 1e-6


def test_other_frameworks_keep_the_bucketed_all_gather():
    """DeepSpeed's ZeRO-1 all-gathers its flat partitions: one bucket of all 120,320 bytes here."""
    from dataclasses import replace

    from simulator.strategy.framework import Framework

    results = load_results(DATA / "zero1.results.json")
    cluster = run_cluster(results, "localhost-cpu")
    plan = results.run.plan
    strategy = replace(plan.strategy, framework=Framework.DEEPSPEED)
    workload = run_workload(results)
    layout = build_layout(strategy, cluster, workload, gpus=plan._layout_gpus())
    after = compile_step(cluster, workload, strategy, layout=layout).stages[0].after_step
    assert [(c.op, c.nbytes) for c in after] == [(Op.ALL_GATHER, 120_320)]


def test_validate_compares_the_optimizer_phase_with_the_broadcasts_in_it():
    """The executor's optimizer phase is ``ZeroRedundancyOptimizer.step()``, broadcasts included: validate's
    optimizer row is the estimate's optimizer plus its ZeRO time (4.248128 ms of broadcasts on localhost-cpu)."""
    from simulator.validate import validate

    results = load_results(DATA / "zero1.results.json")
    v = validate(results, run_cluster(results, "localhost-cpu"))
    row = v.row("optimizer")
    for estimate, value in ((v.analytical, row.analytical), (v.des, row.des)):
        assert value == pytest.approx(estimate.breakdown[Category.OPTIMIZER] + HAND_ZERO_S, rel=1e-9)
    ddp = load_results(DATA / "ddp-overlap.results.json")
    v = validate(ddp, run_cluster(ddp, "localhost-cpu"))
    assert v.row("optimizer").analytical == v.analytical.breakdown[Category.OPTIMIZER]
