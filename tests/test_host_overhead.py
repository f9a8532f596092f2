"""Host overhead (simulator/host_overhead.py): kernel streams inline (CPU) vs async (GPU), the optimizer's host
calls counted from torch's AdamW, CPU time-sharing, and the cluster fields that carry them. The frameworks'
per-module host terms (FSDP2, torch TP, DDP, checkpointing): tests/test_framework_host_modules.py.

Hand-worked figures; the tensor count is checked against the executor's own model."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import host_overhead as ho
from simulator.cluster.io import cluster_to_dict, load_cluster, save_cluster
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.spec import KernelDispatch
from simulator.compile import compile_step
from simulator.unit_times import unit_times
from simulator.errors import SpecError
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import run_cluster, run_workload
from suite_quick_runs import RUNS, device_with as _device, run_case as _run


# --- the stream formula ------------------------------------------------------------------------------

def test_inline_adds_host_time_and_async_takes_the_larger():
    cpu = load_cluster("localhost-cpu").device
    gpu = load_cluster("dgx-h100").device
    assert cpu.kernel_dispatch is KernelDispatch.INLINE and gpu.kernel_dispatch is KernelDispatch.ASYNC
    # 1 ms of kernels, 100 calls at 10 µs = 1 ms of host time
    assert ho.stream_s(cpu, 1e-3, 100, per_call_us=10.0) == pytest.approx(2e-3, rel=1e-12)
    assert ho.stream_s(cpu, 1e-3, 100, 1.5, per_call_us=10.0) == pytest.approx(3e-3, rel=1e-12)  # both shared
    assert ho.stream_s(gpu, 1e-3, 50, per_call_us=10.0) == pytest.approx(1e-3, rel=1e-12)  # device-bound
    assert ho.stream_s(gpu, 1e-3, 200, per_call_us=10.0) == pytest.approx(2e-3, rel=1e-12)  # host-bound
    assert ho.stream_s(gpu, 1e-3, 100, 1.5, per_call_us=10.0) == pytest.approx(1.5e-3, rel=1e-12)  # host shared
    assert ho.stream(gpu, 1e-3, 200, per_call_us=10.0).host_bound
    assert not ho.stream(gpu, 1e-3, 50, per_call_us=10.0).host_bound


def test_processes_share_the_host_cores_only_beyond_their_count():
    cpu = load_cluster("localhost-cpu")  # 2 cores [src: own-cpu-probe]
    assert cpu.node.host.cpu_cores == 2
    assert ho.core_share(cpu, 1) == 1.0 and ho.core_share(cpu, 2) == 1.0
    assert ho.core_share(cpu, 3) == pytest.approx(1.5) and ho.core_share(cpu, 8) == pytest.approx(4.0)
    assert ho.core_share(load_cluster("dgx-h100"), 8) == 1.0  # cores not stated: not modelled


def test_a_gpu_block_is_host_bound_only_when_its_kernels_are_shorter_than_a_launch():
    """On dgx-h100 (async, 5 µs per kernel [src: hta-launch-stats]): the tiny block run by the suite costs
    its kernel count × 5 µs; a llama2-7b block at micro-batch 1 costs its device time, unchanged by the term."""
    from simulator.workload import DtypePolicy, load_model
    from simulator.workload import ChunkSlice, ComputeOptions

    h100 = load_cluster("dgx-h100").device
    no_host = dataclasses.replace(h100, kernel_launch_overhead_us=0.0)
    for name, host_bound in (("tiny", True), ("llama2-7b", False)):
        if name == "tiny":
            _, workload, _, _ = _run("ddp-overlap")
            workload = dataclasses.replace(workload, dtype=DtypePolicy.BF16_MIXED)
        else:
            workload = load_model("llama2-7b")
        chunk = ChunkSlice(index=0, count=1, start=0, layers=workload.layers)
        load = workload.chunk_load(chunk, ComputeOptions(micro_batch=1))
        count, unit = next((c, u) for c, u in load.units if c == workload.layers)
        fwd, bwd, _ = unit_times(unit, h100, workload.dtype)
        fwd0, bwd0, _ = unit_times(unit, no_host, workload.dtype)
        if host_bound:
            assert fwd == pytest.approx(sum(len(k) for k in unit.fwd) * 5e-6, rel=1e-12) and fwd > fwd0
            assert bwd == pytest.approx(sum(len(k) for k in unit.bwd) * 5e-6, rel=1e-12) and bwd > bwd0
        else:
            assert (fwd, bwd) == (fwd0, bwd0)


# --- the optimizer's host calls ----------------------------------------------------------------------

def test_optimizer_tensors_are_the_executor_models_parameters():
    torch = pytest.importorskip("torch")  # noqa: F841
    from executor.model import build_gpt

    _, workload, layout, _ = _run("ddp-overlap")
    assert ho.optimizer_tensors(workload, layout, 0) == len(list(build_gpt(workload).parameters())) == 28


def test_adamw_on_the_cpu_costs_ten_calls_per_tensor_at_the_measured_call_overhead():
    """ddp-overlap on localhost-cpu: 28 tensors × 10 calls × 2.4 µs = 672 µs on top of the memory-bound update
    (inline, 2 processes on 2 cores: no sharing); on an async device the 9 foreach calls overlap it. torch DDP's
    bucket copies (simulator.compile.ddp_copies) come before it, kernels without host calls of their own."""
    from simulator.compile.ddp_copies import ddp_copy_s
    from simulator.strategy.formats import sync_dtype

    cluster, workload, layout, work = _run("ddp-overlap")
    copies_s = ddp_copy_s(cluster.device, workload.dtype, sync_dtype(workload.dtype, layout.strategy).grad_bytes,
                          workload.params, layout)
    _, _, _, bare = _run("ddp-overlap", _device(cluster, op_call_overhead_us=0.0))
    device_s = bare.stages[0].optimizer_s - copies_s
    assert device_s > 0 and copies_s > 0
    assert work.stages[0].optimizer_s == pytest.approx(device_s + 28 * 10 * 2.4e-6 + copies_s, rel=1e-9)
    for per_call_us in (5.0, 1e4):  # device-bound, then host-bound
        gpu = _device(cluster, kernel_dispatch=KernelDispatch.ASYNC, op_call_overhead_us=per_call_us)
        _, _, _, on_gpu = _run("ddp-overlap", gpu)
        assert on_gpu.stages[0].optimizer_s == pytest.approx(max(device_s, 9 * per_call_us * 1e-6) + copies_s,
                                                             rel=1e-9)


# --- time-sharing in a step --------------------------------------------------------------------------

def test_two_ranks_on_one_core_take_twice_as_long_to_compute_and_step():
    """ddp-overlap's 2 ranks on a host of 1 core: share 2, so every inline phase and the optimizer double;
    with cores not stated, nothing changes (the recorded VM's 2 cores give share 1 as well)."""
    two, _, _, a = _run("ddp-overlap")
    for cores, factor in ((1, 2.0), (None, 1.0)):
        other = dataclasses.replace(two, node=dataclasses.replace(
            two.node, host=dataclasses.replace(two.node.host, cpu_cores=cores)))
        _, _, _, b = _run("ddp-overlap", other)
        assert b.stages[0].optimizer_s == pytest.approx(factor * a.stages[0].optimizer_s, rel=1e-12)
        for ca, cb in zip(a.stages[0].chunks, b.stages[0].chunks):
            assert cb.fwd_s == pytest.approx(factor * ca.fwd_s, rel=1e-12)
            assert cb.bwd_s == pytest.approx(factor * ca.bwd_s, rel=1e-12)


# --- the cluster fields ------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_the_fields_round_trip(suffix, tmp_path):
    cluster = _device(load_cluster("dgx-h100"), op_call_overhead_us=7.5)
    loaded = load_cluster(str(save_cluster(cluster, tmp_path / f"c{suffix}")))
    assert loaded == cluster and loaded.device.kernel_dispatch is KernelDispatch.ASYNC
    cpu = load_cluster("localhost-cpu")
    assert load_cluster(str(save_cluster(cpu, tmp_path / f"cpu{suffix}"))).node.host.cpu_cores == 2


def test_a_file_without_the_fields_reads_as_before_and_bad_values_name_the_field():
    d = cluster_to_dict(load_cluster("localhost-cpu"))
    for key in ("kernel_dispatch", "op_call_overhead_us"):
        del d["device"][key]
    del d["host"]["cpu_cores"]
    old = cluster_from_dict(d)
    assert old.device.kernel_dispatch is KernelDispatch.INLINE and old.device.op_call_overhead_us == 0.0
    assert old.node.host.cpu_cores is None
    for section, key, value in (("device", "kernel_dispatch", "eager"), ("device", "op_call_overhead_us", -1),
                                ("host", "cpu_cores", 0)):
        bad = cluster_to_dict(load_cluster("localhost-cpu"))
        bad[section][key] = value
        with pytest.raises(SpecError, match=f"{section}.{key}"):
            cluster_from_dict(bad)


def test_dtensor_parameters_pay_the_dtensor_call_overhead_in_the_optimizer():
    """zero3 (FSDP2) and tp (torch tensor parallel) step DTensor parameters: 10 calls per tensor at
    2.4 + 17.7 µs on localhost-cpu [src: own-host-overhead-probe], all of zero3's 28 tensors, tp's 17 DTensors
    (simulator.compile.torch_tp.dtensor_tensors); DDP steps plain tensors."""
    from simulator.compile import torch_tp
    from simulator.strategy.framework import Framework

    for case, dtensor in (("zero3", True), ("tp", True), ("ddp-overlap", False)):
        cluster, workload, layout, work = _run(case)
        assert ho.dtensor_params(layout) is dtensor, case
        _, _, _, plain = _run(case, _device(cluster, dtensor_call_overhead_us=0.0))
        tensors = torch_tp.dtensor_tensors(workload, layout, 0) if case == "tp" else ho.optimizer_tensors(
            workload, layout, 0)
        assert tensors == {"zero3": 28, "tp": 17, "ddp-overlap": 28}[case]
        extra = tensors * 10 * 17.7e-6 if dtensor else 0.0
        assert work.stages[0].optimizer_s == pytest.approx(plain.stages[0].optimizer_s + extra, rel=1e-9), case
    _, _, zero3, _ = _run("zero3")
    assert zero3.framework is Framework.FSDP2


def test_the_estimate_says_when_it_is_host_bound():
    """Issue 9 §1: "a small model can be host-bound; say when". The suite's tiny model in bf16 on 8 H100s
    (kernels of a few µs against 5 µs launches) is host-bound in forward and backward, and its forward is
    then its kernel count × 5 µs; llama2-7b on the same GPUs is not; the CPU run is (inline dispatch)."""
    from simulator.analytical import estimate, estimate_work
    from simulator.workload import DtypePolicy, load_model

    _, tiny, _, cpu_work = _run("ddp-overlap")
    assert estimate_work(cpu_work).extras["host_bound"] == "forward+backward"
    strategy = dataclasses.replace(load_results(RUNS / "ddp-overlap.results.json").run.plan.strategy,
                                   dp=8, global_batch=16)
    h100 = load_cluster("dgx-h100", nodes=1)
    small = estimate(h100, dataclasses.replace(tiny, dtype=DtypePolicy.BF16_MIXED), strategy)
    assert small.extras["host_bound"] == "forward+backward"
    assert "host_bound" not in estimate(h100, load_model("llama2-7b"), strategy).extras


def test_an_offloaded_optimizer_pays_its_calls_on_an_inline_device_only():
    """zero3 with optimizer offload (FSDP2 CPUOffloadPolicy: torch AdamW over the 28 DTensor shards on the host
    CPU) on localhost-cpu: the step's optimizer time grows by 28 × 10 × (2.4 + 17.7) µs over the throughput term;
    on an async device (a GPU, whose op_call_overhead_us is a launch) nothing is added."""
    from simulator.strategy import Offload

    results = load_results(RUNS / "zero3.results.json")
    strategy = dataclasses.replace(results.run.plan.strategy, offload=Offload.OPTIMIZER)
    workload = run_workload(results)

    def optimizer_s(chosen):
        layout = build_layout(strategy, chosen, workload, gpus=results.run.plan._layout_gpus())
        return compile_step(chosen, workload, strategy, layout=layout).stages[0].optimizer_s

    cluster = run_cluster(results, "localhost-cpu")
    quiet = _device(cluster, op_call_overhead_us=0.0, dtensor_call_overhead_us=0.0)
    assert optimizer_s(cluster) == pytest.approx(optimizer_s(quiet) + 28 * 10 * (2.4 + 17.7) * 1e-6, rel=1e-9)
    gpu = _device(cluster, kernel_dispatch=KernelDispatch.ASYNC)
    assert optimizer_s(gpu) == pytest.approx(optimizer_s(_device(gpu, op_call_overhead_us=0.0)), rel=1e-12)
    assert ho.offloaded_optimizer_host_s(gpu.device, 28, dtensor=True) == 0.0


def test_optimizer_calls_follow_the_implementation_not_the_device():
    """The host calls of one AdamW step are the implementation's [src: torch-adam-impl]: 10 per tensor in the
    for-loop, 9 foreach calls, 2 fused (the step counters' ``_foreach_add_`` and ``_fused_adamw_``), whatever
    the device; a plan asking fused Adam on the CPU (localhost-cpu, inline dispatch) is charged 2 calls."""
    from simulator.strategy.kinds import OptimizerImpl

    assert ho.optimizer_calls(OptimizerImpl.FOR_LOOP, 28) == 280
    assert ho.optimizer_calls(OptimizerImpl.FOR_LOOP, 0) == 9  # a flat buffer: one pass per operator
    assert ho.optimizer_calls(OptimizerImpl.FOREACH, 28) == 9
    assert ho.optimizer_calls(OptimizerImpl.FUSED, 28) == 2
    cluster, workload, layout, _ = _run("ddp-overlap")

    def optimizer_s(chosen, impl):
        s = dataclasses.replace(layout.strategy, optimizer_impl=impl)
        lay = build_layout(s, chosen, workload, gpus=layout.world_size)
        return compile_step(chosen, workload, s, layout=lay).stages[0].optimizer_s

    quiet = _device(cluster, op_call_overhead_us=0.0)
    for impl, calls in ((OptimizerImpl.FUSED, 2), (OptimizerImpl.FOR_LOOP, 28 * 10)):
        assert optimizer_s(cluster, impl) == pytest.approx(optimizer_s(quiet, impl) + calls * 2.4e-6, rel=1e-9)
    assert ho.offloaded_optimizer_host_s(cluster.device, 28, impl=OptimizerImpl.FUSED) == pytest.approx(2 * 2.4e-6)
