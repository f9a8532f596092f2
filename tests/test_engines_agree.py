"""The two engines on the same compiled work: the DES is never faster than the analytical estimate,
and agrees with it within 2 % where the analytical assumptions hold (no stragglers, links not shared
between calls that run at the same time). Issue: "The two agree within 2 % where the analytical
assumptions hold (no contention, no stragglers), and the DES is never faster than the analytical
lower bound."

That comparison agrees partly by construction: the DES calibrates each call's uncontended time to
the compiled ``time_s`` both engines read. The hand-worked cases at the end fix the expected step
from the link and compute times alone (worked in the comments), so an error shared by both engines
fails them too; a variant gives the DES calls with ``time_s = 0`` to show that it times them from
the links, not from the compiled numbers.
"""

import pytest

from simulator.analytical import estimate_work
from simulator.cluster.io import load_cluster
from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.results import Category
from simulator.schedules import ScheduleKind
from simulator.strategy import AllReduceSync, AttentionKind, Framework, ParamServerSync, Strategy, ZeroStage
from simulator.workload import Recompute, load_model
from two_rank_work import bucket_call, cluster as two_nodes, data_parallel_work, p2p_s, pipeline_work, \
    ring2_all_reduce_s

AGREEMENT = 0.02
CASES = {
    "pure-dp": dict(global_batch=16, micro_batch=2, dp=8),
    "dp-no-overlap": dict(global_batch=16, micro_batch=2, dp=8, dp_sync=AllReduceSync(overlap_grad_reduce=False)),
    "3d": dict(global_batch=16, micro_batch=1, dp=2, tp=2, pp=2),
    "3d-sp-selective": dict(global_batch=16, micro_batch=1, dp=2, tp=2, pp=2, sequence_parallel=True,
                            recompute=Recompute.SELECTIVE),
    "3d-eager-selective": dict(global_batch=16, micro_batch=1, dp=2, tp=2, pp=2, attention=AttentionKind.EAGER,
                               recompute=Recompute.SELECTIVE),
    "gpipe": dict(global_batch=16, micro_batch=1, dp=2, tp=1, pp=4, schedule=ScheduleKind.GPIPE),
    "interleaved": dict(global_batch=32, micro_batch=1, dp=1, tp=2, pp=4, schedule=ScheduleKind.INTERLEAVED,
                        virtual_stages=2),
    "zero3": dict(global_batch=16, micro_batch=2, dp=8, zero=ZeroStage.ZERO3),
    "zero3-fsdp2": dict(global_batch=16, micro_batch=2, dp=8, zero=ZeroStage.ZERO3, framework=Framework.FSDP2),
    "zero1-full-recompute": dict(global_batch=16, micro_batch=2, dp=8, zero=ZeroStage.ZERO1,
                                 recompute=Recompute.FULL),
    "ps-sync": dict(global_batch=16, micro_batch=2, dp=8, dp_sync=ParamServerSync(shards=2)),
}


@pytest.fixture(scope="module")
def setup():
    return load_cluster("dgx-h100"), load_model("gpt3-125m").with_seq(1024)


@pytest.mark.parametrize("name", sorted(CASES))
def test_des_is_never_faster_and_agrees_without_contention(setup, name):
    cluster, model = setup
    work = compile_step(cluster, model, Strategy(**CASES[name]))
    analytical = estimate_work(work)
    des = simulate(work, cluster, trace=False)
    assert des.step_time_s >= analytical.step_time_s * (1 - 1e-9)
    assert des.step_time_s == pytest.approx(analytical.step_time_s, rel=AGREEMENT)
    assert sum(des.breakdown.values()) == pytest.approx(des.step_time_s, rel=1e-6)


def test_contention_makes_the_des_slower_but_never_faster():
    """Across nodes the DP all-reduces of the pipeline stages share the NICs: the DES sees it."""
    cluster, model = load_cluster("dgx-a100", nodes=2), load_model("gpt3-350m").with_seq(1024)
    work = compile_step(cluster, model, Strategy(global_batch=32, micro_batch=1, dp=2, tp=2, pp=4))
    analytical, des = estimate_work(work), simulate(work, cluster, trace=False)
    assert des.step_time_s >= analytical.step_time_s * (1 - 1e-9)


def test_same_seed_same_timeline(setup):
    cluster, model = setup
    work = compile_step(cluster, model, Strategy(**CASES["3d"]))
    first, second = simulate(work, cluster, seed=3), simulate(work, cluster, seed=3)
    assert first.timeline.equals(second.timeline)


# --- hand-worked two-rank cases: expected values from the link and compute times, not from either engine ----

F_S, B_S = 0.01, 0.02
"""Hand-given forward and backward seconds of one micro-batch on one chunk."""
P2P_BYTES = 25_000_000
"""p2p message: α + n/bw = 5 µs + 25e6 B / 25e9 B/s = 1.005 ms (two_rank_work's NIC)."""
BUCKET_BYTES = 250_000_000
"""DP bucket: 2·(5 µs + 125e6/25e9) = 0.01001 s; the ring's reduction overlaps its transfer (two_rank_work)."""


def test_hand_worked_two_rank_1f1b_des():
    """pp 2, m 2, 1F1B (rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1), f = 10 ms, b = 20 ms, c = 1.005 ms:
    0F0 0–f, reaches rank 1 at f+c; 1F0 f+c – 2f+c; 1B0 – 2f+c+b; 0F1's activations wait (rank 1 busy)
    so 1F1 2f+c+b – 3f+c+b; 1B1 – 3f+c+2b, its gradient reaches rank 0 at 3f+2c+2b; 0B1 ends 3f+2c+3b
    (0B0 ran at 2f+2c+b – 2f+2c+2b, idle before). Step = 3f + 3b + 2c = 0.03 + 0.06 + 0.00201 = 0.09201 s."""
    assert p2p_s(P2P_BYTES) == pytest.approx(1.005e-3, rel=1e-12)
    expected = 3 * F_S + 3 * B_S + 2 * 1.005e-3
    work = pipeline_work(Strategy(global_batch=2, micro_batch=1, pp=2, dp=1), F_S, B_S, P2P_BYTES)
    assert simulate(work, two_nodes(), trace=False).step_time_s == pytest.approx(expected, rel=1e-9)
    # The DES times the p2p from the link: with the compiled times zeroed it still takes 1.005 ms per hop.
    zeroed = pipeline_work(Strategy(global_batch=2, micro_batch=1, pp=2, dp=1), F_S, B_S, P2P_BYTES, p2p_time_s=0.0)
    assert simulate(zeroed, two_nodes(), trace=False).step_time_s == pytest.approx(expected, rel=1e-9)


def test_hand_worked_two_rank_1f1b_closed_form():
    """The 1F1B longest path of analytical_formula on p 2, m 2: rank 0's F0 F1 (2f), the round trip of
    micro-batch 1 through rank 1 (c + f + b + c), then rank 0's B1 (b) — with B0 fitted while rank 1 works:
    3f + 3b + 2c = 0.09 + 0.00201 = 0.09201 s, the schedule's own critical path (what the DES plays,
    test_hand_worked_two_rank_1f1b_des). The earlier period form counted one c twice (0.093015)."""
    work = pipeline_work(Strategy(global_batch=2, micro_batch=1, pp=2, dp=1), F_S, B_S, P2P_BYTES)
    assert estimate_work(work).step_time_s == pytest.approx(0.09201, rel=1e-9)


def test_des_is_never_faster_with_heavy_p2p():
    """With p2p comparable to compute the closed form stays a lower bound of the DES (it once counted the
    rank-0 cycle's p2p twice and was one c above it)."""
    work = pipeline_work(Strategy(global_batch=2, micro_batch=1, pp=2, dp=1), F_S, B_S, P2P_BYTES)
    assert simulate(work, two_nodes(), trace=False).step_time_s >= estimate_work(work).step_time_s * (1 - 1e-9)


def test_hand_worked_two_rank_data_parallel_buckets():
    """dp 2 over two nodes, one micro-batch, two buckets of 250 MB ready at 1/2 and all of the backward (DDP,
    Li et al. VLDB 2020), one at a time on the dp stream: backward runs f = 0.01 – 0.03; bucket 0 ready at
    0.02, runs to 0.02 + d = 0.03001 (d = 0.01001, BUCKET_BYTES); bucket 1 ready at 0.03 waits for the
    stream, runs 0.03001 – 0.04002. Step = f + b/2 + 2d = 0.04002 s; exposed DP = 0.01002 s."""
    d = ring2_all_reduce_s(BUCKET_BYTES)
    assert d == pytest.approx(0.01001, rel=1e-12)
    strategy = Strategy(global_batch=2, micro_batch=1, dp=2)
    work = data_parallel_work(strategy, F_S, B_S, (bucket_call(BUCKET_BYTES),) * 2, (0.5, 1.0))
    des, analytical = simulate(work, two_nodes(), trace=False), estimate_work(work)
    for result in (des, analytical):
        assert result.step_time_s == pytest.approx(0.04002, rel=1e-9)
        assert result.breakdown[Category.DP] == pytest.approx(0.01002, rel=1e-9)
    # The DES replays the ring on the NICs: calls whose compiled time is 0 still take d each.
    zeroed = data_parallel_work(strategy, F_S, B_S, (bucket_call(BUCKET_BYTES, time_s=0.0),) * 2, (0.5, 1.0))
    assert simulate(zeroed, two_nodes(), trace=False).step_time_s == pytest.approx(0.04002, rel=1e-9)


SLOWEST_CASES = {**CASES, "pp4-1f1b": dict(global_batch=16, micro_batch=1, dp=2, pp=4)}


@pytest.mark.parametrize("name", sorted(SLOWEST_CASES))
def test_both_engines_name_the_same_slowest_rank(setup, name):
    """Issue 15 §3: one definition of "slowest rank" (simulator.results.slowest_index: most busy
    seconds, the lowest rank on a tie), and both engines report the same rank and stage for the same
    layout; each engine's breakdown is that rank's own row of its per-rank table."""
    cluster, model = setup
    work = compile_step(cluster, model, Strategy(**SLOWEST_CASES[name]))
    analytical, des = estimate_work(work), simulate(work, cluster, trace=False, steps=2)
    for key in ("slowest_rank", "slowest_stage"):
        assert analytical.extras[key] == des.extras[key], (key, analytical.extras[key], des.extras[key])
    for result in (analytical, des):
        row = result.per_rank.set_index("rank").loc[result.extras["slowest_rank"]]
        for cat, seconds in result.breakdown.items():
            assert seconds == pytest.approx(float(row[cat.value]), rel=1e-9, abs=1e-15), (result.engine, cat)
