"""The planner's second phase (planner.variants): gradient sync (all-reduce algorithm, bucket,
parameter server) and offload ranked for the best bases, the dominance that drops algorithms
``auto`` already chooses among, pins that restrict them, and ``--explain`` on where they lose."""

from __future__ import annotations

from dataclasses import replace

from pathlib import Path

import pytest

import planner
from argv import merged
from planner.explain import explain
from planner.variants import ALGORITHMS, dominated_algorithms, offload_values
from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.strategy import AllReduceSync, Offload, ParamServerSync, Strategy, ZeroStage
from simulator.strategy.sync import AllReduceAlgorithm
from simulator.workload import get_preset
from trainplan.__main__ import main

MODEL = get_preset("gpt3-125m").with_seq(512)
_PRESET = load_cluster("dgx-h100", nodes=2)
CLUSTER = replace(_PRESET, node=replace(_PRESET.node, host=replace(_PRESET.node.host, cpu_adam_params_per_s=0.0)))
"""Two DGX H100 nodes without a CPU-Adam figure (the presets carry one now), so offload is not searched."""
BASE = load_cluster("dgx-h100", nodes=1)
HOST = replace(BASE, node=replace(BASE.node, host=replace(BASE.node.host, cpu_adam_params_per_s=1e9)))  # test figure
BIG = get_preset("llama2-13b").with_seq(4096)


@pytest.fixture(scope="module")
def result():
    return planner.plan(MODEL, CLUSTER, gpus=16, global_batch=32, refine=0)


@pytest.fixture(scope="module")
def offload_result():
    return planner.plan(BIG, HOST, gpus=8, global_batch=16, refine=0)


def test_parameter_server_and_buckets_are_in_the_default_space(result):
    syncs = [s.dp_sync for s in result.frame["strategy"]]
    ps = [s for s in result.frame["strategy"] if isinstance(s.dp_sync, ParamServerSync)]
    assert ps and all(s.zero is ZeroStage.ZERO0 and s.dp_sync.shards <= s.dp for s in ps)
    assert {p.dp_sync.mode.value for p in ps} == {"sync", "async"}
    assert len({d.bucket_bytes for d in syncs if isinstance(d, AllReduceSync)}) >= 3
    assert result.counts.variants > 0
    c = result.counts.to_dict()
    assert c["enumerated"] == c["invalid"] + c["infeasible"] + c["ranked"]


def test_algorithms_auto_chooses_among_are_dropped_as_dominated(result):
    """On an NCCL cluster auto picks ring or tree per all-reduce call: neither is ranked, and each is
    indeed never faster than auto in the closed form (checked on the best layouts)."""
    dominated = dominated_algorithms(CLUSTER, ZeroStage.ZERO1)
    assert dominated == {AllReduceAlgorithm.RING, AllReduceAlgorithm.TREE}
    algos = {s.dp_sync.algorithm for s in result.frame["strategy"] if isinstance(s.dp_sync, AllReduceSync)}
    assert not algos & dominated and AllReduceAlgorithm.HIERARCHICAL in algos
    for s in list(result.frame["strategy"][:40]):
        if isinstance(s.dp_sync, AllReduceSync) and s.zero < ZeroStage.ZERO2 and s.dp > 1:
            auto = estimate(CLUSTER, MODEL, replace(s, dp_sync=replace(s.dp_sync, algorithm=AllReduceAlgorithm.AUTO)))
            for a in dominated:
                fixed = estimate(CLUSTER, MODEL, replace(s, dp_sync=replace(s.dp_sync, algorithm=a)))
                assert auto.step_time_s <= fixed.step_time_s * (1 + 1e-12)


def test_offload_searched_where_the_cluster_times_it(offload_result):
    assert offload_values(CLUSTER) == ()  # no CPU Adam throughput, nothing to time the host step with
    assert offload_values(_PRESET) == (Offload.OPTIMIZER, Offload.PARAMS, Offload.NVME)  # the preset has one
    assert offload_values(HOST) == (Offload.OPTIMIZER, Offload.PARAMS, Offload.NVME)
    frame = offload_result.frame
    off = frame[[s.offload is not Offload.NONE for s in frame["strategy"]]]
    assert len(off) and (frame["memory_bytes"] <= HOST.device.memory_bytes).all()
    assert all(s.zero is ZeroStage.ZERO3 or s.offload is Offload.OPTIMIZER for s in off["strategy"])


def test_explain_says_where_the_classic_designs_lose(result, offload_result):
    lines = explain(result.frame, result.notes)
    ps = next(line for line in lines if "parameter server plan" in line)
    assert "slower" in ps and " s ps" in ps or "bubble" in ps
    assert any("cpu_adam_params_per_s" in line for line in lines)  # why offload was not searched
    assert any("ring, tree not ranked" in line for line in lines)
    off = next(line for line in explain(offload_result.frame, offload_result.notes) if "offload plan" in line)
    assert "slower" in off and "optimizer" in off


@pytest.mark.parametrize("pins, ok", [
    ({"offload": (Offload.NONE,)}, lambda s: s.offload is Offload.NONE),
    ({"dp_sync": (planner.variants.DpSyncKind.ALL_REDUCE,)}, lambda s: isinstance(s.dp_sync, AllReduceSync)),
    ({"allreduce_algorithm": (AllReduceAlgorithm.RING,)},
     lambda s: not isinstance(s.dp_sync, AllReduceSync) or s.dp_sync.algorithm is AllReduceAlgorithm.RING),
    ({"bucket_bytes": (25 * 2**20,)}, lambda s: not isinstance(s.dp_sync, AllReduceSync)
     or s.dp_sync.bucket_bytes == 25 * 2**20)])
def test_pins_restrict_the_variants(pins, ok):
    frame = planner.plan(BIG, HOST, gpus=8, global_batch=16, refine=0, pins=pins).frame
    assert len(frame) and all(ok(s) for s in frame["strategy"])


def test_a_pinned_offload_the_cluster_cannot_time_is_an_error():
    with pytest.raises(SpecError) as err:
        planner.plan(MODEL, CLUSTER, gpus=16, global_batch=32, refine=0, pins={"offload": (Offload.OPTIMIZER,)})
    assert err.value.field == "offload" and "cpu_adam_params_per_s" in err.value.problem


@pytest.mark.parametrize("extra, needle", [
    (["--cluster", str(Path(__file__).parents[1] / "examples" / "my-cluster.yaml"), "--offload", "optimizer"],
     "--offload: optimizer: cluster 'my-cluster' gives no CPU Adam throughput"),  # the presets now give one
    (["--dp-sync", "bogus"], "--dp-sync: unknown gradient sync 'bogus'; known: all-reduce, param-server"),
    (["--dp-sync", "all-reduce", "--param-server", "sync"], "--dp-sync: the parameter-server flags"),
    (["--offload", "params", "--no-offload"], "--no-offload: given after --offload")])
def test_cli_sync_and_offload_pins_errors_are_one_line(capsys, extra, needle):
    argv = ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--seq", "512",
            "--quiet", "--refine", "0"]
    try:
        code = main(merged(argv, extra))
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_cli_no_offload_and_dp_sync_pins(capsys):
    import json

    argv = ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "32", "--seq", "512",
            "--quiet", "--refine", "0", "--json", "--top", "50", "--no-offload", "--dp-sync", "param-server"]
    assert main(argv) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    assert top and all(r["strategy"]["dp_sync"] == "param-server" and r["strategy"]["offload"] == "none" for r in top)


def test_a_job_smaller_than_a_node():
    """4 of a DGX H100's 8 GPUs: every ranked plan uses 4 workers, the ranking equals the scalar
    estimate of the same layout on those GPUs, the plan file keeps gpus 4, and no parameter server
    (which uses whole worker nodes) is proposed."""
    from simulator.compile import compile_step
    from simulator.analytical import estimate_work
    from simulator.strategy import build_layout

    result = planner.plan(MODEL, BASE, gpus=4, global_batch=16, refine=1)
    frame = result.frame
    assert len(frame) and all(s.dp * s.tp * s.pp == 4 for s in frame["strategy"])
    assert not any(isinstance(s.dp_sync, ParamServerSync) for s in frame["strategy"])
    for _, row in frame.iloc[1:40:7].iterrows():
        s = row["strategy"]
        work = compile_step(BASE, MODEL, s, layout=build_layout(s, BASE, MODEL, gpus=4))
        assert row["step_time_s"] == pytest.approx(estimate_work(work).step_time_s, rel=1e-9)
    assert result.best.gpus == 4 and result.best.layout().world_size == 4
    with pytest.raises(SpecError) as err:
        planner.plan(MODEL, CLUSTER, gpus=12, global_batch=24, refine=0)
    assert err.value.field == "gpus" and "whole nodes" in err.value.problem


def test_dedicated_server_nodes_are_searched_when_pinned(capsys):
    """--server-nodes 1 sizes the cluster with one node beside the workers; every plan uses it."""
    import json

    argv = ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "32", "--seq", "512",
            "--quiet", "--refine", "0", "--json", "--top", "30", "--param-server", "sync,async", "--server-nodes", "1"]
    assert main(argv) == 0
    top = json.loads(capsys.readouterr().out)["top"]
    assert top and all(r["strategy"]["ps_server_nodes"] == 1 and r["strategy"]["dp_sync"] == "param-server"
                       for r in top)
    assert {r["strategy"]["ps_mode"] for r in top} == {"sync", "async"}
    assert main([*argv[:-1], "1,2"]) == 2
    assert "--server-nodes: give one value" in capsys.readouterr().err


def test_sync_variants_of_every_base_within_reach_are_ranked(monkeypatch):
    """With the variants of only the best base ranked, the bases whose step less what a sync can change
    (planner.variants.sync_candidates) beats the best get theirs too: the best plan then equals the
    one found when every base's gradient-sync variants are ranked (placement and offload pinned, so
    that only sync variants are in play). On two A100 nodes behind a 4 GB/s network (6 GB/s before the compute terms of 2026-11-25, fid9) the winner is the
    hierarchical all-reduce of a base that is not the first phase's best; without the bases within
    reach it is missed."""
    import planner.search as search_module
    import planner.variants as variants_module

    a100 = load_cluster("dgx-a100", nodes=2)
    slow = replace(a100, network=replace(a100.network, link=replace(a100.network.link, bw_GBps=4.0)))
    pins = {"placement": (Strategy(global_batch=1).placement,), "offload": (Offload.NONE,),
            "zero": (ZeroStage.ZERO0, ZeroStage.ZERO1)}
    run = lambda: planner.plan(MODEL, slow, gpus=16, global_batch=64, refine=0, pins=pins)  # noqa: E731
    monkeypatch.setattr(variants_module, "VARIANT_BASES", 10**6)
    every = run()
    monkeypatch.setattr(variants_module, "VARIANT_BASES", 1)
    reach = run()
    assert reach.counts.variants < every.counts.variants / 4
    assert reach.frame["strategy"][0] == every.frame["strategy"][0]
    assert reach.frame["step_time_s"][0] == every.frame["step_time_s"][0]
    assert reach.frame["strategy"][0].dp_sync.algorithm is AllReduceAlgorithm.HIERARCHICAL
    monkeypatch.setattr(search_module, "sync_candidates", lambda frame: [])
    assert run().frame["step_time_s"][0] > every.frame["step_time_s"][0]
