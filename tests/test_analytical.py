"""The analytical engine: hand-worked pipeline, overlap, parameter-server and MFU cases."""

from dataclasses import replace

import numpy as np
import pytest

from simulator.strategy.kinds import MixedPrecision, OptimizerImpl
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.analytical import estimate, estimate_work
from simulator.analytical_formula import PART_KINDS, StepArrays, evaluate, stack, sync_exposure
from simulator.cluster.presets import load_preset
from simulator.collectives.ps import ps_time_s
from simulator.compile import CostCache, compile_step
from simulator.errors import SpecError
from simulator.results import Category
from simulator.schedule_dry_run import dry_run
from simulator.schedule_shape import schedule_shape
from simulator.schedules import ScheduleKind, make_schedule
from simulator.strategy import AllReduceSync, ParamServerSync, Recompute, Strategy
from simulator.workload import ParamCountModel, get_preset


def arrays(p, v=1, F=1.0, B=2.0, c=0.0, sync=(), fractions=None, opt=0.0):
    """A synthetic step: equal chunks, p2p ``c``, the same buckets on every rank."""
    n, J = p * v, len(sync)
    Fa, Ba = np.broadcast_to(np.asarray(F, float), (n,)).copy(), np.broadcast_to(np.asarray(B, float), (n,)).copy()
    parts = np.zeros((1, n, len(PART_KINDS)))
    parts[0, :, 0], parts[0, :, 1] = Fa, Ba
    f = np.ones(J) if fractions is None else np.asarray(fractions, float)
    tail, exposed = sync_exposure(Ba[:p], np.tile(np.asarray(sync, float), (p, 1)).reshape(p, J), np.tile(f, (p, 1)),
                                  np.zeros((p, J), dtype=int))
    return StepArrays(p=p, v=v, F=Fa[None], B=Ba[None], parts=parts, cf=np.full((1, n - 1), c),
                      cb=np.full((1, n - 1), c), tail=tail[None], sync_exposed=exposed[None],
                      opt=np.full((1, p), opt), after=np.zeros((1, p, 4)), data=np.zeros(1))


def run(a, m, kind):
    """The closed form on ``a`` for the built-in schedule ``kind`` with m micro-batches."""
    return evaluate(a, stack([schedule_shape(make_schedule(kind, a.p, m, a.v))]), np.array([2]))


@pytest.mark.parametrize("sched", [ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B])
@pytest.mark.parametrize("p,m", [(4, 8), (8, 32), (2, 1)])
def test_bubble_fraction_gpipe_and_1f1b(sched, p, m):
    """Narayanan et al. SC'21 §2.2: (m + p − 1)(t_f + t_b); bubble (p − 1)/m of the ideal m(t_f + t_b). Exact."""
    out = run(arrays(p), m, sched)
    assert out["step_time_s"][0] == pytest.approx((m + p - 1) * 3.0, rel=1e-12)
    bubble = out["breakdown"][0, 0, list(Category).index(Category.BUBBLE)]
    assert bubble / (m * 3.0) == pytest.approx((p - 1) / m, rel=1e-12)


@pytest.mark.parametrize("v", [2, 4])
def test_interleaved_reduces_the_bubble_by_v(v):
    """Interleaved 1F1B: bubble (p − 1)/(v·m) (Narayanan et al. SC'21 §2.2); chunks are 1/v of a stage."""
    p, m = 4, 8
    out = run(arrays(p, v, F=1.0 / v, B=2.0 / v), m, ScheduleKind.INTERLEAVED)
    ideal = m * 3.0
    assert (out["step_time_s"][0] - ideal) / ideal == pytest.approx((p - 1) / (v * m), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 12), c=st.floats(0, 0.1),
       F=st.lists(st.floats(0.9, 1.1), min_size=6, max_size=6), gpipe=st.booleans())
def test_closed_form_against_the_list_scheduler(p, m, c, F, gpipe):
    """GPipe is exact against dry_run for any stage times. 1F1B, a longest path of a family of real paths, is
    never above dry_run, exact without p2p for stages within ±10 % of each other (edge stages of real models),
    and within 2 % below with p2p up to a tenth of a forward (worst seen in 3,000 draws: −1.5 %)."""
    F, m = F[:p], m + p  # m >= p: the regime pipelines run in (m ≫ p, Narayanan et al. §3.3)
    B = [2 * f for f in F]
    kind = ScheduleKind.GPIPE if gpipe else ScheduleKind.ONE_F_ONE_B
    truth = dry_run(make_schedule(kind, p, m), tuple(F), tuple(B), c).makespan_s
    got = run(arrays(p, F=F, B=B, c=c), m, kind)["step_time_s"][0]
    assert got <= truth * (1 + 1e-12)
    assert got == pytest.approx(truth, rel=1e-9 if gpipe or c == 0 else 0.02)


def test_p2p_terms_of_the_closed_form_hand_worked():
    """analytical_formula's docstring on p 2, m 4, F 1, B 2 (w = 3 per chunk), p2p c = 0.5 each way:
    Σw = 6, C = cf + cb = 1.0.
    GPipe: Σw + (m−1)(max F + max B) + C = 6 + 3·3 + 1 = 16 (dry_run: 16, exact).
    1F1B: the schedule's critical path (dry_run: 17) — rank 0's four chunks (4·3 = 12) plus, per round trip
    through rank 1, its forward-and-backward wait: the longest-path form (analytical_formula) gives 17 exactly,
    with 4 of the path's hops of c = 0.5 on it (2.0 of p2p).
    Interleaved p 2, v 2, chunks F 0.5, B 1: W_r = 3, C = 3 boundaries × 2 × 0.5 = 3,
    T = m·max W + (ΣW − max W)/v + C = 12 + 1.5 + 3 = 16.5 (dry_run: 16.5)."""
    assert run(arrays(2, c=0.5), 4, ScheduleKind.GPIPE)["step_time_s"][0] == pytest.approx(16.0, rel=1e-12)
    one = run(arrays(2, c=0.5), 4, ScheduleKind.ONE_F_ONE_B)
    assert one["step_time_s"][0] == pytest.approx(17.0, rel=1e-12)
    assert one["pipeline_s"][0] == pytest.approx(17.0, rel=1e-12)
    # p2p on the critical path: 4 hops × 0.5 = 2.0; rank 0 idles 17 − 4·3 = 5 ≥ 2.0.
    assert one["breakdown"][0, 0, list(Category).index(Category.PP)] == pytest.approx(2.0, rel=1e-12)
    inter = run(arrays(2, v=2, F=0.5, B=1.0, c=0.5), 4, ScheduleKind.INTERLEAVED)
    assert inter["step_time_s"][0] == pytest.approx(16.5, rel=1e-12)
    for kind, expected in ((ScheduleKind.GPIPE, 16.0), (ScheduleKind.ONE_F_ONE_B, 17.0)):
        assert dry_run(make_schedule(kind, 2, 4), 1.0, 2.0, 0.5).makespan_s == pytest.approx(expected, rel=1e-12)
    assert dry_run(make_schedule(ScheduleKind.INTERLEAVED, 2, 4, 2), 0.5, 1.0, 0.5).makespan_s == \
        pytest.approx(16.5, rel=1e-12)


def test_closed_form_exact_on_uneven_stages_without_p2p():
    """p 5, m 6, c 0, forwards (1.09375, 0.9375, 1, 1, 0.9375), backwards twice those: dry_run 29.8125.
    The earlier period form gave 31.3125 (+5.03 %, found by hypothesis during mutation testing); the
    longest-path form is exact without p2p."""
    F = (1.09375, 0.9375, 1.0, 1.0, 0.9375)
    B = tuple(2 * f for f in F)
    truth = dry_run(make_schedule(ScheduleKind.ONE_F_ONE_B, 5, 6), F, B, 0.0).makespan_s
    assert truth == pytest.approx(29.8125, rel=1e-12)
    got = run(arrays(5, F=list(F), B=list(B)), 6, ScheduleKind.ONE_F_ONE_B)["step_time_s"][0]
    assert got == pytest.approx(truth, rel=1e-9)


def test_exposed_dp_is_the_tail_after_backward():
    """DDP overlap (Li et al. VLDB 2020): backward of 10 s producing 4 buckets of 3 s at 1/4, 1/2, 3/4, 1: the
    stream runs 2.5–5.5, 5.5–8.5, 8.5–11.5, 11.5–14.5, so 4.5 s show. Without overlap all 12 s show."""
    dp = list(Category).index(Category.DP)
    on = run(arrays(1, F=5.0, B=10.0, sync=(3, 3, 3, 3), fractions=(0.25, 0.5, 0.75, 1.0)), 1, ScheduleKind.ONE_F_ONE_B)
    assert on["step_time_s"][0] == pytest.approx(15.0 + 4.5)
    assert on["breakdown"][0, 0, dp] == pytest.approx(4.5)
    off = run(arrays(1, F=5.0, B=10.0, sync=(3, 3, 3, 3)), 1, ScheduleKind.ONE_F_ONE_B)
    assert off["step_time_s"][0] == pytest.approx(15.0 + 12.0)


@pytest.fixture(scope="module")
def small():
    return load_preset("dgx-a100", 2), get_preset("megatron-1.7b")


def test_pure_dp_step_is_compute_plus_exposed_all_reduce(small):
    """Pure DP, gradient accumulation m = 2: overlap off gives m·(fwd + bwd) + every bucket + optimizer;
    overlap on hides all but what runs past the last backward."""
    cluster, model = small
    cache = CostCache(cluster)
    off = compile_step(cluster, model, Strategy(global_batch=32, dp_sync=AllReduceSync(overlap_grad_reduce=False)),
                       cache=cache, memory=False)
    st0, ch = off.stages[0], off.stages[0].chunks[0]
    comm = sum(c.time_s for c in st0.grad_sync)
    expected = 2 * (ch.fwd_s + ch.bwd_s) + comm + st0.optimizer_s
    r_off = estimate_work(off)
    assert r_off.step_time_s == pytest.approx(expected, rel=1e-12)
    assert r_off.breakdown[Category.DP] == pytest.approx(comm, rel=1e-12)
    r_on = estimate(cluster, model, Strategy(global_batch=32), cache=cache)
    assert 2 * (ch.fwd_s + ch.bwd_s) + st0.optimizer_s <= r_on.step_time_s < r_off.step_time_s
    assert sum(r_on.breakdown.values()) == pytest.approx(r_on.step_time_s, rel=1e-12)


def test_breakdown_rows_sum_to_the_step(small):
    cluster, model = small
    r = estimate(cluster, model, Strategy(global_batch=64, tp=2, pp=4, schedule=ScheduleKind.INTERLEAVED,
                                          virtual_stages=2, sequence_parallel=True, recompute=Recompute.SELECTIVE))
    sums = r.per_rank.drop(columns=["rank", "stage"]).sum(axis=1)
    assert np.allclose(sums, r.step_time_s, rtol=1e-12) and len(r.per_rank) == 4
    assert all(v >= -1e-12 for v in r.breakdown.values())


def test_interleaving_shrinks_the_measured_bubble():
    """GPT-3 175B, p = 4 ranks of 24 blocks, m = 8: the interleaved (v = 2) bubble is close to half of 1F1B's.
    The logits make the last stage ≈ 1.4 % heavier, so the ratio is near, not at, v (tolerance ±20 %).
    (On a small model such as megatron-1.7b the logits weigh two blocks and imbalance dominates the bubble.)"""
    cluster, model = load_preset("dgx-a100", 4), get_preset("gpt3-175b")
    base = dict(global_batch=8, micro_batch=1, dp=1, tp=8, pp=4)
    cache = CostCache(cluster)
    b1 = estimate(cluster, model, Strategy(**base), cache=cache).breakdown[Category.BUBBLE]
    b2 = estimate(cluster, model, Strategy(**base, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2),
                  cache=cache).breakdown[Category.BUBBLE]
    assert 1.6 < b1 / b2 < 2.4


def test_parameter_server_bottleneck_and_shards():
    """BytePS (Jiang et al. OSDI'20) [src: jiang-2020]: non-colocated PS moves max(M/B, n·M/(k·B)) each way, so one
    server with n workers is n× one worker's NIC time; k = n shards bring it down to M/B. ps.py runs push and
    pull one after the other (2×). Tolerance 1 %: the per-call latencies."""
    cluster = load_preset("dgx-a100", 5)  # 4 worker nodes (32 GPUs, one NIC each) + 1 server node
    model = get_preset("megatron-1.7b")
    M = model.params * 4  # fp32 gradients: the torch framework's autocast keeps fp32 parameters (sync_dtype)
    B = cluster.network.link.bw_Bps
    times = {}
    for k in (1, 32):
        s = Strategy(global_batch=64, dp_sync=ParamServerSync(shards=k, server_nodes=1))
        work = compile_step(cluster, model, s, memory=False)
        times[k] = work.stages[0].grad_sync[0].time_s
    assert times[1] == pytest.approx(2 * 32 * M / B, rel=0.01)
    assert times[32] == pytest.approx(2 * M / B, rel=0.01)
    assert times[32] == pytest.approx(ps_time_s(cluster, tuple(range(32)), M, 32, False), rel=1e-9)


def test_gpt3_175b_against_narayanan_table_1():
    """Narayanan et al. SC'21 Table 1: GPT-3 175B on 1024 A100s (t 8, p 8, d 16, b 1, B 1536, s 2048, full
    recompute) at 138 TFLOP/s per GPU. Their FLOPs per iteration (eq. 3, full recompute)
    96·B·s·l·h²·(1 + s/6h + V/16lh) = 4.51075e18, so the measured step is 4.51075e18 / (1024 × 138e12)
    = 31.92 s. The model is optimistic by construction (no kernel-launch gaps, fused-op overheads or allocator
    stalls): it must come in below 31.92 s, and currently does by ~22 % (25.1 s, 2026-11-24); tolerance 30 %.
    Hand-worked identities: MFU = model FLOPs / (step × 1024 × 312e12) with model FLOPs from eq. 3 without
    recompute, 72·B·s·l·h²·(1 + s/6h + V/12lh) = 3.38598e18; MFU/HFU = 72·(1 + 0.0277778 + 0.0035503) /
    (96·(1 + 0.0277778 + 0.0026627)) = 0.750646; the bubble (p − 1)/(m + p − 1) = 7/103 of the step."""
    cluster, model = load_preset("dgx-a100", 128), get_preset("gpt3-175b").with_seq(2048)
    # Megatron-LM's fp16 parameters and apex FusedAdam (benchmarks/published_runs.yaml, group nar21-t1)
    s = Strategy(global_batch=1536, micro_batch=1, dp=16, tp=8, pp=8, recompute=Recompute.FULL,
                 mixed_precision=MixedPrecision.PARAM_DTYPE, optimizer_impl=OptimizerImpl.FUSED)
    r = estimate(cluster, model, s)
    B, sq, l, h, v = 1536, 2048, 96, 12288, model.vocab
    hardware = 96 * B * sq * l * h * h * (1 + sq / (6 * h) + v / (16 * l * h))
    useful = 72 * B * sq * l * h * h * (1 + sq / (6 * h) + v / (12 * l * h))
    assert hardware == pytest.approx(4.51075e18, rel=1e-5) and useful == pytest.approx(3.38598e18, rel=1e-5)
    measured_step_s = hardware / (1024 * 138e12)
    assert measured_step_s == pytest.approx(31.92, rel=1e-3)
    assert r.step_time_s < measured_step_s
    assert r.step_time_s == pytest.approx(measured_step_s, rel=0.30)
    assert r.mfu == pytest.approx(useful / (r.step_time_s * 1024 * 312e12), rel=1e-6)
    assert r.mfu / r.hfu == pytest.approx(0.750646, rel=1e-5)
    assert r.breakdown[Category.BUBBLE] / r.step_time_s == pytest.approx(7 / (96 + 7), abs=0.03)


def test_bad_inputs_raise_spec_error(small):
    cluster, model = small
    with pytest.raises(SpecError):
        estimate(cluster, ParamCountModel(params=10**9), Strategy(global_batch=16))
    with pytest.raises(SpecError, match="global_batch"):
        estimate(cluster, model, Strategy(global_batch=17, dp=16))
    with pytest.raises(SpecError, match="tp"):
        estimate(cluster, model, Strategy(global_batch=16, tp=5, dp=None))


def test_deterministic(small):
    cluster, model = small
    s = Strategy(global_batch=32, tp=2, pp=2)
    assert estimate(cluster, model, s).step_time_s == estimate(cluster, model, replace(s)).step_time_s
