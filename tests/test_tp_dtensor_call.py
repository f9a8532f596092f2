"""torch tensor parallelism's DTensor surcharge per optimizer call, measured in a 2-process tp step (val31, issue 11).

The tp cases' AdamW calls on DTensor weights were priced with FSDP2's in-step figure
(``device.dtensor_call_overhead_us``, 28-31 µs), while a tp step pays 16-24 µs per call (docs/validation.md, "val29",
"val31"). ``host.tp_dtensor_call_us`` is measured by the tp probe's AdamW steps (:mod:`executor.tp_host_bench`) and
read for torch's tensor parallelism only (:func:`simulator.host_overhead.dtensor_call_us`)."""

from __future__ import annotations

import dataclasses

import pytest

from executor.calibrate_host import HostTerms, tp_dtensor_call_us, with_tp_dtensor_calls
from executor.compute_bench import Timing
from executor.compute_grid import tiny_model
from executor.host_bench import TpModuleTiming
from executor.tp_host_bench import TpOptimizerTiming, module_terms, tp_param_counts
from recorded_step import recorded_step, with_host
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.io import cluster_to_dict, load_cluster, save_cluster
from simulator.host_overhead import dtensor_call_us
from simulator.run_results import load_results
from simulator.validate import run_cluster
from simulator.workload.kinds import DtypePolicy
from simulator.workload.registry import load_model

from test_fsdp2_loop import RUNS

SPEC = dataclasses.replace(tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32, tp=2), dropout=0.0)


def _ms(x: float) -> Timing:
    return Timing(median_s=x * 1e-3, p10_s=x * 1e-3, p90_s=x * 1e-3)


def _device():
    """localhost-cpu's device at 10 GB/s × 0.8: the for-loop AdamW's 80 B per element take 10 ns."""
    device = load_cluster("localhost-cpu").device
    return dataclasses.replace(device, hbm_bw_GBps=10.0, hbm_efficiency=0.8)


def _tp(plain_ms: float = 2.0, tp_ms: float = 5.0, dtensors: int = 17, wall_factor: float = 3.0) -> TpModuleTiming:
    """Thread CPU ``plain_ms`` / ``tp_ms``; the wall ``wall_factor`` times it (a loaded machine)."""
    one = _ms(1.0)
    return TpModuleTiming(modules=10, plain_forward=one, tp_forward=one, plain_step=one, tp_step=one,
                          forward_module_us=300.0, backward_module_us=400.0,
                          optimizer=TpOptimizerTiming(plain=_ms(plain_ms * wall_factor), tp=_ms(tp_ms * wall_factor),
                                                      plain_params=109_312, tp_params=55_616,
                                                      dtensor_tensors=dtensors, plain_cpu=_ms(plain_ms),
                                                      tp_cpu=_ms(tp_ms)))


def test_the_surcharge_is_the_tp_step_less_the_plain_one_each_less_its_update_per_dtensor_call():
    """Thread CPU: (5.0 − 55,616 × 10 ns) − (2.0 − 109,312 × 10 ns) = 4.44384 − 0.90688 = 3.53696 ms over 10 × 17
    calls = 20.8056 µs (without the updates' correction 3.0 / 170 = 17.65 µs). The wall medians (3x) give
    (15.0 − 0.55616) − (6.0 − 1.09312) = 9.53696 ms / 170 = 56.1 µs: reported, not the figure."""
    assert tp_dtensor_call_us(_device(), _tp()) == pytest.approx(3536.96 / 170, rel=1e-9)
    assert tp_dtensor_call_us(_device(), _tp(), wall=True) == pytest.approx(9536.96 / 170, rel=1e-9)
    assert tp_dtensor_call_us(_device(), _tp(tp_ms=1.0)) == 0.0  # never negative
    assert tp_dtensor_call_us(_device(), dataclasses.replace(_tp(), optimizer=None)) is None
    assert tp_dtensor_call_us(_device(), _tp(dtensors=0)) is None
    no_cpu = dataclasses.replace(_tp(), optimizer=dataclasses.replace(_tp().optimizer, plain_cpu=None, tp_cpu=None))
    assert tp_dtensor_call_us(_device(), no_cpu) is None


def test_module_terms_keep_the_optimizer_steps_and_count_what_they_step():
    """Two ranks' medians averaged (AdamW 2 / 3 ms plain, 5 / 6 ms tp); the tiny tp = 2 model has 109,312
    elements, 17 of its 28 tensors are DTensors (the 8 block projections' weights and biases and the vocabulary
    embedding), and a tp rank holds 55,616 elements (counted on torch's fake 2-rank group)."""
    def rank(plain_ms, tp_ms):
        return {"plain_forward": [1e-3], "plain_step": [2e-3], "tp_forward": [3e-3], "tp_step": [5e-3],
                "collectives": [1e-3], "plain_optimizer": [plain_ms * 1e-3], "tp_optimizer": [tp_ms * 1e-3]}
    opt = module_terms(SPEC, [rank(2.0, 5.0), rank(3.0, 6.0)]).optimizer
    assert (opt.plain.median_s, opt.tp.median_s) == pytest.approx((2.5e-3, 5.5e-3))
    assert tp_param_counts(SPEC) == (109_312, 55_616, 17)
    assert (opt.plain_params, opt.tp_params, opt.dtensor_tensors) == (109_312, 55_616, 17)
    bare = {k: v for k, v in rank(2.0, 5.0).items() if not k.endswith("optimizer")}
    assert module_terms(SPEC, [bare]).optimizer is None


def test_the_calibration_writes_the_host_field_and_leaves_it_unset_without_the_steps():
    node = load_cluster("localhost-cpu").node
    terms = HostTerms(tp=_tp(), ddp=None, adamw=None, checkpoint=None, fsdp2=None, pipeline=None)
    assert with_tp_dtensor_calls(node, _device(), terms).host.tp_dtensor_call_us == pytest.approx(3536.96 / 170)
    no_steps = dataclasses.replace(terms, tp=dataclasses.replace(_tp(), optimizer=None))
    assert with_tp_dtensor_calls(node, _device(), no_steps) == node
    assert with_tp_dtensor_calls(node, _device(), None) == node
    assert node.host.tp_dtensor_call_us is None  # the preset states none


def _base(case: str):
    return with_host(run_cluster(load_results(RUNS / f"{case}.results.json"), "localhost-cpu"),
                     rank_jitter_sd_fraction=0.0)


def test_the_tp_optimizer_is_priced_by_its_own_field_and_fsdp2_is_not():
    """The recorded tp case (tp = 2 on 2 cores, share 1): its 17 DTensor tensors' 170 AdamW calls pay the TP field in
    place of the device's FSDP2 figure, so the optimizer and both engines' steps move by exactly 170 × (f_tp −
    f_fsdp2); unset, the step is the device-priced one; zero3 (FSDP2) does not move."""
    base = _base("tp")
    device_us = base.device.dtensor_call_overhead_us
    assert device_us > 0 and base.node.host.tp_dtensor_call_us is None
    work0, layout, analytical0, des0 = recorded_step("tp", base)
    assert dtensor_call_us(base, layout) == device_us
    tp_us = device_us - 10.0
    work1, layout, analytical1, des1 = recorded_step("tp", with_host(base, tp_dtensor_call_us=tp_us))
    assert dtensor_call_us(with_host(base, tp_dtensor_call_us=tp_us), layout) == tp_us
    assert work1.stages[0].optimizer_s == pytest.approx(work0.stages[0].optimizer_s - 170 * 10e-6, rel=1e-9)
    assert analytical1 - analytical0 == pytest.approx(-1.7e-3, rel=1e-6)
    assert des1 - des0 == pytest.approx(-1.7e-3, rel=1e-6)
    zero3 = _base("zero3")
    assert recorded_step("zero3", with_host(zero3, tp_dtensor_call_us=0.0))[2:] == recorded_step("zero3", zero3)[2:]


def test_the_field_reads_from_a_file_and_is_written_back(tmp_path):
    d = cluster_to_dict(_base("tp"))
    assert "tp_dtensor_call_us" not in d["host"]
    d["host"]["tp_dtensor_call_us"] = 18.4
    cluster = cluster_from_dict(d)
    assert cluster.node.host.tp_dtensor_call_us == 18.4
    assert load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml"))).node.host == cluster.node.host


def test_the_suite_note_names_the_tp_figure_and_its_wall_reading():
    from types import SimpleNamespace

    from executor.suite_calibration import _dtensor_call_note

    compute = SimpleNamespace(fields=dataclasses.replace(_device(), dtensor_call_overhead_us=30.0),
                              fsdp2_optimizer=None, rank_steps=None, tp_modules=_tp())
    assert _dtensor_call_note(compute) == ("per DTensor optimizer call 30.0 us more, torch TP's 20.8 us (a tp step's "
                                           "thread CPU; its wall 56.1 us), ")
