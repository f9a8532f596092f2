"""DeepSpeed 2021 ZeRO-3's list collectives and synchronised fetches (simulator/compile/ds_zero3.py, fid19), against
hand-worked numbers: torch's list ``all_gather`` / ``reduce_scatter`` copy each call's bytes once more through HBM
(read + write) [src: torch-pg-nccl-list-collectives], and the coordinator's ``torch.cuda.synchronize()`` in every
fetch leaves the compute stream waiting while the host launches each gathered tensor's n copies
[src: deepspeed-zero3-coordinator]."""

from dataclasses import replace

import pytest

from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import compile_step
from simulator.compile.ds_zero3 import list_copy_s, sync_fetch_host_s, with_list_copy
from simulator.strategy import Strategy, ZeroStage
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport
from simulator.workload import load_model

A100 = load_preset("dgx-a100").device  # 2039 GB/s HBM, hbm_efficiency 0.790, kernel_launch_overhead_us 5


def _call(nbytes: int, time_s: float = 1e-3, op: Op = Op.ALL_GATHER) -> CommCall:
    return CommCall(kind=CommKind.ZERO, op=op, group=(0, 1), nbytes=nbytes, transport=Transport.COLLECTIVE,
                    algorithm=CollectiveAlgorithm.RING, time_s=time_s)


def test_list_copy_hand_worked():
    """1 GB through the copy: 2 × 1e9 B / (2039e9 × 0.790 B/s) = 1.24161 ms, added to the call's own time."""
    assert list_copy_s(A100, 1e9) == pytest.approx(2e9 / (2039e9 * 0.790), rel=1e-12)
    assert list_copy_s(A100, 1e9) == pytest.approx(1.24161e-3, rel=1e-5)
    longer = with_list_copy(A100, _call(10**9, 2e-3))
    assert longer.time_s == pytest.approx(2e-3 + 1.24161e-3, rel=1e-5) and longer.nbytes == 10**9
    assert with_list_copy(A100, None) is None


def test_sync_fetch_host_hand_worked():
    """GPT-3 175B's 386 forward gathers on 384 A100s: 386 × 384 × 5 µs = 0.74112 s; nothing on one rank or off a
    CUDA device (a CPU preset runs no NCCL list copies)."""
    assert sync_fetch_host_s(A100, 384, 386) == pytest.approx(0.74112, rel=1e-12)
    assert sync_fetch_host_s(A100, 1, 386) == 0.0
    assert sync_fetch_host_s(load_preset("localhost-cpu").device, 384, 386) == 0.0


def test_compiled_deepspeed_chunk_carries_both_terms():
    """GPT-3 125M, DeepSpeed ZeRO-3 on 8 A100s: each gather is the plain call plus its list copy, and the forward's
    compute is ZeRO-2's (no gathers, no fetch) plus 50 gathers × 8 ranks × 5 µs = 2.0 ms; the backward's, one
    gather (the token embedding: the rest stay gathered under the reuse distance, tests/test_ds_zero3_reuse.py)
    × 8 × 5 µs = 40 µs."""
    cluster, model = load_preset("dgx-a100"), load_model("gpt3-125m").with_seq(1024)
    base = {"global_batch": 16, "micro_batch": 2, "dp": 8}
    z3 = compile_step(cluster, model, Strategy(**base, zero=ZeroStage.ZERO3), memory=False).stages[0].chunks[0]
    z2 = compile_step(cluster, model, Strategy(**base, zero=ZeroStage.ZERO2), memory=False).stages[0].chunks[0]
    assert len(z3.zero_fwd) == 50
    assert z3.fwd_s - z2.fwd_s == pytest.approx(50 * 8 * 5e-6, rel=1e-9)
    assert z3.bwd_s - z2.bwd_s == pytest.approx(1 * 8 * 5e-6, rel=1e-9)
    plain = compile_step(replace(cluster, device=replace(cluster.device, hbm_bw_GBps=1e15)), model,
                         Strategy(**base, zero=ZeroStage.ZERO3), memory=False).stages[0].chunks[0]
    for c, p in zip(z3.zero_fwd, plain.zero_fwd):  # the same call with the copy at (effectively) infinite HBM speed
        assert c.time_s - p.time_s == pytest.approx(list_copy_s(cluster.device, c.nbytes), rel=1e-6)


def test_one_reduce_scatter_per_parameter_tensor():
    """DeepSpeed 2021 reduces a full bucket one list reduce-scatter per parameter (``_reduce_scatter_gradients``
    [src: deepspeed-zero3-coordinator]), persistent tensors included: GPT-3 125M's backward on 8 A100s holds one
    per tensor whatever the bucket (25 MiB, 5e8 elements), their bytes the parameters' (2 B each)."""
    from simulator.compile.ds_zero3 import chunk_tensor_numels
    from simulator.strategy import AllReduceSync
    cluster, model = load_preset("dgx-a100"), load_model("gpt3-125m").with_seq(1024)
    for sync in (AllReduceSync(), AllReduceSync(bucket_bytes=None, bucket_params=500_000_000)):
        work = compile_step(cluster, model, Strategy(global_batch=16, micro_batch=2, dp=8, zero=ZeroStage.ZERO3,
                                                     dp_sync=sync), memory=False)
        rs = [c for c in work.stages[0].chunks[0].zero_bwd if c.op is Op.REDUCE_SCATTER]
        numels = chunk_tensor_numels(model, work.layout, 0)
        assert len(rs) == len(numels) > 50
        assert sum(c.nbytes for c in rs) == sum(numels) * 2 == model.params * 2


def test_reduce_launch_host_is_the_excess_over_the_backward_hand_worked():
    """1,156 list reduce-scatters on 1,536 A100s launch 1,156 × 1,536 copies at 5 µs = 8.87808 s from the backward's
    thread [src: torch-pg-nccl-list-collectives]: beyond 6 s of backward compute 2.87808 s, none beyond 10 s; and
    in a compiled step it lengthens the backward by exactly that excess (GPT-3 125M, micro-batch 1, dp 256: 148
    calls × 256 × 5 µs = 0.189 s of launches against milliseconds of compute)."""
    from simulator.compile.ds_zero3 import reduce_launch_host_s
    assert reduce_launch_host_s(A100, 1536, 1156, 6.0) == pytest.approx(2.87808, rel=1e-12)
    assert reduce_launch_host_s(A100, 1536, 1156, 10.0) == 0.0
    assert reduce_launch_host_s(load_preset("localhost-cpu").device, 1536, 1156, 0.0) == 0.0
    cluster, model = load_preset("dgx-a100", nodes=32), load_model("gpt3-125m").with_seq(1024)
    base = {"global_batch": 256, "micro_batch": 1, "dp": 256}
    z3 = compile_step(cluster, model, Strategy(**base, zero=ZeroStage.ZERO3), memory=False).stages[0].chunks[0]
    z2 = compile_step(cluster, model, Strategy(**base, zero=ZeroStage.ZERO2), memory=False).stages[0].chunks[0]
    rs = sum(1 for c in z3.zero_bwd if c.op is Op.REDUCE_SCATTER)
    gathers = sum(1 for c in z3.zero_bwd if c.op is Op.ALL_GATHER)
    launches = rs * 256 * 5e-6  # ZeRO-2's backward is the same compute with no fetches and no list collectives
    assert launches > z2.bwd_s + z2.recompute_s  # the launches outlast the compute: the backward is the host's
    assert z3.bwd_s == pytest.approx(sync_fetch_host_s(A100, 256, gathers) + launches, rel=1e-9)
