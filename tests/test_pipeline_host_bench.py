"""The probe of torch's pipeline runtime per action (executor/pipeline_host_bench.py): two gloo processes run the
simulator's GPipe list with torch's ``_PipelineScheduleRuntime`` under the executor's phase clock; the term is what
no phase covers, per action of the ranks' lists, and the posting of each send and receive. Checked: the lists'
lengths (torch's, 19 per rank for p = 2, m = 4, 8 of them sends and receives), the formulas on the returned
timings (the per-action and per-post terms, and the stages' bookkeeping per forward and backward, 8 per rank), and
the outside-the-phases arithmetic by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from executor.pipeline_host_bench import _outside_s, time_pipeline_actions
from simulator.schedules import ScheduleKind


def test_outside_is_the_step_less_every_phase_by_hand():
    """A 10 ms step: forward 2, backward 3, posting 1 ms, waits 0.5 ms (paired) + 0.25 ms (pending): 3.25 ms."""
    clock = SimpleNamespace(forward_s=2e-3, backward_s=3e-3, comm_s=1e-3, waits=[(0, 500_000, (0, 0, 0))],
                            _pending=[(1_000_000, 1_250_000)])
    assert _outside_s(clock, 10e-3) == pytest.approx(3.25e-3, rel=1e-12)


def test_two_gloo_ranks_time_the_runtime_per_action():
    t = time_pipeline_actions(pp=2, micro_batches=4, kind=ScheduleKind.GPIPE, repeats=10, warmup=2)
    assert t.actions == (19, 19)  # 4 F + 4 B + 8 sends/receives + UNSHARD, REDUCE_GRAD, RESHARD
    assert all(o.p10_s <= o.median_s <= o.p90_s for o in t.outside)
    assert t.action_us == pytest.approx(max(0.0, sum(o.median_s for o in t.outside) / 38 * 1e6), rel=1e-12)
    assert t.action_us > 0  # the runtime does host work outside every phase
    assert t.p2p == (8, 8)  # rank 0: 4 SEND_F + 4 RECV_B; rank 1: 4 RECV_F + 4 SEND_B
    assert all(o.p10_s <= o.median_s <= o.p90_s for o in t.post)
    assert t.post_us == pytest.approx(sum(o.median_s for o in t.post) / 16 * 1e6, rel=1e-12)
    assert t.post_us > 0  # posting a gloo send or receive blocks the rank's thread
    assert t.compute == (8, 8)  # 4 F + 4 B per rank
    assert all(o.p10_s <= o.median_s <= o.p90_s for o in t.chunk)
    assert t.chunk_us == pytest.approx(max(0.0, sum(o.median_s for o in t.chunk) / 16 * 1e6), rel=1e-12)
    assert t.chunk_us > 0  # the stage's bookkeeping around its module
