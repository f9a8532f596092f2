"""Shared by the engine's shortcut tests (test_engine_fold, test_engine_callfold, test_engine_fold_calls): run a
step with a shortcut on and off, and assert two runs give the same results.

A shortcut is a class with an ``enabled`` switch (``Folder``, ``CallFolder``); every test compares step time,
breakdown, per-rank accounts and timeline of the shortcut run with the plain one."""

import pandas as pd
import pytest

from simulator.engine.step import simulate


def on_and_off(monkeypatch, switch, work, cluster, **kw):
    """``simulate`` with ``switch.enabled`` on, then off (restored on afterwards)."""
    on = simulate(work, cluster, **kw)
    monkeypatch.setattr(switch, "enabled", False)
    off = simulate(work, cluster, **kw)
    monkeypatch.setattr(switch, "enabled", True)
    return on, off


def assert_same_run(a, b, rel: float, *, step_abs: float | None = 0.0) -> None:
    """``a`` equals ``b`` within ``rel`` relative (0: bit for bit): step time (absolute slack ``step_abs``; None:
    pytest's default), each breakdown category and the per-rank and timeline frames (absolute slack 1e-15 when
    ``rel`` is not 0)."""
    step = (pytest.approx(b.step_time_s, rel=rel) if step_abs is None
            else pytest.approx(b.step_time_s, rel=rel, abs=step_abs))
    assert a.step_time_s == step
    assert set(a.breakdown) == set(b.breakdown)
    atol = 1e-15 if rel else 0.0
    for cat, value in b.breakdown.items():
        assert a.breakdown[cat] == pytest.approx(value, rel=rel, abs=atol), cat
    pd.testing.assert_frame_equal(a.per_rank, b.per_rank, rtol=rel or 1e-16, atol=atol)
    if b.timeline is not None:
        pd.testing.assert_frame_equal(_by_identity(a.timeline), _by_identity(b.timeline), rtol=rel or 1e-16, atol=atol)


def _by_identity(timeline: pd.DataFrame) -> pd.DataFrame:
    """The timeline's rows by what they are (rank, stream, name, ...), then by start: the engine lists them by
    start time, and two starts an ulp apart (within ``rel``) may be listed in either order."""
    keys = [c for c in timeline.columns if c not in ("start_s", "end_s")] + ["start_s"]
    return timeline.sort_values(keys, kind="stable").reset_index(drop=True)
