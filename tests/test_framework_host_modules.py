"""Frameworks' per-module host time (simulator/framework_host.py): what FSDP2, torch tensor parallelism, DDP's
wrapper and torch's activation checkpointing each add per module, region or call to a step on localhost-cpu, and
when each applies. The stream formula, the optimizer's calls and time-sharing: tests/test_host_overhead.py.

Hand-worked figures from the measured per-module times of the localhost-cpu preset."""

from __future__ import annotations

import dataclasses

import pytest

from simulator import framework_host as fh
from simulator.cluster.io import cluster_to_dict, load_cluster, save_cluster
from simulator.cluster._schema import cluster_from_dict
from simulator.compile import compile_step
from simulator.errors import SpecError
from simulator.run_results import load_results
from simulator.strategy import build_layout
from simulator.validate import run_cluster, run_workload
from suite_quick_runs import RUNS, run_case as _run


def test_fsdp2_adds_its_per_module_host_time_to_forward_and_backward():
    """zero3 (FSDP2, one stage of 2 blocks + the root: 3 modules) on localhost-cpu: forward +3 × 162 µs and
    backward +3 × 479 µs per micro-batch [src: own-host-overhead-probe]; DDP (not FSDP2) gets nothing."""
    for case, modules in (("zero3", 3), ("ddp-overlap", 0)):
        cluster, _, _, work = _run(case)
        host = dataclasses.replace(cluster.node.host, fsdp2_forward_module_us=0.0, fsdp2_backward_module_us=0.0)
        _, _, _, bare = _run(case, dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host)))
        (chunk,), (plain,) = work.stages[0].chunks, bare.stages[0].chunks
        assert chunk.fwd_s == pytest.approx(plain.fwd_s + modules * 162e-6, rel=1e-9), case
        assert chunk.bwd_s == pytest.approx(plain.bwd_s + modules * 479e-6, rel=1e-9), case


def _without_tp_terms(cluster):
    host = dataclasses.replace(cluster.node.host, tp_forward_module_us=0.0, tp_backward_module_us=0.0)
    return dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))


def test_torch_tensor_parallelism_adds_its_per_module_host_time():
    """tp (torch TP over 2 ranks, one stage of 2 blocks: 4 × 2 + embedding + output layer = 10 modules) on
    localhost-cpu: forward +10 × 248 µs and backward +10 × 424 µs per micro-batch [src: own-tp-module-probe];
    DDP and FSDP2 without tp get nothing from this term."""
    for case, modules in (("tp", 10), ("ddp-overlap", 0), ("zero3", 0)):
        cluster, _, layout, work = _run(case)
        assert fh.tp_modules(layout, _whole_model(layout)) == modules, case
        _, _, _, bare = _run(case, _without_tp_terms(cluster))
        (chunk,), (plain,) = work.stages[0].chunks, bare.stages[0].chunks
        assert chunk.fwd_s == pytest.approx(plain.fwd_s + modules * 248e-6, rel=1e-9), case
        assert chunk.bwd_s == pytest.approx(plain.bwd_s + modules * 424e-6, rel=1e-9), case


def _whole_model(layout):
    from simulator.workload import ChunkSlice

    return ChunkSlice(index=0, count=1, start=0, layers=sum(layout.layers_per_stage))


def test_tp_modules_per_chunk_and_framework():
    """4 per block; the embedding on the first chunk, the output layer on the last, neither in between;
    Megatron-LM's tensor parallelism (plain tensors) and tp 1 have none."""
    from simulator.strategy.framework import Framework
    from simulator.workload import ChunkSlice

    _, _, layout, _ = _run("tp")
    assert [fh.tp_modules(layout, ChunkSlice(index=i, count=3, start=i, layers=1)) for i in range(3)] == [5, 4, 5]
    megatron = dataclasses.replace(layout, framework=Framework.MEGATRON)
    assert fh.tp_modules(megatron, ChunkSlice(index=0, count=1, start=0, layers=2)) == 0
    _, _, ddp, _ = _run("ddp-overlap")
    assert fh.tp_modules(ddp, ChunkSlice(index=0, count=1, start=0, layers=2)) == 0


def test_sequence_parallel_norms_are_tp_modules():
    """With sequence parallelism each block's two norms run as ``SequenceParallel`` modules on DTensors: 6 per block,
    so tp-sp's 2 blocks are 6 × 2 + 2 = 14 modules against tp's 10, and per chunk [7, 6, 7]; the count is the
    compiler's list of those norms [src: own-sp-module-probe-2026-11-26]."""
    from simulator.compile.torch_tp import SP_NORMS_PER_BLOCK
    from simulator.workload import ChunkSlice

    _, _, layout, _ = _run("tp")
    sp = dataclasses.replace(layout, sequence_parallel=True)
    assert fh.SP_MODULES_PER_BLOCK == len(SP_NORMS_PER_BLOCK)
    assert fh.tp_modules(sp, _whole_model(sp)) == 14
    assert [fh.tp_modules(sp, ChunkSlice(index=i, count=3, start=i, layers=1)) for i in range(3)] == [7, 6, 7]
    assert fh.tp_modules(layout, _whole_model(layout)) == 10


def test_tp_module_terms_round_trip_and_are_checked(tmp_path):
    cluster = load_cluster("localhost-cpu")
    assert (cluster.node.host.tp_forward_module_us, cluster.node.host.tp_backward_module_us) == (248, 424)
    again = load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml")))
    assert again.node.host == cluster.node.host
    d = cluster_to_dict(cluster)
    d["host"]["tp_forward_module_us"] = -1
    with pytest.raises(SpecError, match="tp_forward_module_us"):
        cluster_from_dict(d)
    assert all(load_cluster(name).node.host is None or load_cluster(name).node.host.tp_forward_module_us == 0
               for name in ("dgx-h100", "dgx-a100", "hgx-h200"))


def _without_ddp_terms(cluster):
    host = dataclasses.replace(cluster.node.host, ddp_forward_call_us=0.0, ddp_sync_backward_us=0.0)
    return dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host))


def test_ddp_adds_its_per_forward_and_per_synchronising_backward_host_time():
    """ddp-overlap (torch DDP, dp 2, overlapped reduction) on localhost-cpu: each forward +48 µs, the last
    gradient bucket +223 µs (DDP's synchronising backward) [src: own-ddp-host-probe]; so the step of its 2
    micro-batches +2 × 48 + 223 µs. FSDP2 (zero3) and torch TP (tp) are not DDP-wrapped: nothing."""
    from simulator.analytical import estimate_work

    for case, wrapped in (("ddp-overlap", True), ("zero3", False), ("tp", False)):
        cluster, _, layout, work = _run(case)
        assert fh.ddp_wrapped(layout) is wrapped, case
        _, _, _, bare = _run(case, _without_ddp_terms(cluster))
        (chunk,), (plain,) = work.stages[0].chunks, bare.stages[0].chunks
        assert chunk.fwd_s == pytest.approx(plain.fwd_s + (48e-6 if wrapped else 0.0), rel=1e-9), case
        if wrapped:
            *same, last = work.stages[0].grad_sync
            assert tuple(same) == bare.stages[0].grad_sync[:-1]
            assert last.time_s == pytest.approx(bare.stages[0].grad_sync[-1].time_s + 223e-6, rel=1e-9)
            assert work.micro_batches == 2
            grown = estimate_work(work).step_time_s - estimate_work(bare).step_time_s
            assert grown == pytest.approx(2 * 48e-6 + 223e-6, rel=1e-6)


def test_ddp_sync_term_needs_overlapped_reduction():
    """ddp-overlap with overlap_grad_reduce off (every backward under no_sync, then the all-reduce): the forward
    term stays, the synchronising-backward term does not apply."""
    results = load_results(RUNS / "ddp-overlap.results.json")
    strategy = results.run.plan.strategy
    strategy = dataclasses.replace(strategy, dp_sync=dataclasses.replace(strategy.dp_sync, overlap_grad_reduce=False))
    cluster, workload = run_cluster(results, "localhost-cpu"), run_workload(results)

    def step(chosen):
        layout = build_layout(strategy, chosen, workload, gpus=results.run.plan._layout_gpus())
        return layout, compile_step(chosen, workload, strategy, layout=layout)

    (layout, work), (_, bare) = step(cluster), step(_without_ddp_terms(cluster))
    assert fh.ddp_wrapped(layout) and work.stages[0].grad_sync == bare.stages[0].grad_sync
    assert work.stages[0].chunks[0].fwd_s == pytest.approx(bare.stages[0].chunks[0].fwd_s + 48e-6, rel=1e-9)


def test_checkpointed_blocks_add_their_host_time():
    """recompute-full (torch DDP, 2 blocks checkpointed) on localhost-cpu: forward +2 × 176 µs, backward +2 × 460 µs
    per micro-batch [src: own-checkpoint-host-probe]; no recompute (ddp-overlap): nothing; Megatron-LM's own
    checkpointing is not torch's: nothing."""
    from simulator.strategy.framework import Framework
    from simulator.workload import ChunkSlice

    for case, regions in (("recompute-full", 2), ("ddp-overlap", 0)):
        cluster, _, layout, work = _run(case)
        host = dataclasses.replace(cluster.node.host, checkpoint_forward_region_us=0.0,
                                   checkpoint_backward_region_us=0.0)
        _, _, _, bare = _run(case, dataclasses.replace(cluster, node=dataclasses.replace(cluster.node, host=host)))
        (chunk,), (plain,) = work.stages[0].chunks, bare.stages[0].chunks
        assert chunk.fwd_s == pytest.approx(plain.fwd_s + regions * 176e-6, rel=1e-9), case
        assert chunk.bwd_s == pytest.approx(plain.bwd_s + regions * 460e-6, rel=1e-9), case
    _, _, layout, _ = _run("recompute-full")
    whole = ChunkSlice(index=0, count=1, start=0, layers=2)
    assert fh.checkpoint_regions(layout, whole) == 2
    assert fh.checkpoint_regions(dataclasses.replace(layout, framework=Framework.MEGATRON), whole) == 0


def test_ddp_wraps_at_dp_1_as_its_bucket_passes_assume():
    """The executor's data-parallel family wraps DDP at every world size (``executor/strategies/data_parallel.py``
    ``_ddp``), and :mod:`simulator.compile.ddp_copies` charges DDP's bucket passes at dp 1: the wrapper's forward
    term applies there too (+48 µs per forward on localhost-cpu, each of the 4 micro-batches of one replica), on the
    same rule (one home: ``runs_ddp_reducer``). Not under tp or pp (their own gradient averaging), nor ZeRO-2/3."""
    from simulator.framework_host import runs_ddp_reducer
    from simulator.strategy.flat import strategy_from_flat

    results = load_results(RUNS / "ddp-overlap.results.json")
    cluster, workload = run_cluster(results, "localhost-cpu"), run_workload(results)
    for flat, wrapped in (({"dp": 1}, True), ({"dp": 1, "zero": 1, "framework": "torch"}, True),
                          ({"dp": 1, "zero": 2}, False), ({"dp": 1, "pp": 2}, False), ({"dp": 1, "tp": 2}, False)):
        strategy = strategy_from_flat({**flat, "global_batch": 8, "micro_batch": 2})
        gpus = flat.get("tp", 1) * flat.get("pp", 1)
        layout = build_layout(strategy, cluster, workload, gpus=gpus)
        assert fh.ddp_wrapped(layout) is wrapped and (not wrapped or runs_ddp_reducer(layout)), flat
        if flat == {"dp": 1}:
            work = compile_step(cluster, workload, strategy, layout=layout)
            bare = compile_step(_without_ddp_terms(cluster), workload, strategy, layout=layout)
            assert work.micro_batches == 4
            assert work.stages[0].chunks[0].fwd_s == pytest.approx(bare.stages[0].chunks[0].fwd_s + 48e-6, rel=1e-9)
