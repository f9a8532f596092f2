"""torch's pipeline schedule runtime per action (simulator/pipeline_runtime.py, ``host.pipeline_action_us``): the
action counts read from torch 2.13's runtime lists, the term in the compiled step of both engines, hand-worked on
the default suite's recorded GPipe run (tests/data/suite_default, the lead's quiet run 1 of 2026-11-25), and the
cluster field's round trip. The probe that measures the term is tested in tests/test_pipeline_host_bench.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator import pipeline_runtime as pr
from simulator.cluster.io import load_cluster, save_cluster
from simulator.compile import compile_step
from simulator.errors import SpecError
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.strategy.framework import Framework
from simulator.validate import estimate_run, run_cluster, run_workload
from simulator.workload import ChunkSlice

DATA = Path(__file__).parent / "data" / "suite_default"


def _with_action_us(cluster, us: float):
    host = dataclasses.replace(cluster.node.host, pipeline_action_us=us)
    return dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))


def _recorded(case: str, us: float):
    results = load_results(DATA / f"{case}.results.json")
    cluster = _with_action_us(run_cluster(results, str(DATA / "cluster.yaml")), us)
    return results, cluster


def _layout(results, cluster, **changes):
    plan = results.run.plan
    strategy = dataclasses.replace(plan.strategy, **changes)
    return build_layout(strategy, cluster, run_workload(results), gpus=plan._layout_gpus())


def test_actions_per_compute_action_as_torch_lists_them():
    """torch 2.13's ``pipeline_order_with_comms`` for GPipe, p = 2, m = 4 (printed from ``_load_csv``): rank 0
    ``0UNSHARD, 0F0, 0SEND_F0, … 0RECV_B0, 0B0, … 0REDUCE_GRAD, 0RESHARD``; rank 1 ``1UNSHARD, 1RECV_F0, 1F0, …
    1B0, 1SEND_B0, … 1REDUCE_GRAD, 1RESHARD``: 2 actions per forward and per backward on each, 3 per step, 19 in
    all = 4 · 2 · 2 + 3. A middle stage both receives and sends: 3."""
    results, cluster = _recorded("pp-gpipe", 0.0)
    layout = _layout(results, cluster)
    assert (layout.pp, layout.v, layout.micro_batches) == (2, 1, 4)
    counts = [pr.pipeline_actions(layout, ChunkSlice(index=c, count=2, start=c, layers=1)) for c in range(2)]
    assert counts == [2, 2]
    assert 4 * 2 * counts[0] + pr.step_actions(layout) == 19
    assert [pr.pipeline_actions(layout, ChunkSlice(index=c, count=4, start=c, layers=1)) for c in range(4)] == [
        2, 3, 3, 2]
    inter, _ = _recorded("pp-interleaved", 0.0)
    assert pr.step_actions(_layout(inter, cluster)) == 3 * 2  # v = 2 stages on each rank


def test_only_torch_pipelines_count():
    results, cluster = _recorded("pp-gpipe", 0.0)
    chunk = ChunkSlice(index=0, count=2, start=0, layers=1)
    megatron = _layout(results, cluster, framework=Framework.MEGATRON)
    assert pr.pipeline_actions(megatron, chunk) == 0 and pr.step_actions(megatron) == 0
    ddp, _ = _recorded("ddp-overlap", 0.0)
    flat = _layout(ddp, cluster)
    assert flat.pp == 1 and pr.pipeline_actions(flat, ChunkSlice(index=0, count=1, start=0, layers=2)) == 0
    assert pr.step_host_s(_with_action_us(cluster, 100.0), flat) == 0.0


def test_compiled_chunks_and_optimizer_carry_the_term():
    """50 µs per action, 2 processes on the recorded cluster's 2 cores (share 1): every chunk's forward and
    backward 2 · 50 = 100 µs longer, every stage's optimizer step 3 · 50 = 150 µs longer."""
    results, cluster = _recorded("pp-gpipe", 0.0)
    workload, strategy = run_workload(results), results.run.plan.strategy
    works = [compile_step(c, workload, strategy, layout=_layout(results, c)) for c in (cluster,
                                                                                        _with_action_us(cluster, 50.0))]
    for before, after in zip(works[0].stages, works[1].stages):
        assert after.optimizer_s - before.optimizer_s == pytest.approx(150e-6, rel=1e-9)
        for b, a in zip(before.chunks, after.chunks):
            assert a.fwd_s - b.fwd_s == pytest.approx(100e-6, rel=1e-9)
            assert a.bwd_s - b.bwd_s == pytest.approx(100e-6, rel=1e-9)


def test_recorded_gpipe_step_grows_by_eleven_actions_in_both_engines():
    """The recorded GPipe run's 1.66 ms sends outlast every action (0.2-0.4 ms), so they pace the middle of the
    pipeline (tests/test_pipeline_send_stream.py) and only the fill and drain see the longer actions: the first
    micro-batch's forward through both stages and the last one's backward back, 4 × 2 actions, plus the 3 per-step
    actions before the optimizer: 11 × ``pipeline_action_us`` more, in both engines. Dropping the term would leave
    the estimate unchanged."""
    results, base = _recorded("pp-gpipe", 0.0)
    a0, d0 = estimate_run(results, base)
    a1, d1 = estimate_run(results, _with_action_us(base, 50.0))
    assert a1.step_time_s - a0.step_time_s == pytest.approx(11 * 50e-6, rel=1e-6)
    assert d1.step_time_s - d0.step_time_s == pytest.approx(11 * 50e-6, rel=1e-6)


def test_gpu_presets_state_no_term_and_the_field_round_trips(tmp_path):
    for name in ("dgx-h100", "dgx-a100"):
        assert load_cluster(name).node.host.pipeline_action_us == 0.0  # not measured on a GPU (hardware.py)
    cluster = _with_action_us(load_cluster("localhost-cpu"), 61.5)
    assert load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml"))).node.host.pipeline_action_us == 61.5
    with pytest.raises(SpecError, match="pipeline_action_us"):
        _with_action_us(cluster, -1.0)


def _with_post_us(cluster, us: float):
    host = dataclasses.replace(cluster.node.host, pipeline_p2p_post_us=us)
    return dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))


def test_posting_each_send_and_receive_is_charged_on_the_chunk():
    """``host.pipeline_p2p_post_us`` per send or receive of a compute action: at p = 2 every forward and backward
    has exactly one (stage 0 sends activations and receives gradients, stage 1 the other way round), so 30 µs
    makes each chunk's forward and backward 30 µs longer and leaves the per-step actions alone; a middle stage
    of four has two per action. On the recorded GPipe run the fill and drain carry it (the 1.66 ms sends pace the
    middle): the first micro-batch's forward on both stages and the last one's backward on both, 4 × 30 µs more
    in both engines."""
    results, cluster = _recorded("pp-gpipe", 0.0)
    layout = _layout(results, cluster)
    assert [pr.p2p_actions(layout, ChunkSlice(index=c, count=4, start=c, layers=1)) for c in range(4)] == [1, 2, 2, 1]
    workload, strategy = run_workload(results), results.run.plan.strategy
    posted = _with_post_us(cluster, 30.0)
    works = [compile_step(c, workload, strategy, layout=_layout(results, c)) for c in (cluster, posted)]
    for before, after in zip(works[0].stages, works[1].stages):
        assert after.optimizer_s == before.optimizer_s
        for b, a in zip(before.chunks, after.chunks):
            assert (a.fwd_s - b.fwd_s, a.bwd_s - b.bwd_s) == pytest.approx((30e-6, 30e-6), rel=1e-9)
    a0, d0 = estimate_run(results, cluster)
    a1, d1 = estimate_run(results, posted)
    assert a1.step_time_s - a0.step_time_s == pytest.approx(4 * 30e-6, rel=1e-6)
    assert d1.step_time_s - d0.step_time_s == pytest.approx(4 * 30e-6, rel=1e-6)


def test_the_post_field_round_trips_and_gpu_presets_state_none(tmp_path):
    for name in ("dgx-h100", "dgx-a100"):
        assert load_cluster(name).node.host.pipeline_p2p_post_us == 0.0  # not measured on a GPU
    cluster = _with_post_us(load_cluster("localhost-cpu"), 71.5)
    assert load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml"))).node.host.pipeline_p2p_post_us == 71.5
    with pytest.raises(SpecError, match="pipeline_p2p_post_us"):
        _with_post_us(cluster, -1.0)
