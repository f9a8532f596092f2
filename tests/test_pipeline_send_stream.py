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
    rank 0 sends 1 + 3 + 20 = 24 s, rank 1 2 + 10 + 30 = 42 s per micro-batch; m = 3 floors the step at 126 s."""
    a = _arrays([0.1] * 4, [0.2] * 4, [1.0, 2.0, 3.0], [10.0, 20.0, 30.0], p=2, v=2)
    assert send_stream_s(a).tolist() == [[24.0, 42.0]]
    T, crit = pipeline_time(a, _pipe(3, 2, False, [3, 3]))
    assert (T[0], crit[0]) == (126.0, 126.0)


def test_recorded_gpipe_engines_agree():
    """The recorded pp-gpipe (p = 2, m = 4): the analytical engine equals the DES (14.80 ms); it gave 6.67 ms
    treating each 1.66 ms send as a delay that overlaps the next one."""
    results = load_results(DATA / "pp-gpipe.results.json")
    analytical, des = estimate_run(results, run_cluster(results, str(DATA / "cluster.yaml")))
    assert analytical.step_time_s == pytest.approx(des.step_time_s, rel=1e-9)
    assert analytical.step_time_s > 0.014


def test_recorded_interleaved_not_below_its_send_stream():
    """The recorded pp-interleaved (p = 2, v = 2, m = 4): rank 0 sends 2 forward and 1 backward 1.66 ms calls
    per micro-batch: at least 4·3·1.66 ms = 19.9 ms of pipeline (it gave 15.5 ms in all), the DES 24.4 ms."""
    results = load_results(DATA / "pp-interleaved.results.json")
    analytical, des = estimate_run(results, run_cluster(results, str(DATA / "cluster.yaml")))
    assert 0.0199 < analytical.step_time_s <= des.step_time_s
