"""The analytical engine reads the pipeline schedule's action lists: hand-worked 1F1B times, and schedules
loaded from torch-format CSV files (:func:`simulator.schedules.from_csv`)."""

from dataclasses import replace

import numpy as np
import pytest

from simulator.analytical import estimate_work
from simulator.analytical_formula import PART_KINDS, StepArrays, pipeline_time, stack
from simulator.cluster.io import load_cluster
from simulator.compile import CostCache, compile_step
from simulator.errors import SpecError
from simulator.schedule_shape import PipelineFamily, schedule_shape
from simulator.schedule_dry_run import dry_run
from simulator.schedules import ScheduleKind, from_csv, make_schedule, to_csv
from simulator.strategy import Strategy
from simulator.workload import load_model


def pipeline(kind, F, B, c, m):
    """(closed form, list scheduler) pipeline seconds of ``kind`` over stages F, B with p2p ``c`` per hop."""
    p = len(F)
    Fa, Ba = np.array([F], float), np.array([B], float)
    a = StepArrays(p=p, v=1, F=Fa, B=Ba, parts=np.zeros((1, p, len(PART_KINDS))), cf=np.full((1, p - 1), c),
                   cb=np.full((1, p - 1), c), tail=np.zeros((1, p)), sync_exposed=np.zeros((1, p, 4)),
                   opt=np.zeros((1, p)), after=np.zeros((1, p, 4)), data=np.zeros(1))
    sched = make_schedule(kind, p, m)
    T, _ = pipeline_time(a, stack([schedule_shape(sched)]))
    return float(T[0]), dry_run(sched, tuple(F), tuple(B), c).makespan_s


def test_1f1b_two_ranks_two_micro_batches_with_p2p():
    """p = 2, m = 2, F = 1, B = 2 (w = 3), c = 0.5 per hop. Rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1.
    Rank 0's F0 0–1, F1 1–2; rank 1's F0 1.5–2.5, B0 2.5–4.5, F1 (rank 0's at 2 + 0.5) 4.5–5.5, B1 5.5–7.5;
    rank 0's B0 (4.5 + 0.5) 5–7, B1 (7.5 + 0.5) 8–10. So 3w + 2c = 10. The former period
    max(w, (2w + 2c)/2) = w + c counted a round trip rank 0 never makes: 2w + (w + c) + 2c = 10.5."""
    got, truth = pipeline(ScheduleKind.ONE_F_ONE_B, (1.0, 1.0), (2.0, 2.0), 0.5, 2)
    assert truth == pytest.approx(10.0, abs=1e-12)
    assert got == pytest.approx(10.0, abs=1e-12)


def test_1f1b_five_ranks_heavy_first_stage():
    """p = 5, m = 6, no p2p, stage 0 10 % heavier: F = (1.1, 1, 1, 1, 1), B = 2F, so w = (3.3, 3, 3, 3, 3) and
    a round trip of one micro-batch takes R = Σw = 15.3. Rank 0 runs F0–F4 and waits for micro-batch 0's trip:
    B0 ends at R = 15.3; F5 only comes after B0, and B5 after micro-batch 5's own trip: 2R = 30.6, while
    rank 0's other backwards (B1–B4, 8.8 s) fit inside that trip. The former closed form took the steady
    period max w = 3.3 for all m − 1 micro-batches: Σw + 5·3.3 = 31.8, though rank 0 (p − r = 5 = m − 1)
    never reaches a steady state."""
    F = (1.1, 1.0, 1.0, 1.0, 1.0)
    got, truth = pipeline(ScheduleKind.ONE_F_ONE_B, F, tuple(2 * f for f in F), 0.0, 6)
    assert truth == pytest.approx(30.6, abs=1e-12)
    assert got == pytest.approx(30.6, abs=1e-12)


@pytest.fixture(scope="module")
def works():
    """gpt3-125m on one DGX H100, dp 2 × tp 2 × pp 2, m = 8: compiled with 1F1B and with GPipe."""
    cluster, model = load_cluster("dgx-h100"), load_model("gpt3-125m").with_seq(1024)
    cache = CostCache(cluster)
    base = dict(global_batch=16, micro_batch=1, dp=2, tp=2, pp=2)
    return {kind: compile_step(cluster, model, Strategy(**base, schedule=kind), cache=cache, memory=False)
            for kind in (ScheduleKind.ONE_F_ONE_B, ScheduleKind.GPIPE)}


def test_a_schedule_loaded_from_its_csv_gives_the_built_in_estimate(works):
    work = works[ScheduleKind.ONE_F_ONE_B]
    loaded = from_csv(to_csv(work.schedule))
    assert loaded.kind is None and schedule_shape(loaded).family is PipelineFamily.ONE_F_ONE_B
    assert estimate_work(replace(work, schedule=loaded)).step_time_s == estimate_work(work).step_time_s


def test_a_hand_edited_csv_is_simulated_as_written(works):
    """Each rank's row of the 1F1B file rewritten as all its forwards, then all its backwards: that is GPipe's
    order, so the estimate is the GPipe step's (same compiled work). (Here GPipe and 1F1B take the same time:
the heavier last stage sets both; they differ in memory.)"""
    work = works[ScheduleKind.ONE_F_ONE_B]
    rows = [",".join(sorted(line.split(","), key=lambda cell: "B" in cell)) for line in to_csv(work.schedule).split()]
    assert rows[0].startswith("0F0,0F1,0F2,0F3,0F4,0F5,0F6,0F7,0B0")
    loaded = from_csv("\n".join(rows))
    assert schedule_shape(loaded).family is PipelineFamily.ALL_FORWARDS_FIRST
    edited = estimate_work(replace(work, schedule=loaded))
    assert edited.step_time_s == estimate_work(works[ScheduleKind.GPIPE]).step_time_s


def test_a_schedule_without_a_closed_form_is_refused(works):
    """Rank 0 of a 2-rank 1F1B with one warm-up forward less (F0 B0 F1 B1 …, as rank 1): valid, but not a
    family the closed form follows; the error points to the discrete-event engine."""
    work = works[ScheduleKind.ONE_F_ONE_B]
    lines = to_csv(work.schedule).split()
    edited = from_csv("\n".join([lines[1].replace("1F", "0F").replace("1B", "0B"), lines[1]]))
    with pytest.raises(SpecError, match="discrete-event"):
        estimate_work(replace(work, schedule=edited))
    with pytest.raises(SpecError, match="micro-batches"):
        estimate_work(replace(work, schedule=make_schedule(ScheduleKind.ONE_F_ONE_B, 2, 4)))
