"""Each schedule's own price per p2p post (``host.pipeline_p2p_post_schedule_us``, simulator/cluster/host_spec.py):
a pipeline of a listed schedule pays its own per send or receive posted, any other ``pipeline_p2p_post_us``; both
engines read it through the chunk times (simulator/framework_host.py); the field round-trips and bad input names
the field. The calibration's probe is checked in tests/test_calibrate_compute.py; why the price differs by schedule:
docs/validation.md (pipe19)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.cluster.io import load_cluster, save_cluster
from simulator.compile import compile_step
from simulator.errors import SpecError
from simulator.run_results import load_results
from simulator.schedules import ScheduleKind
from simulator.strategy import build_layout
from simulator.validate import estimate_run, run_cluster, run_workload

DATA = Path(__file__).parent / "data" / "suite_default"


def _with_host(cluster, **fields):
    host = dataclasses.replace(cluster.node.host, **fields)
    return dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))


def _work(results, cluster):
    plan = results.run.plan
    workload = run_workload(results)
    layout = build_layout(plan.strategy, cluster, workload, gpus=plan._layout_gpus())
    return compile_step(cluster, workload, plan.strategy, layout=layout)


def _case(case: str):
    results = load_results(DATA / f"{case}.results.json")
    base = _with_host(run_cluster(results, str(DATA / "cluster.yaml")), pipeline_p2p_post_us=60.0)
    return results, base


def test_a_listed_schedule_pays_its_own_post_per_send_and_receive():
    """1F1B at 160 µs against GPipe's 60: each chunk's forward and backward (first and last stage of p = 2: one send
    or receive each) grow by exactly 100 µs; the optimizer does not move; both engines' steps grow."""
    results, base = _case("pp-1f1b")
    listed = _with_host(base, pipeline_p2p_post_schedule_us=((ScheduleKind.GPIPE, 60.0),
                                                             (ScheduleKind.ONE_F_ONE_B, 160.0)))
    before, after = _work(results, base), _work(results, listed)
    for sb, sa in zip(before.stages, after.stages):
        assert sa.optimizer_s == sb.optimizer_s
        for b, a in zip(sb.chunks, sa.chunks):
            assert (a.fwd_s - b.fwd_s, a.bwd_s - b.bwd_s) == pytest.approx((100e-6, 100e-6), rel=1e-9)
    (a0, d0), (a1, d1) = estimate_run(results, base), estimate_run(results, listed)
    assert a1.step_time_s > a0.step_time_s and d1.step_time_s > d0.step_time_s


def test_a_schedule_not_listed_pays_the_shared_post():
    """GPipe with only 1F1B listed compiles exactly as without the table."""
    results, base = _case("pp-gpipe")
    listed = _with_host(base, pipeline_p2p_post_schedule_us=((ScheduleKind.ONE_F_ONE_B, 160.0),))
    assert [(c.fwd_s, c.bwd_s) for s in _work(results, listed).stages for c in s.chunks] == \
        [(c.fwd_s, c.bwd_s) for s in _work(results, base).stages for c in s.chunks]


def test_the_table_round_trips_and_bad_input_names_the_field(tmp_path):
    assert load_cluster("localhost-cpu").node.host.pipeline_p2p_post_schedule_us == ()
    table = ((ScheduleKind.GPIPE, 61.5), (ScheduleKind.ONE_F_ONE_B, 130.0), (ScheduleKind.INTERLEAVED, 210.0))
    cluster = _with_host(load_cluster("localhost-cpu"), pipeline_p2p_post_schedule_us=table)
    loaded = load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml")))
    assert loaded.node.host.pipeline_p2p_post_schedule_us == table
    assert loaded.node.host.p2p_post_us(ScheduleKind.INTERLEAVED) == 210.0
    with pytest.raises(SpecError, match="pipeline_p2p_post_schedule_us"):
        _with_host(cluster, pipeline_p2p_post_schedule_us=((ScheduleKind.GPIPE, -1.0),))
    with pytest.raises(SpecError, match="pipeline_p2p_post_schedule_us"):
        _with_host(cluster, pipeline_p2p_post_schedule_us=((ScheduleKind.GPIPE, 1.0), (ScheduleKind.GPIPE, 2.0)))
    text = (tmp_path / "c.yaml").read_text().replace("interleaved: 210.0", "zigzag: 210.0")
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(SpecError, match="pipeline_p2p_post_schedule_us"):
        load_cluster(str(tmp_path / "bad.yaml"))
