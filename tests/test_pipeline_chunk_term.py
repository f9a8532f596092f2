"""The pipeline stage's bookkeeping per forward and backward (``host.pipeline_chunk_us``,
simulator/framework_host.py): torch's ``forward_one_chunk`` / ``backward_one_chunk`` around the stage module, which
the executor books as forward and backward and the per-action term therefore leaves out. Charged once per forward and
per backward of every chunk of a torch pipeline, nowhere else; the field round-trips. The probe is tested in
tests/test_pipeline_host_bench.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.cluster.io import load_cluster, save_cluster
from simulator.compile import compile_step
from simulator.errors import SpecError
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import estimate_run, run_cluster, run_workload

DATA = Path(__file__).parent / "data" / "suite_default"


def _with_chunk_us(cluster, us: float):
    host = dataclasses.replace(cluster.node.host, pipeline_chunk_us=us)
    return dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))


def _work(results, cluster):
    plan = results.run.plan
    workload = run_workload(results)
    layout = build_layout(plan.strategy, cluster, workload, gpus=plan._layout_gpus())
    return compile_step(cluster, workload, plan.strategy, layout=layout)


@pytest.mark.parametrize("case", ["pp-gpipe", "pp-1f1b"])
def test_each_forward_and_backward_of_a_chunk_carries_it(case):
    """25 µs makes every chunk's forward and backward 25 µs longer and leaves the optimizer alone; the pipeline
    (p = 2, m = 4, first and last stage: no chunk without one) grows in both engines."""
    results = load_results(DATA / f"{case}.results.json")
    cluster = run_cluster(results, str(DATA / "cluster.yaml"))
    charged = _with_chunk_us(cluster, 25.0)
    before, after = _work(results, cluster), _work(results, charged)
    for sb, sa in zip(before.stages, after.stages):
        assert sa.optimizer_s == sb.optimizer_s
        for b, a in zip(sb.chunks, sa.chunks):
            assert (a.fwd_s - b.fwd_s, a.bwd_s - b.bwd_s) == pytest.approx((25e-6, 25e-6), rel=1e-9)
    (a0, d0), (a1, d1) = estimate_run(results, cluster), estimate_run(results, charged)
    assert a1.step_time_s > a0.step_time_s and d1.step_time_s > d0.step_time_s


def test_not_charged_without_torchs_pipeline():
    """A data-parallel run (pp = 1) compiles the same with or without the term."""
    results = load_results(DATA / "ddp-overlap.results.json")
    cluster = run_cluster(results, str(DATA / "cluster.yaml"))
    before, after = _work(results, cluster), _work(results, _with_chunk_us(cluster, 25.0))
    assert [(c.fwd_s, c.bwd_s) for s in after.stages for c in s.chunks] == \
        [(c.fwd_s, c.bwd_s) for s in before.stages for c in s.chunks]


def test_the_field_round_trips_and_gpu_presets_state_none(tmp_path):
    for name in ("dgx-h100", "dgx-a100"):
        assert load_cluster(name).node.host.pipeline_chunk_us == 0.0  # not measured on a GPU
    cluster = _with_chunk_us(load_cluster("localhost-cpu"), 41.5)
    assert load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml"))).node.host.pipeline_chunk_us == 41.5
    with pytest.raises(SpecError, match="pipeline_chunk_us"):
        _with_chunk_us(cluster, -1.0)
