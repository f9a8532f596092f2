"""Compute/communication interference: an overlapped collective takes SMs from the compute under it.

Model (:mod:`simulator.interference`): compute overlapped for ``D`` seconds by a collective that takes
``f = collective_sms / sm_count`` of the SMs lasts ``f·D`` longer. Expected values are worked by hand
below (tolerance 1e-9 relative: the same arithmetic in another order); the figures of the presets are
NCCL's channel counts (one CUDA block per channel [src: nccl-env]): 24 on an 8 × A100 NVSwitch node
[src: nccl-tests-100], 108 SMs per A100 [src: nvidia-a100-wp].
"""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.analytical import estimate, estimate_work, exposed_gathers
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.io import cluster_to_dict
from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.interference import sm_fraction
from simulator.results import Category
from simulator.strategy import Strategy, ZeroStage
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport
from simulator.workload import load_model
from two_rank_work import bucket_call, data_parallel_work


def gather(time_s: float, transport: Transport = Transport.COLLECTIVE) -> CommCall:
    algorithm = CollectiveAlgorithm.RING if transport is Transport.COLLECTIVE else None
    return CommCall(kind=CommKind.ZERO, op=Op.ALL_GATHER, group=(0, 1), nbytes=1, transport=transport,
                    algorithm=algorithm, time_s=time_s)


def test_fraction_of_sms_taken():
    assert sm_fraction(24, 108) == pytest.approx(24 / 108)     # dgx-a100: 22 % of the SMs
    assert sm_fraction(16, 132) == pytest.approx(16 / 132)     # dgx-h100
    assert sm_fraction(0, 108) == 0.0 and sm_fraction(24, None) == 0.0   # no figure / a CPU: free
    assert sm_fraction(200, 108) == 1.0
    a100 = load_preset("dgx-a100")
    assert a100.comm.collective_sms == 24 and a100.device.sm_count == 108
    work = compile_step(a100, load_model("gpt3-125m"), Strategy(global_batch=8), memory=False)
    assert work.overlap_sm_fraction == pytest.approx(24 / 108)


def test_gathers_that_hide_stretch_the_block_they_overlap():
    # 3 gathers of 1 s, 6 s of compute (blocks of t = 2 s), f = 0.5. Gather 0 is waited for (1 s);
    # gathers 1 and 2 each run 1 s inside the block before theirs: 2 × 0.5 × 1 s of stretch.
    calls = (gather(1.0),) * 3
    assert exposed_gathers(calls, 6.0, 0.5) == pytest.approx(1.0 + 2 * 0.5)
    assert exposed_gathers(calls, 6.0) == pytest.approx(1.0)
    # a host fetch (ZeRO-Infinity) uses the copy engines, not the SMs: no stretch
    assert exposed_gathers((gather(1.0, Transport.HOST),) * 3, 6.0, 0.5) == pytest.approx(1.0)


def test_a_stretch_under_an_exposed_gather_is_hidden_by_the_wait():
    # 2 gathers of 3 s, blocks of 2 s, f = 0.5: gather 1 covers block 0 (2 s, stretch 1 s to t = 6),
    # which it outlasts anyway (done at 6): exposed 3 + (3 − 2) = 4 s with or without the stretch.
    calls = (gather(3.0),) * 2
    assert exposed_gathers(calls, 4.0, 0.5) == pytest.approx(4.0)
    assert exposed_gathers(calls, 4.0) == pytest.approx(4.0)


def dp_work(fraction: float):
    # dp = 2 on two nodes: forward 10 ms, backward 20 ms, one bucket of 250 MB (ring on 2 ranks:
    # 2·(5 µs + 125 MB / 25 GB/s) = 10.01 ms) ready at half the backward: it runs from 10 ms before
    # the backward ends to 10 µs after (tail 10 µs), 10 ms of it under the backward.
    work = data_parallel_work(Strategy(global_batch=2, micro_batch=1), 0.010, 0.020, (bucket_call(250_000_000),),
                              (0.5,))
    return replace(work, overlap_sm_fraction=fraction)


def test_buckets_under_the_last_backward_stretch_it_hand_worked():
    from two_rank_work import cluster
    free = estimate_work(dp_work(0.0))
    assert free.step_time_s == pytest.approx(0.030 + 10e-6, rel=1e-9)
    # f = 0.25: the backward ends 0.25 × 10 ms = 2.5 ms later, past the bucket's 10 µs tail
    taken = estimate_work(dp_work(0.25))
    assert taken.step_time_s == pytest.approx(0.030 + 0.25 * 10e-3, rel=1e-9)
    assert taken.breakdown[Category.DP] == pytest.approx(0.25 * 10e-3, rel=1e-9)
    des = simulate(dp_work(0.25), cluster(), trace=False)
    assert des.step_time_s == pytest.approx(taken.step_time_s, rel=1e-9)
    assert des.breakdown[Category.DP] == pytest.approx(taken.breakdown[Category.DP], rel=1e-9)


@pytest.mark.parametrize("zero", [ZeroStage.ZERO0, ZeroStage.ZERO3])
def test_the_engines_agree_and_the_stretch_is_charged(zero):
    """dgx-a100 × 4 nodes, GPT-3 125M, dp 32: buckets under the backward (ZeRO-0) or gathers under the
    blocks (ZeRO-3); with NCCL's 24 SMs the step is longer, the engines agree, and free overlap is the
    old result."""
    model, strategy = load_model("gpt3-125m"), Strategy(global_batch=32, micro_batch=1, zero=zero)
    base = load_preset("dgx-a100", nodes=4)
    free = replace(base, comm=replace(base.comm, collective_sms=0))
    a_free, a_taken = estimate(free, model, strategy), estimate(base, model, strategy)
    d_taken = simulate(compile_step(base, model, strategy), base, trace=False)
    assert a_taken.step_time_s > a_free.step_time_s
    # 1e-5: the DES replays each gather on the links, a few ns off its closed-form time_s, and under
    # interference every gather's length enters the step (f × its overlap), not only the exposed ones
    assert d_taken.step_time_s == pytest.approx(a_taken.step_time_s, rel=1e-5)
    kind = Category.ZERO if zero is ZeroStage.ZERO3 else Category.DP
    extra = a_taken.breakdown[kind] - a_free.breakdown[kind]
    assert extra == pytest.approx(a_taken.step_time_s - a_free.step_time_s, rel=1e-6)


@given(st.lists(st.floats(min_value=1e-4, max_value=5.0), min_size=1, max_size=6),
       st.floats(min_value=1e-3, max_value=20.0), st.floats(min_value=0.0, max_value=1.0),
       st.floats(min_value=0.0, max_value=1.0))
def test_more_sms_taken_never_shortens_an_action(times, compute_s, f1, f2):
    calls = tuple(gather(t) for t in times)
    lo, hi = sorted((f1, f2))
    assert exposed_gathers(calls, compute_s, lo) <= exposed_gathers(calls, compute_s, hi) + 1e-12
    # the stretch is at most f × the gathers' time
    assert exposed_gathers(calls, compute_s, hi) <= exposed_gathers(calls, compute_s) + hi * sum(times) + 1e-9


def test_the_field_round_trips_and_bad_values_name_it():
    d = cluster_to_dict(load_preset("dgx-h100"))
    assert d["comm"]["collective_sms"] == 16
    assert cluster_from_dict(d).comm.collective_sms == 16
    for bad in (-1, 2.5, "many"):
        d["comm"]["collective_sms"] = bad
        with pytest.raises(SpecError, match=r"comm\.collective_sms"):
            cluster_from_dict(d)
