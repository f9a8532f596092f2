"""GPipe's send-first transfers in the analytical engine (simulator/receive_first.py, simulator/analytical_formula.py
``gpipe_servers``): a transfer sent before its receive is posted moves only once the receiver posts it, after its
previous action, so the receiver waits its whole price and the boundary joins the receiving stage's server, as the
DES plays it (simulator/engine/rank.py ``_p2p``). Before this, the closed form treated it as a delay overlapping
the receiver's compute and sat 7-34 % below the DES on the suite's GPipe case."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.analytical_formula import PipelineArrays, StepArrays, pipeline_time
from simulator.receive_first import expected_boundaries, expected_prices
from simulator.schedules import ActionKind, gpipe

sys.path.insert(0, str(Path(__file__).parent))
from test_receive_first import _estimates, _run_cluster  # noqa: E402  the recorded runs on a receive-first cluster

F, B = ActionKind.F, ActionKind.B


def test_serial_share_by_hand():
    """GPipe, p = 2, m = 4, forward 1 s, backward 2 s, a send 3 s or, receive first, 0.5 s. Rank 1 posts micro-batch
    0's receive at 0 (before rank 0 sends it at 1: receive first), every later one right before its forward, after
    rank 0 sent it: send first, 3 of the 3 transfers after micro-batch 0's. Backward mirrored (rank 0 posts B3's
    receive after its F3, before rank 1 sends it)."""
    got = expected_prices(gpipe(2, 4), [1.0, 1.0], [2.0, 2.0], {(0, F): 3.0, (1, B): 3.0}, {(0, F): 0.5, (1, B): 0.5})
    assert got[(0, F)][0] == pytest.approx((0.5 + 3 * 3.0) / 4)
    assert got[(0, F)][2] == pytest.approx(1.0) and got[(1, B)][2] == pytest.approx(1.0)


def _arrays(F_s, B_s, cf, cb, serial_cf, serial_cb) -> StepArrays:
    z = np.zeros((1, 2))
    return StepArrays(p=2, v=1, F=np.array([F_s]), B=np.array([B_s]), parts=np.zeros((1, 2, 7)),
                      cf=np.array([cf]), cb=np.array([cb]), tail=z, sync_exposed=np.zeros((1, 2, 4)), opt=z,
                      after=np.zeros((1, 2, 4)), data=np.zeros(1), serial_cf=np.array([serial_cf]),
                      serial_cb=np.array([serial_cb]))


def test_gpipe_time_by_hand():
    """The case above walked by hand as the DES plays it: rank 1's F0 1.5-2.5, each later forward waits 3 s after
    its post (F3 13.5-14.5); B3 14.5-16.5 reaches rank 0 at 17 (posted at 4), B3 17-19; B2 sent at 18.5, posted
    at 19, arrives 22; B1 27, B0 32-34: 34 s. Flow shop: Σw + C + (m − 1)·(max(F_1 + c̄, F_0) + max(B_0 + c̄, B_1))
    with c̄ = 2.375 s = 6 + 4.75 + 3 × 7.75 = 34. Without the serial share the boundary was its own server
    (max(F, c̄)): 6 + 4.75 + 3 × (2.375 + 2.375) = 25."""
    cf, cb, _, _, serial_f, serial_b = expected_boundaries(gpipe(2, 4), [1.0, 1.0], [2.0, 2.0], [3.0], [3.0], [0.5],
                                                           [0.5])
    pipe = PipelineArrays(m=np.array([4.0]), forwards_first=np.array([True]), in_flight=np.array([[4.0, 4.0]]))
    T, hops = pipeline_time(_arrays([1.0, 1.0], [2.0, 2.0], cf, cb, serial_f, serial_b), pipe)
    assert T[0] == pytest.approx(34.0)
    assert hops[0] == pytest.approx(4.75 + 3 * (2.375 + 2.375))   # the waits on the critical path are p2p
    old, _ = pipeline_time(_arrays([1.0, 1.0], [2.0, 2.0], cf, cb, [0.0], [0.0]), pipe)
    assert old[0] == pytest.approx(25.0)


def test_engines_agree_on_the_recorded_gpipe_run():
    """The suite's recorded GPipe run on 2 processes of 2 cores (receive-first prices on): the closed form equals the
    DES (was 7.4 % below it)."""
    analytical, des = _estimates("pp-gpipe", _run_cluster("pp-gpipe"))
    assert analytical.step_time_s == pytest.approx(des.step_time_s, rel=1e-6)
