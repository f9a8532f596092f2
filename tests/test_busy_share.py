"""simulator/busy_share.py: a run's busy processes per core against the modelled time-sharing (val29)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.busy_share import BusyShare, busy_share
from simulator.results import Engine
from simulator.run_results import RankResult
from simulator.validate import compare
from simulator.validate_report import format_validation
from tests.test_validate import _results, _step


def _ranks(n: int, step_s=(1.0, 0.100, 0.100), fwd_s=(0.5, 0.030, 0.030), bwd_s=(0.3, 0.020, 0.020),
           opt_s=(0.1, 0.005, 0.015), tp_s=(0.1, 0.040, 0.030)) -> tuple:
    return tuple(RankResult(rank=r, step_time_s=step_s, loss=(4.0,) * len(step_s),
                            phases_s={"forward": fwd_s, "backward": bwd_s, "optimizer": opt_s, "tp": tp_s})
                 for r in range(n))


def _run(n: int, cores: int | None = 2, **phases):
    base = _results()
    env = dict(base.environment) | ({"cores": cores} if cores is not None else {})
    return replace(base, ranks=_ranks(n, **phases), environment=env)


def test_hand_worked_four_ranks_on_two_cores():
    """Per measured step (warm-up 1): (0.030 + 0.020 + 0.005) / 0.100 = 0.55 and (0.030 + 0.020 + 0.015) / 0.100
    = 0.65, the same on 4 ranks -> median u = 0.60; busy per core 4 · 0.60 / 2 = 1.20 against 4 / 2 = 2.0. The tp
    wait is not busy time."""
    shared = busy_share(_run(4))
    assert shared.busy_fraction == pytest.approx(0.60)
    assert shared.busy_per_core == pytest.approx(1.20)
    assert shared.modelled_share == pytest.approx(2.0)
    assert "60%" in shared.note() and "1.20 busy processes per core" in shared.note() and "4 / 2 = 2.00" in shared.note()


def test_docstring_example():
    """The module docstring's example: u = 0.55, 4 ranks, 2 cores -> 1.10."""
    assert BusyShare(busy_fraction=0.55, processes=4, cores=2).busy_per_core == pytest.approx(1.10)


@pytest.mark.parametrize("n, cores", [(2, 2), (1, 2), (4, None), (4, 0)])
def test_nothing_time_shared_or_no_cores_stated_gives_none(n, cores):
    assert busy_share(_run(n, cores=cores)) is None


def test_busy_never_exceeds_processes_per_core_when_phases_fit_the_step():
    """Busy phases within the step: u <= 1, so busy per core <= processes / cores."""
    shared = busy_share(_run(8, opt_s=(0.1, 0.050, 0.050)))
    assert shared.busy_fraction <= 1.0 and shared.busy_per_core <= shared.modelled_share


def test_validation_reports_it_for_a_time_shared_run_only():
    """compare() keeps it where processes outnumber cores, and the text table prints it (fails without val29's
    change); not among the notes a suite gathers across cases."""
    est = _step(Engine.ANALYTICAL, 0.1, forward=0.03)
    shared = compare(_run(4), est, est, "hand")
    assert shared.busy.busy_per_core == pytest.approx(1.20) and shared.to_dict()["busy_per_core"] == pytest.approx(1.20)
    assert "note: busy phases" in format_validation(shared)
    assert not any("busy" in n for n in shared.notes)
    alone = compare(_run(2), est, est, "hand")
    assert alone.busy is None and "busy phases" not in format_validation(alone)
