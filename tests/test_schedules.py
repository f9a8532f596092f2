"""Pipeline schedules: hand-worked bubbles, memory in flight, invariants, CSV round trip, torch parity."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import SpecError
from simulator.schedule_dry_run import dry_run, validate
from simulator.schedules import (Action, ActionKind, PipelineSchedule, ScheduleKind, from_csv, gpipe, interleaved_1f1b,
                                 make_schedule, max_in_flight, one_f_one_b, to_csv)


# --- actions and printing ------------------------------------------------------------------------
def test_action_prints_and_parses_like_torch():
    assert str(Action(2, ActionKind.F, 0)) == "2F0"
    assert str(Action(11, ActionKind.W, 13)) == "11W13"
    assert Action.parse(" 1B3 ") == Action(1, ActionKind.B, 3)
    with pytest.raises(SpecError, match="cannot read action 'F0'"):
        Action.parse("F0")
    with pytest.raises(SpecError, match="kinds F, B, I, W"):
        Action.parse("0X1")


def test_one_f_one_b_order_hand_worked():
    # p=2, m=3: rank 0 warms up with one forward, rank 1 (last) alternates from the start.
    s = one_f_one_b(2, 3)
    assert str(s) == "rank 0: 0F0 0F1 0B0 0F2 0B1 0B2\nrank 1: 1F0 1B0 1F1 1B1 1F2 1B2"


def test_schedule_kind_parse_lists_names():
    assert ScheduleKind.parse("1F1B") is ScheduleKind.ONE_F_ONE_B
    with pytest.raises(SpecError, match="known: gpipe, 1f1b, interleaved"):
        ScheduleKind.parse("zb-v")


# --- bubbles: hand-worked ------------------------------------------------------------------------
@pytest.mark.parametrize("gen", [gpipe, one_f_one_b])
def test_bubble_fraction_p4_m8(gen):
    # Huang et al. 2019 / Narayanan et al. 2021: bubble (p−1)/(m+p−1) = 3/11 with t_f = t_b.
    # Makespan (m+p−1)(t_f+t_b) = 11·2 = 22 s with 1 s per action. Exact (tolerance 1e-12).
    run = dry_run(gen(4, 8), 1.0, 1.0)
    assert run.makespan_s == pytest.approx(22.0, abs=1e-12)
    assert run.bubble_fraction == pytest.approx(3 / 11, abs=1e-12)
    assert run.busy_s == (16.0,) * 4
    assert run.idle_s == (6.0,) * 4


def test_bubble_with_unequal_times_and_p2p():
    # 1F1B, p=2, m=2, t_f=1, t_b=2, p2p 0.5: rank 1 waits 1.5 s for F0, ends after 1 + 0.5 + (1+2)·2 = 7.5;
    # rank 0's last backward B1 starts when B1 from rank 1 (ends 7.5) arrives at 8.0, ends 10.0.
    run = dry_run(one_f_one_b(2, 2), 1.0, 2.0, t_p2p_s=0.5)
    assert run.makespan_s == pytest.approx(10.0, abs=1e-12)


def test_interleaved_reduces_bubble_by_v():
    # Narayanan et al. SC'21 §2.2.1: bubble time (p−1)(t_f+t_b)/v. p=4, m=8, v=2, t_f=t_b=1 s per
    # rank-worth of layers, so 0.5 s per chunk: ideal m(t_f+t_b) = 16 s, bubble 3·2/2 = 3 s → 19 s.
    run = dry_run(interleaved_1f1b(4, 8, 2), 0.5, 0.5)
    assert run.makespan_s == pytest.approx(19.0, abs=1e-12)
    plain = dry_run(one_f_one_b(4, 8), 1.0, 1.0)
    assert plain.makespan_s - 16 == pytest.approx(2 * (run.makespan_s - 16), abs=1e-12)


def test_interleaved_rejects_m_not_multiple_of_p():
    with pytest.raises(SpecError, match="micro_batches: interleaved schedule needs micro-batches a multiple "
                                        "of pp=4, got 6; use 4 or 8"):
        interleaved_1f1b(4, 6, 2)
    with pytest.raises(SpecError, match="use 4$"):
        interleaved_1f1b(4, 3, 2)


# --- memory in flight ----------------------------------------------------------------------------
def test_in_flight_gpipe_m_1f1b_p():
    assert [max_in_flight(gpipe(4, 8), r) for r in range(4)] == [8] * 4
    assert [max_in_flight(one_f_one_b(4, 8), r) for r in range(4)] == [4, 3, 2, 1]
    assert max_in_flight(one_f_one_b(4, 2), 0) == 2  # fewer micro-batches than stages


# --- validation errors ---------------------------------------------------------------------------
def _sched(rows, p, m, v=1):
    return PipelineSchedule(tuple(tuple(Action.parse(a) for a in row.split()) for row in rows), p, m, v)


@pytest.mark.parametrize("rows,p,m,message", [
    (["0F0 0B0", "1B0 1F0"], 2, 1, "rank 1 action 0 \\(1B0\\): runs before 1F0"),
    (["0F0 0B0 1F0", "1F0 1B0"], 2, 1, "stage 1 belongs to rank 1"),
    (["0F0 0F0 0B0", "1F0 1B0"], 2, 1, "runs twice"),
    (["0F0 0B0", "1F0"], 2, 1, "stage 1 micro-batch 0 has F; needs F and B"),
    (["0F0 0B0", "1F0 1B0"], 2, 2, "stage 0 micro-batch 1 has nothing"),
    (["0F0 0B0 0F1 0B1", "1F1 1B1 1F0 1B0"], 2, 2, "deadlock: no rank can run its next action \\(0B0 1F1\\)"),
    (["0F0 0B0"], 2, 1, "has 1 rank lists for pp=2"),
    (["0F0 0W0 0I0"], 1, 1, "runs before 0I0"),
    (["0F5 0B5"], 1, 1, "rank 0 action 0 \\(0F5\\): stage or micro-batch out of range"),
])
def test_validate_errors(rows, p, m, message):
    with pytest.raises(SpecError, match=message):
        validate(_sched(rows, p, m))


def test_split_backward_validates_and_times():
    s = _sched(["0F0 0I0 0W0", "1F0 1I0 1W0"], 2, 1)
    validate(s)
    # 1F0 ends 2; 1I0 1..: I = t_b − t_w = 1.5 → 3.5; 0I0 3.5..5; 0W0 5..5.5.
    assert dry_run(s, 1.0, 2.0, t_w_s=0.5).makespan_s == pytest.approx(5.5, abs=1e-12)


def test_dry_run_rejects_bad_times():
    with pytest.raises(SpecError, match="t_fwd_s: give one non-negative time, or one per stage \\(2\\)"):
        dry_run(gpipe(2, 2), (1.0, 2.0, 3.0), 1.0)
    with pytest.raises(SpecError, match="t_w_s"):
        dry_run(gpipe(2, 2), 1.0, 1.0, t_w_s=2.0)


# --- CSV -----------------------------------------------------------------------------------------
def test_csv_round_trip_and_idle_cells():
    s = interleaved_1f1b(2, 4, 2)
    back = from_csv(to_csv(s), ScheduleKind.INTERLEAVED)
    assert back == s
    # torch's _dump_csv writes None (an idle slot) as an empty cell
    loaded = from_csv("0F0,,0B0\n,1F0,1B0\n")
    assert (loaded.p, loaded.m, loaded.v) == (2, 1, 1)
    validate(loaded)
    with pytest.raises(SpecError, match="no rows"):
        from_csv("\n")
    with pytest.raises(SpecError, match="3 stages do not split evenly over 2 ranks"):
        from_csv("0F0,2F0\n1F0\n")


def test_csv_parses_with_torch_action_reader(tmp_path):
    torch_sched = pytest.importorskip("torch.distributed.pipelining.schedules")
    s = interleaved_1f1b(4, 8, 2)
    rows = [[torch_sched._Action.from_str(cell) for cell in line.split(",")] for line in to_csv(s).splitlines()]
    mapping = torch_sched._validate_schedule(dict(enumerate(rows)), 4, 8, 8)
    assert mapping == {st: st % 4 for st in range(8)}


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (2, 4, 3), (4, 4, 2), (3, 6, 2)])
def test_interleaved_matches_torch_interleaved_1f1b(p, m, v):
    # torch's ScheduleInterleaved1F1B computes the same per-rank order (None = idle slots dropped).
    mod = pytest.importorskip("torch.distributed.pipelining.schedules")
    obj = object.__new__(mod.ScheduleInterleaved1F1B)
    obj.n_local_stages, obj.pp_group_size, obj._n_microbatches = v, p, m
    obj.number_of_rounds = max(1, m // p)
    obj.microbatches_per_round = m // obj.number_of_rounds
    ours = interleaved_1f1b(p, m, v)
    for r in range(p):
        theirs = [str(a) for a in obj._calculate_single_rank_operations(r) if a is not None]
        assert theirs == [str(a) for a in ours.ranks[r]]


# --- properties ----------------------------------------------------------------------------------
@st.composite
def _configs(draw):
    kind = draw(st.sampled_from(list(ScheduleKind)))
    p = draw(st.integers(1, 8))
    if kind is ScheduleKind.INTERLEAVED:
        v = draw(st.integers(1, 4)) if p > 1 else 1  # interleaving needs pp >= 2
        m = p * draw(st.integers(1, max(1, 16 // p)))
    else:
        v, m = 1, draw(st.integers(1, 16))
    return kind, p, m, v


@settings(max_examples=60, deadline=None)
@given(_configs(), st.floats(0.1, 3.0), st.floats(0.1, 3.0), st.floats(0.0, 1.0))
def test_every_generated_schedule_validates(config, t_f, t_b, t_p2p):
    kind, p, m, v = config
    s = make_schedule(kind, p, m, v)
    validate(s)
    run = dry_run(s, t_f, t_b, t_p2p)
    # every rank computes m·v·(t_f + t_b): the makespan can never be shorter
    for busy in run.busy_s:
        assert busy == pytest.approx(m * v * (t_f + t_b), rel=1e-9)
    assert run.makespan_s >= m * v * (t_f + t_b) - 1e-9
    # 1F1B-family memory bound on the first stage; GPipe holds all m
    bound = m if kind is ScheduleKind.GPIPE else (min(m, p) if v == 1 else m * v)
    assert max_in_flight(s, 0) <= bound


def test_interleaving_needs_two_pipeline_ranks():
    """pp = 1 with v = 2 was accepted and quietly ran the chunks in order (issue 15 review); Megatron-LM
    refuses a virtual pipeline without pipeline parallelism (parallel_state.py)."""
    from simulator.errors import SpecError
    from simulator.schedules import interleaved_ok, make_schedule

    assert not interleaved_ok(4, 1) and interleaved_ok(4, 2)
    with pytest.raises(SpecError, match=r"^schedule: interleaving 2 chunks needs pp ≥ 2"):
        make_schedule(ScheduleKind.INTERLEAVED, 1, 4, 2)


def test_micro_batches_past_the_guard_are_refused_everywhere():
    """1e11 sequences on 8 GPUs was 1.25e10 micro-batches: the closed form walked them for minutes
    (issue 15 §2). The schedule, the layout and the planner's array rule refuse it alike."""
    import numpy as np

    from simulator.cluster.io import load_cluster
    from simulator.errors import SpecError
    from simulator.schedules import MAX_MICRO_BATCHES, make_schedule
    from simulator.strategy import Strategy, build_layout
    from simulator.strategy.rules import Candidates, valid_mask
    from simulator.workload import get_preset

    assert len(make_schedule(ScheduleKind.ONE_F_ONE_B, 2, MAX_MICRO_BATCHES).ranks[0]) == 2 * MAX_MICRO_BATCHES
    with pytest.raises(SpecError, match=r"^micro_batches: 65,537 micro-batches per pipeline and step is past"):
        make_schedule(ScheduleKind.GPIPE, 2, MAX_MICRO_BATCHES + 1)
    model, cluster = get_preset("gpt3-125m"), load_cluster("dgx-h100")
    with pytest.raises(SpecError, match=r"^micro_batches: 12,500,000,000 micro-batches"):
        build_layout(Strategy(global_batch=10**11, dp=8), cluster, model)
    gbs = np.array([8 * MAX_MICRO_BATCHES, 8 * MAX_MICRO_BATCHES + 8])
    mask = valid_mask(Candidates.of(dp=8, tp=1, pp=1, v=1, micro_batch=1, global_batch=gbs, interleaved=False), 8, model)
    assert mask.tolist() == [True, False]
