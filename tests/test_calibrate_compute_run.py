"""``trainplan calibrate --compute`` for real: the measuring code on a tiny grid (a few seconds), its report and
cluster, and the CLI, which checks its inputs before measuring. The fields' derivation and how the compute model
uses them: tests/test_calibrate_compute.py.
"""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest
import torch

from executor.calibrate_calls import step_call_overheads
from executor.calibrate_compute import ComputeGrid, calibrate_compute, host_cores, tiny_model
from executor.calibrate_host import tp_dtensor_call_us
from executor.compute_bench import MemoryKernel
from executor.compute_grid import executed
from executor.step_launches import STEP_PROBE_LAUNCHES
from simulator.cluster.io import load_cluster, save_cluster
from simulator.compute import achievable_hbm_Bps, layer_times, total_time
from simulator.errors import SpecError
from simulator.gemm_shape import GemmShape
from simulator.workload import DtypePolicy, load_model
from trainplan.__main__ import main


TINY_SHAPES = (GemmShape(32, 32, 32), GemmShape(64, 64, 64))
TINY_ELEMENTS = (1024,)


@dataclasses.dataclass(frozen=True)
class CliRun:
    """One ``calibrate --compute`` of llama2-7b through the CLI on the tiny grid (every probe measures for real: tens
    of seconds of CPU): its file, its JSON, and what :func:`calibrate_compute` returned to it."""
    out: object
    printed: dict
    cluster: object
    report: object
    calls: tuple


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """The CLI test and the function test's llama2-7b case check different things of the same measurement, so they
    share it: the CLI's defaults (llama2-7b, localhost-cpu, --nproc 2, threads from it) are that case's arguments,
    and its default grid is cut to that case's two squares and one memory size (the real :func:`default_grid` still
    builds the block and the micro-batch; its shapes are tested in tests/test_calibrate_compute.py)."""
    import contextlib
    import io

    import executor.calibrate_compute as cc

    real_function, real_grid, calls = cc.calibrate_compute, cc.default_grid, []

    def tiny_grid(spec, dtype, micro_batch=2):
        return dataclasses.replace(real_grid(spec, dtype, micro_batch), shapes=TINY_SHAPES, elements=TINY_ELEMENTS)

    def spy(*args, **kwargs):
        result = real_function(*args, **kwargs)
        calls.append((args, kwargs, result))
        return result

    out, stdout = tmp_path_factory.mktemp("cli") / "cpu.yaml", io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(stdout):
        patch.setattr(cc, "default_grid", tiny_grid)
        patch.setattr(cc, "calibrate_compute", spy)
        code = main(["calibrate", "--compute", "--out", str(out), "--repeats", "3", "--warmup", "1", "--json"])
    assert code == 0 and len(calls) == 1
    (args, kwargs, (cluster, report)), = calls
    return CliRun(out=out, printed=json.loads(stdout.getvalue()), cluster=cluster, report=report,
                  calls=((args, kwargs),))


@pytest.mark.parametrize("model", ["llama2-7b", "gpt3-125m"])
def test_calibrate_measures_a_tiny_grid_and_keeps_the_network(model, tmp_path, cli_run):
    base = load_cluster("localhost-cpu")
    block = tiny_model(load_model(model), DtypePolicy.FP32)
    grid = ComputeGrid(shapes=TINY_SHAPES, elements=TINY_ELEMENTS, block=block, micro_batch=2)
    if model == "llama2-7b":  # the CLI's run (cli_run): the same arguments, checked here
        (args, kwargs), = cli_run.calls
        assert args == (base, load_model(model)) and kwargs["nproc"] == 2 and kwargs["thread_count"] is None
        assert (kwargs["repeats"], kwargs["warmup"], kwargs["dtype"], kwargs["backend"]) == (
            3, 1, DtypePolicy.FP32, "gloo")
        assert tuple(row.shape for row in cli_run.report.gemms) == grid.shapes
        assert {row.elements for row in cli_run.report.memory} == set(grid.elements)
        cluster, report = cli_run.cluster, cli_run.report
    else:
        cluster, report = calibrate_compute(base, load_model(model), grid=grid, repeats=3, warmup=1, nproc=2)
    # the table prints a GPU-shaped report too (nccl: no host probes, no rank step, no tight-loop figures)
    from trainplan.cmd_calibrate import _print_compute
    _print_compute(dataclasses.replace(report, tp_modules=None, ddp=None, adamw=None, checkpoint=None, fsdp2=None,
                                       pipeline=None, fsdp2_zero2=None, rank_steps=None, block_call_us=None,
                                       step_checkpoint=None))
    assert report.threads == max(1, (torch.multiprocessing.cpu_count()) // 2)
    assert len(report.gemms) == 2 and len(report.memory) == len(MemoryKernel)
    assert len(cluster.device.gemm_efficiency.points) == 2
    assert cluster.device.kernel_launch_overhead_us >= 0
    steps = report.rank_steps  # the per-operator fields: the whole model in a rank's step, not the block's loop
    expected = step_call_overheads(cluster.device, executed(block), 2, steps.warm_forward_s, steps.backward_s)
    first = report.step_launches.launches[0]  # the first launch's own figures, by the step's formula
    assert (first.forward_us, first.backward_us) == pytest.approx(
        (expected.kernel_launch_overhead_us, expected.backward_call_overhead_us), rel=1e-12)
    # written: the median over the probe's independent launches (cal30: one launch read 17-24 % low)
    launches = report.step_launches
    assert len(launches.launches) == STEP_PROBE_LAUNCHES
    assert (cluster.device.kernel_launch_overhead_us, cluster.device.backward_call_overhead_us,
            cluster.device.op_call_overhead_us) == pytest.approx(tuple(statistics.median(launches.values(name))
                                                                       for name in ("forward_us", "backward_us",
                                                                                    "op_call_us")), rel=1e-12)
    assert steps.processes == 2 and len(report.block_call_us) == 3
    assert "calibrate --compute" in cluster.device.gemm_efficiency.source
    # the step less its update, per call; the CPU runs torch's for-loop AdamW (no foreach kernels on an inline
    # device), whose unfused passes move 80 B per fp32 parameter (simulator/compile/offload_part.py), at the
    # device's achievable bandwidth. (28 B, one fused pass, made this check pass only while both sides were 0.)
    adamw = report.adamw
    update_s = adamw.params * 80 / achievable_hbm_Bps(cluster.device)
    assert adamw.tensors == (15 if model == "llama2-7b" else 28)  # 2 blocks' tensors + embeddings, final norm
    in_step = report.rank_steps.optimizer_timing  # the AdamW step as a rank's step runs it, not its tight loop
    assert first.op_call_us == pytest.approx(max(0.0, (in_step.median_s - update_s) / (10 * adamw.tensors) * 1e6))
    assert report.block_call_us[2] == pytest.approx(
        max(0.0, (adamw.step.median_s - update_s) / (10 * adamw.tensors) * 1e6))
    tp = report.tp_modules  # the tp = 2 tiny model (2 blocks): 4 modules per block + embedding + output layer
    assert tp.modules == 10
    # the medians (tp21: a step's phases pay the typical module, docs/validation.md "tp21")
    assert tp.forward_module_us == pytest.approx(
        max(0.0, (tp.tp_forward.median_s - tp.plain_forward.median_s) / 10 * 1e6))
    assert tp.forward_module_us + tp.backward_module_us == pytest.approx(max(
        tp.forward_module_us, (tp.tp_step.median_s - tp.plain_step.median_s) / 10 * 1e6))
    host = dataclasses.replace(base.node.host, cpu_cores=host_cores(),  # this machine's cores and tp terms
                               tp_forward_module_us=tp.forward_module_us, tp_backward_module_us=tp.backward_module_us,
                               # DDP's terms from its steps in the rank-step probe, the bucket passes left out
                               ddp_forward_call_us=steps.ddp_forward_call_us,
                               ddp_sync_backward_us=max(0.0, steps.ddp_sync_extra_s - report.ddp.bucket_passes_s) * 1e6,
                               # the checkpoint's terms from checkpointed blocks in a rank's DDP step
                               checkpoint_forward_region_us=report.step_checkpoint.forward_region_us,
                               checkpoint_backward_region_us=report.step_checkpoint.backward_region_us,
                               fsdp2_forward_module_us=report.fsdp2.forward_module_us,
                               fsdp2_backward_module_us=report.fsdp2.backward_module_us,
                               fsdp2_zero2_backward_module_us=report.fsdp2_zero2.backward_module_us,
                               pipeline_action_us=report.pipeline.action_us,
                               pipeline_p2p_post_us=report.pipeline.post_us,
                               pipeline_chunk_us=report.pipeline.chunk_us,  # the stages' bookkeeping
                               # the loop's own time per step, and the first micro-batch's: launches' medians
                               step_loop_us=statistics.median(launches.values("step_loop_us")),
                               first_microbatch_cold_us=statistics.median(launches.values("first_cold_us")),
                               # FSDP2's loop from the probe's FSDP2 steps (fsdp29): the switch and zero_grad
                               fsdp2_sync_switch_us=steps.fsdp2_sync_switch_us,
                               fsdp2_zero_grad_us=steps.fsdp2_zero_grad_us,
                               # torch TP's DTensor AdamW calls, from the tp probe's steps (val31)
                               tp_dtensor_call_us=tp_dtensor_call_us(cluster.device, tp))
    assert tp.optimizer.dtensor_tensors > 0 and host.tp_dtensor_call_us is not None
    # the rank-jitter term is not calibrated (executor.calibrate_host.with_step_loop): the written field stays 0
    from simulator.compute import Phase
    from simulator.workload import Recompute
    # the model's recompute of a block on the calibrated device, left out of the checkpoint's backward term
    assert report.step_checkpoint.recompute_region_s == pytest.approx(total_time(layer_times(
        executed(block), cluster.device, 2, recompute=Recompute.FULL), Phase.RECOMPUTE), rel=1e-12)
    assert report.step_checkpoint.blocks == block.layers
    assert report.fsdp2.dp == 2 and report.fsdp2.modules == block.layers + 1  # blocks and the root, fake 2-rank group
    assert report.fsdp2.reshard_after_forward and not report.fsdp2_zero2.reshard_after_forward  # ZeRO-3, ZeRO-2
    # the DTensor surcharge per optimizer call, measured through FSDP2's shards in a rank's FSDP2 ZeRO-3 step (val27:
    # the fake group's tight loop, executor.fsdp2_host_bench, stays in the report and read 0.6x the step's figure)
    assert steps.dtensor_call_us is not None and len(steps.fsdp2_optimizer) == 2
    assert cluster.device.dtensor_call_overhead_us == steps.dtensor_call_us
    assert report.fsdp2_optimizer.dtensor_call_us >= 0
    assert report.fsdp2_optimizer.tensors == (15 if model == "llama2-7b" else 28)
    # 2 processes, GPipe over 4 micro-batches: 19 actions per rank (tests/test_pipeline_runtime.py)
    pipe = report.pipeline
    assert pipe.actions == (19, 19) and pipe.action_us == pytest.approx(
        sum(o.median_s for o in pipe.outside) / 38 * 1e6, rel=1e-12)
    assert pipe.p2p == (8, 8) and pipe.post_us == pytest.approx(sum(o.median_s for o in pipe.post) / 16 * 1e6,
                                                                 rel=1e-12)
    assert pipe.compute == (8, 8) and pipe.chunk_us == pytest.approx(
        max(0.0, sum(o.median_s for o in pipe.chunk) / 16 * 1e6), rel=1e-12)
    ck = report.checkpoint  # per checkpointed block, the backward less the model's own recompute of the block
    assert ck.regions == 2 and ck.recompute_region_s > 0
    assert ck.forward_region_us == pytest.approx(max(0.0, (ck.checkpointed_forward.p10_s - ck.plain_forward.p10_s)
                                                     / 2 * 1e6))
    assert ck.backward_region_us == pytest.approx(max(0.0, (ck.checkpointed_step.p10_s - ck.plain_step.p10_s) / 2 * 1e6
                                                      - ck.forward_region_us - ck.recompute_region_s * 1e6))
    ddp = report.ddp  # DDP's terms: the wrapped model's extra time per forward, and per synchronising backward
    assert ddp.forward_call_us == pytest.approx(max(0.0, (ddp.ddp_forward.p10_s - ddp.plain_forward.p10_s) * 1e6))
    # the reducer's bucket passes are the step's kernel (simulator.compile.ddp_copies), not host time: subtracted
    from executor.calibrate_host import ddp_bucket_passes_s
    assert ddp.bucket_passes_s == pytest.approx(ddp_bucket_passes_s(cluster.device, block))
    assert ddp.bucket_passes_s > 0
    assert ddp.forward_call_us + ddp.sync_backward_us == pytest.approx(max(
        ddp.forward_call_us, (ddp.ddp_step.p10_s - ddp.plain_step.p10_s - ddp.bucket_passes_s) * 1e6))
    assert cluster.node == dataclasses.replace(base.node, host=host)
    assert cluster.comm == base.comm and cluster.name == "localhost-cpu-calibrated"
    assert load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml"))) == cluster


def test_cli_compute_writes_a_file_that_loads(cli_run):
    printed = cli_run.printed  # the CLI ran once for the module (cli_run): its --json output and its --out file
    loaded = load_cluster(str(cli_run.out))
    assert loaded.device.kernel_launch_overhead_us == pytest.approx(printed["kernel_launch_overhead_us"])
    assert loaded.device.backward_call_overhead_us == pytest.approx(printed["backward_call_overhead_us"])
    assert printed["rank_steps"]["processes"] == 2 and len(printed["rank_steps"]["forward"]) == 2
    assert len(printed["rank_steps"]["first_cold"]) == 2
    assert "save_steps" not in printed and "step_after_save" not in loaded.source  # cal19: retired
    assert loaded.node.host.checkpoint_forward_region_us == pytest.approx(
        printed["step_checkpoint"]["checkpoint_forward_region_us"])
    assert loaded.node.host.step_loop_us == pytest.approx(printed["step_launches"]["step_loop_us"]["median"])
    assert printed["step_launches"]["step_loop_us"]["per_launch"][0] == pytest.approx(max(0.0, statistics.fmean(
        t["median_s"] for t in printed["rank_steps"]["outside"]) * 1e6))
    assert loaded.device.kernel_launch_overhead_us == pytest.approx(printed["step_launches"]["forward_us"]["median"])
    assert [list(p) for p in loaded.device.gemm_efficiency.points] == printed["gemm_efficiency"]
    assert loaded.node.host.tp_forward_module_us == pytest.approx(printed["tp_modules"]["tp_forward_module_us"])
    assert loaded.node.host.tp_backward_module_us == pytest.approx(printed["tp_modules"]["tp_backward_module_us"])
    steps = printed["rank_steps"]  # DDP's terms: from its steps in the probe (the tight loop's stay in "ddp")
    assert len(steps["ddp_forward"]) == len(steps["ddp_last_backward"]) == len(steps["last_backward"]) == 2
    assert loaded.node.host.ddp_forward_call_us == pytest.approx(steps["ddp_forward_call_us"])
    assert loaded.node.host.ddp_sync_backward_us <= steps["ddp_sync_extra_s"] * 1e6 + 1e-9
    assert loaded.node.host.fsdp2_forward_module_us == pytest.approx(printed["fsdp2"]["fsdp2_forward_module_us"])
    assert loaded.node.host.pipeline_action_us == pytest.approx(printed["pipeline"]["pipeline_action_us"])
    assert loaded.node.host.pipeline_action_us > 0
    assert loaded.node.host.pipeline_p2p_post_us == pytest.approx(printed["pipeline"]["pipeline_p2p_post_us"])
    assert loaded.node.host.pipeline_p2p_post_us > 0
    assert loaded.node.host.pipeline_chunk_us == pytest.approx(printed["pipeline"]["pipeline_chunk_us"])
    assert loaded.node.host.fsdp2_zero2_backward_module_us == pytest.approx(
        printed["fsdp2_zero2"]["fsdp2_zero2_backward_module_us"])


@pytest.mark.parametrize("argv, needle", [
    (["--out", "x.txt"], "out"),
    (["--out", "{tmp}/c.yaml", "--threads", "0"], "threads"),
    (["--out", "{tmp}/c.yaml", "--model", "nope"], "model"),
    (["--out", "{tmp}/c.yaml", "--precision", "fp16"], "precision"),
])
def test_cli_compute_refuses_bad_input_in_one_line(argv, needle, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        code = main(["calibrate", "--compute", *argv])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: nccl would measure it")
def test_cli_compute_nccl_without_a_gpu_is_one_line_exit_2(tmp_path, capsys):
    assert main(["calibrate", "--compute", "--backend", "nccl", "--out", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "backend" in err and not (tmp_path / "c.yaml").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: nccl would measure it")
def test_the_function_refuses_nccl_without_a_gpu_before_measuring():
    with pytest.raises(SpecError, match="backend"):
        calibrate_compute(load_cluster("localhost-cpu"), load_model("llama2-7b"), backend="nccl")
