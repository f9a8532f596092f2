"""torch's own tensor parallelism's collectives (simulator/compile/torch_tp.py) against what DTensor issues in the
executor's plan, counted on torch's fake 2-rank group, and where the compiled step charges them."""

import collections
import dataclasses
from pathlib import Path

import pytest

from executor.compute_grid import tiny_model
from simulator.collectives.base import Op
from simulator.compile import compile_step, torch_tp
from simulator.compile.costs import CostCache
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.strategy.framework import Framework
from simulator.validate import run_cluster, run_workload
from simulator.workload.kinds import DtypePolicy
from simulator.workload.registry import load_model

SPEC = dataclasses.replace(tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32, tp=2), dropout=0.0)
RUNS = Path(__file__).parent / "data" / "suite_default"
FUNCOL_OPS = {"all_reduce": Op.ALL_REDUCE, "all_gather_single": Op.ALL_GATHER,
              "reduce_scatter_single": Op.REDUCE_SCATTER}


def _dtensor_counts(sp: bool, monkeypatch) -> dict[str, collections.Counter]:
    """Functional collectives the executor's tp model issues per forward, backward and AdamW step (a fake group)."""
    import torch
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh

    from executor.fsdp2_host_bench import fake_group
    from executor.model import build_gpt
    from executor.reference import make_optimizer
    from executor.strategies.tensor import parallelize_gpt

    phase, counts = ["forward"], collections.defaultdict(collections.Counter)
    for name, op in FUNCOL_OPS.items():
        def counted(*args, _original=getattr(funcol, name), _op=op, **kwargs):
            counts[phase[0]][_op] += 1
            return _original(*args, **kwargs)
        monkeypatch.setattr(funcol, name, counted)
    with fake_group(2):
        model = parallelize_gpt(build_gpt(SPEC, 0), init_device_mesh("cpu", (2,)), sp)
        optimizer = make_optimizer(model.parameters())
        x = torch.randint(0, SPEC.vocab, (2, SPEC.seq_len))
        loss = model(x, x)
        phase[0] = "backward"
        loss.backward()
        phase[0] = "optimizer"
        optimizer.step()
        from torch.distributed.tensor import DTensor
        counts["dtensor parameters"][None] = sum(isinstance(p, DTensor) for p in model.parameters())
    return counts


def _layout(sp: bool):
    results = load_results(RUNS / "tp.results.json")
    cluster = run_cluster(results, "localhost-cpu")
    workload, plan = run_workload(results), results.run.plan
    strategy = dataclasses.replace(plan.strategy, sequence_parallel=sp)
    return cluster, workload, strategy, build_layout(strategy, cluster, workload, gpus=plan._layout_gpus())


@pytest.mark.parametrize("sp", [False, True])
def test_calls_are_what_dtensor_issues(sp, monkeypatch):
    counted = _dtensor_counts(sp, monkeypatch)
    cluster, workload, _, layout = _layout(sp)
    fwd, bwd = torch_tp.calls(CostCache(cluster), (0, 1), 8192, 16384, sp=sp, layers=SPEC.layers, first=True,
                              last=True, full_recompute=False, concurrent=1)
    assert collections.Counter(c.op for c in fwd) == counted["forward"]
    assert collections.Counter(c.op for c in bwd) == counted["backward"]
    # AdamW's reads of the sequence-parallel norms' Partial gradients: 3 per tensor, 4 tensors per block
    assert counted["optimizer"][Op.ALL_REDUCE] == (torch_tp.ADAMW_GRAD_READS * 4 * SPEC.layers if sp else 0)
    assert torch_tp.sp_norm_tensors(workload, layout, 0) == 4 * SPEC.layers
    assert torch_tp.dtensor_tensors(workload, layout, 0) == counted["dtensor parameters"][None]  # 17 (25 with SP) of 28


def test_the_optimizer_prices_only_dtensor_calls_at_the_dtensor_rate():
    """torch's per-tensor AdamW: 10 calls per tensor; the DTensor surcharge on the DTensors' calls only."""
    from simulator.cluster.io import load_cluster
    from simulator.host_overhead import optimizer_stream
    from simulator.strategy.kinds import OptimizerImpl

    device = load_cluster("localhost-cpu").device
    loop = OptimizerImpl.FOR_LOOP
    some = optimizer_stream(device, 0.0, 28, dtensor=True, impl=loop, dtensor_tensors=17).host_s
    assert some == pytest.approx((280 * device.op_call_overhead_us + 170 * device.dtensor_call_overhead_us) * 1e-6)
    every = optimizer_stream(device, 0.0, 28, dtensor=True, impl=loop).host_s  # FSDP2: every tensor
    assert every == pytest.approx(280 * (device.op_call_overhead_us + device.dtensor_call_overhead_us) * 1e-6)
    assert optimizer_stream(device, 0.0, 28, dtensor=False, impl=loop, dtensor_tensors=17).host_s == pytest.approx(
        280 * device.op_call_overhead_us * 1e-6)


def test_the_step_charges_them_under_torch_only():
    """The suite's tp case: the logits' all-gather is in the forward list under torch, not under Megatron-LM (its
    loss is vocabulary-parallel); with sequence parallelism the optimizer holds the norms' all-reduces."""
    cluster, workload, strategy, layout = _layout(False)
    chunk = compile_step(cluster, workload, strategy, layout=layout).stages[0].chunks[0]
    assert [c.op for c in chunk.tp_fwd].count(Op.ALL_GATHER) == 1 and len(chunk.tp_bwd) == 5
    megatron = dataclasses.replace(layout, framework=Framework.MEGATRON)
    assert not torch_tp.applies(megatron) and torch_tp.applies(layout)
    cluster, workload, sp_strategy, sp_layout = _layout(True)
    plain_opt = compile_step(cluster, workload, strategy, layout=layout).stages[0].optimizer_s
    sp_opt = compile_step(cluster, workload, sp_strategy, layout=sp_layout).stages[0].optimizer_s
    one = CostCache(cluster).collective((0, 1), Op.ALL_REDUCE, workload.hidden * 4, "auto", False)[0]
    norms = 4 * SPEC.layers  # DTensors under SP only: their 10 AdamW calls each pay the DTensor surcharge
    share = max(1.0, 2 / cluster.node.host.cpu_cores)
    extra = torch_tp.ADAMW_GRAD_READS * norms * one + norms * 10 * cluster.device.dtensor_call_overhead_us * 1e-6 * share
    assert sp_opt - plain_opt == pytest.approx(extra, rel=1e-9)
