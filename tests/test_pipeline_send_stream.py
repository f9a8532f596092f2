"""The analytical engine's pipeline with p2p sends that outlast the stages' actions (simulator/analytical_formula.py):
each rank's sends run one at a time on its p2p stream, as the DES plays them (simulator/engine/rank.py ``_p2p``),
so slow sends pace the pipeline. Hand-worked arrays, then the default suite's recorded GPipe and interleaved runs
(tests/data/suite_default, the lead's quiet run 1 of 2026-11-25) on their recorded cluster, whose gloo call costs
1.66 ms per send against 0.22-0.36 ms of compute per micro-batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.analytical_formula import PipelineArrays, StepArrays, pipeline_time, send_stream_s
from simulator.analytical_send_stream import first_send, last_send
from simulator.schedules import ActionKind, ScheduleKind, make_schedule
from simulator.run_results import load_results
from simulator.validate import estimate_run, run_cluster

DATA = Path(__file__).parent / "data" / "suite_default"


def _arrays(F, B, cf, cb, p, v=1) -> StepArrays:
    n = len(F)
    z = np.zeros((1, p))
    return StepArrays(p=p, v=v, F=np.array([F], float), B=np.array([B], float), parts=np.zeros((1, n, 7)),
                      cf=np.array([cf], float), cb=np.array([cb], float), tail=z, sync_exposed=np.zeros((1, p, 4)),
                      opt=z, after=np.zeros((1, p, 4)), data=np.zeros(1))


def _pipe(m: int, p: int, forwards_first: bool, in_flight) -> PipelineArrays:
    return PipelineArrays(m=np.array([float(m)]), forwards_first=np.array([forwards_first]),
                          in_flight=np.array([in_flight], float))


def test_gpipe_paced_by_its_sends_by_hand():
    """p = 2, m = 4, F = (0.2, 0.25), B = (0.3, 0.35), one boundary with 1.0 s sends each way: a flow shop of
    identical jobs (stage 0, link, stage 1) forward, then back: Σw 1.1 + sends 2.0 + 3·(1.0 + 1.0) = 9.1 s, of
    which p2p 2.0 + 3·2.0 = 8.0 s. Sends of 0.1 s (faster than every action) leave the old path:
    1.1 + 0.2 + 3·(0.25 + 0.35) = 3.1 s."""
    T, crit = pipeline_time(_arrays([0.2, 0.25], [0.3, 0.35], [1.0], [1.0], p=2), _pipe(4, 2, True, [4, 4]))
    assert (T[0], crit[0]) == pytest.approx((9.1, 8.0), rel=1e-12)
    T, crit = pipeline_time(_arrays([0.2, 0.25], [0.3, 0.35], [0.1], [0.1], p=2), _pipe(4, 2, True, [4, 4]))
    assert (T[0], crit[0]) == pytest.approx((3.1, 0.2), rel=1e-12)


def test_send_stream_load_by_hand():
    """p = 2, v = 2 (chunks 0-3 on ranks 0, 1, 0, 1): forward sends of boundaries 0 and 2 leave rank 0, of 1
    rank 1; backward sends of boundaries 0 and 2 leave rank 1, of 1 rank 0. cf = (1, 2, 3), cb = (10, 20, 30):
    rank 0 sends 1 + 3 + 20 = 24 s, rank 1 2 + 10 + 30 = 42 s per micro-batch; m = 3: 126 s of rank 1's stream.
    Rank 1's first send is its forward of chunk 1, after F0 + cf0 + F1 = 1.2 s (1 s of it p2p); its last is the
    backward of chunk 1, which B0 = 0.2 s follows: 1.2 + 126 + 0.2 = 127.4 s, 127 s p2p. Rank 0: F0 0.1 + 72 +
    (its last send, chunk 2's backward, feeds B1 + cb0 + B0 = 10.4) = 82.5 s. (The floor was 126 s: the stream
    alone.)"""
    a = _arrays([0.1] * 4, [0.2] * 4, [1.0, 2.0, 3.0], [10.0, 20.0, 30.0], p=2, v=2)
    assert send_stream_s(a).tolist() == [[24.0, 42.0]]
    T, crit = pipeline_time(a, _pipe(3, 2, False, [3, 3]))
    assert (T[0], crit[0]) == pytest.approx((127.4, 127.0), rel=1e-12)


def test_one_f_one_b_paced_by_its_sends_by_hand():
    """The CPU suite's pp-dp as the 2026-11-25 17:29 calibration prices it (1F1B, p = 2, m = 2; F = (0.697, 0.775),
    B = (0.892, 0.979) ms, 4.246 ms per send each way), walked by hand as the DES plays it: rank 0's F0 ends at
    0.697, its two forward sends run back to back on its stream until 0.697 + 2·4.246 = 9.189; rank 1's F and B
    of micro-batch 1 end at 10.943, its backward send (after micro-batch 0's, 6.697-10.943) at 15.189, rank 0's
    last B at 16.081 ms. The paths of the 1F1B family give 13.59 ms (each send a delay) and the former floor
    m·S = 8.49 ms; the stream's floor with its head and rest is the DES's 16.081 ms."""
    a = _arrays([0.697, 0.775], [0.892, 0.979], [4.246], [4.246], p=2)
    T, crit = pipeline_time(a, _pipe(2, 2, False, [2, 1]))
    assert T[0] == pytest.approx(16.081, rel=1e-9)
    assert crit[0] == pytest.approx(3 * 4.246, rel=1e-9)


@pytest.mark.parametrize("p,v,m", [(2, 1, 4), (3, 1, 2), (4, 1, 8), (2, 2, 4), (2, 3, 6), (3, 2, 6), (4, 2, 8),
                                   (4, 3, 4)])
def test_first_and_last_send_read_from_the_lists(p, v, m):
    """:func:`first_send` and :func:`last_send` name, per rank, the first and last action of its built list that
    sends (a forward of any chunk but the last, a backward of any chunk but the first)."""
    kind = ScheduleKind.INTERLEAVED if v > 1 else ScheduleKind.ONE_F_ONE_B
    schedule = make_schedule(kind, p, m, v)
    n = p * v
    for r, acts in enumerate(schedule.ranks):
        sending = [(a.stage, a.kind) for a in acts
                   if (a.kind is ActionKind.F and a.stage < n - 1) or (a.kind is ActionKind.B and a.stage > 0)]
        assert (first_send(p, v, r), last_send(p, v, r)) == (sending[0], sending[-1])


def test_recorded_pp_dp_engines_agree():
    """The recorded pp-dp (1F1B, p = 2, dp = 2, m = 2) on its recorded cluster: the analytical engine's step is the
    DES's within 0.1 % (20.305 against 20.319 ms); it was 18.237 ms with the stream alone as the floor."""
    results = load_results(DATA / "pp-dp.results.json")
    analytical, des = estimate_run(results, run_cluster(results, str(DATA / "cluster.yaml")))
    assert analytical.step_time_s == pytest.approx(des.step_time_s, rel=1e-3)
    assert analytical.step_time_s <= des.step_time_s * (1 + 1e-9)


def test_recorded_gpipe_engines_agree():
    """The recorded pp-gpipe (p = 2, m = 4): the analytical engine equals the DES (14.80 ms); it gave 6.67 ms
    treating each 1.66 ms send as a delay that overlaps the next one."""
    results = load_results(DATA / "pp-gpipe.results.json")
    analytical, des = estimate_run(results, run_cluster(results, str(DATA / "cluster.yaml")))
    assert analytical.step_time_s == pytest.approx(des.step_time_s, rel=1e-9)
    assert analytical.step_time_s > 0.014


def test_recorded_interleaved_not_below_its_send_stream():
    """The recorded pp-interleaved (p = 2, v = 2, m = 4): rank 0 sends 2 forward and 1 backward 1.66 ms calls
    per micro-batch: at least 4·3·1.66 ms = 19.9 ms of pipeline (it gave 15.5 ms in all), the DES 26.1 ms; with
    the stream's head and rest, 24.8 ms (22.3 ms before)."""
    results = load_results(DATA / "pp-interleaved.results.json")
    analytical, des = estimate_run(results, run_cluster(results, str(DATA / "cluster.yaml")))
    assert 0.0245 < analytical.step_time_s <= des.step_time_s
