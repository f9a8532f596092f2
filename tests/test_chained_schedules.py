"""``schedules_per_step``: k pipeline schedules of m / k micro-batches per optimizer step, each with its own fill and
drain (gradient accumulation over k ``schedule.step()`` calls, NeMo AutoModel's loop) [src: automodel-ga-loop]."""

from __future__ import annotations

import pytest

from simulator.analytical import estimate_work
from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.schedule_shape import builtin_shape, schedule_shape
from simulator.schedules import ScheduleKind, make_schedule
from simulator.strategy import Strategy
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-h100"), get_preset("gpt3-1.3b")


def test_chained_lists_and_their_shape():
    """Two runs of 1F1B over 2 ranks and 2 micro-batches: rank 0 runs F0 F1 B0 B1 then F2 F3 B2 B3; the closed form
    reads one run of 2 chained twice, from the lists or from the formula alike."""
    sched = make_schedule(ScheduleKind.ONE_F_ONE_B, 2, 4, schedules=2)
    assert (sched.m, sched.schedules) == (4, 2)
    assert [str(a) for a in sched.ranks[0]] == ["0F0", "0F1", "0B0", "0B1", "0F2", "0F3", "0B2", "0B3"]
    shape = schedule_shape(sched)
    assert (shape.m, shape.schedules, shape.in_flight) == (2, 2, (2, 1))
    assert builtin_shape(ScheduleKind.ONE_F_ONE_B, 2, 4, 1, 2) == shape


def _step(k: int, **fields):
    strategy = Strategy(global_batch=64, micro_batch=1, dp=4, pp=2, schedules_per_step=k, **fields)
    return compile_step(CLUSTER, MODEL, strategy)


@pytest.mark.parametrize("fields", [{}, dict(schedule=ScheduleKind.INTERLEAVED, virtual_stages=2)])
def test_engines_agree_and_each_run_pays_its_fill_and_drain(fields):
    """m 16 as 1, 2, 4 runs: the DES plays the chained lists, the closed form charges k·T(m / k); they agree within
    1 %, and the step grows with k (one more fill and drain per run; the gradient sync and optimizer once)."""
    steps = []
    for k in (1, 2, 4):
        work = _step(k, **fields)
        a, d = estimate_work(work).step_time_s, simulate(work, CLUSTER, trace=False).step_time_s
        assert d == pytest.approx(a, rel=0.01), k
        steps.append(a)
    assert steps[0] < steps[1] < steps[2]


@pytest.mark.parametrize("fields, message", [
    (dict(pp=1, dp=8), "schedules_per_step: 2 schedules per step need pp > 1"),
    (dict(global_batch=6), "schedules_per_step: 2 does not divide the 3 micro-batches"),
    (dict(global_batch=24, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2),
     "schedules_per_step: each of 2 interleaved schedules gets 6 micro-batches, not a multiple of pp 4"),
    (dict(schedules_per_step=0), "schedules_per_step: must be a positive integer"),
])
def test_one_line_errors_name_the_field(fields, message):
    base = dict(global_batch=64, micro_batch=1, dp=2, pp=4, schedules_per_step=2)
    with pytest.raises(SpecError, match="^" + message) as err:
        compile_step(CLUSTER, MODEL, Strategy(**{**base, **fields}))
    assert "\n" not in str(err.value)
