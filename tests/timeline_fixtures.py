"""Hand-built timelines and step results for the output tests (no engine needed).

``one_f_one_b_timeline(p, m)`` times a 1F1B schedule with :func:`simulator.schedule_dry_run.dry_run`
(forward 1 ms, backward 2 ms per stage) and adds, per rank, one TP all-reduce per compute task on a
``tp`` stream and one DP all-reduce after the last backward on a ``dp`` stream, so the expected
counts are exact: 2·m compute tasks per rank, 2·m TP tasks, 1 DP task.
"""

from __future__ import annotations

import pandas as pd

from simulator.results import Category, Engine, StepResult
from simulator.schedule_dry_run import dry_run
from simulator.schedules import ActionKind, one_f_one_b

T_FWD_S = 1e-3
T_BWD_S = 2e-3
T_TP_S = 1e-4
T_DP_S = 5e-3


def one_f_one_b_timeline(p: int = 4, m: int = 8, category_as_value: bool = False) -> pd.DataFrame:
    run = dry_run(one_f_one_b(p, m), T_FWD_S, T_BWD_S)
    rows = []
    for rank, act, start, end in run.timeline:
        cat = Category.FORWARD if act.kind is ActionKind.F else Category.BACKWARD
        rows.append(dict(rank=rank, stream="compute", name=str(act), category=cat, start_s=start, end_s=end,
                         microbatch=act.microbatch, stage=act.stage))
        rows.append(dict(rank=rank, stream="tp", name="tp all-reduce", category=Category.TP, start_s=end,
                         end_s=end + T_TP_S, microbatch=act.microbatch, stage=act.stage))
    for rank in range(p):
        last = max(r["end_s"] for r in rows if r["rank"] == rank and r["stream"] == "compute")
        rows.append(dict(rank=rank, stream="dp", name="dp bucket 0", category=Category.DP, start_s=last,
                         end_s=last + T_DP_S, microbatch=None, stage=rank))
    frame = pd.DataFrame(rows)
    if category_as_value:
        frame["category"] = [c.value for c in frame["category"]]
    return frame


def step_result(engine: Engine = Engine.DES, with_timeline: bool = True, **extras) -> StepResult:
    """A 4-stage result whose breakdown sums to the step (numbers chosen by hand, not by an engine)."""
    breakdown = {Category.FORWARD: 0.8, Category.BACKWARD: 1.6, Category.TP: 0.2, Category.DP: 0.1,
                 Category.BUBBLE: 0.3}
    per_rank = pd.DataFrame([
        dict(rank=r, stage=r, forward=0.8, backward=1.6, tp=0.2, dp=0.1 - 0.01 * r, bubble=0.3) for r in range(4)])
    return StepResult(engine=engine, step_time_s=3.0, tokens_per_step=8 * 2048, model_flops_per_step=6e15,
                      hardware_flops_per_step=8e15, world_size=16, peak_flops_per_gpu=312e12,
                      breakdown=breakdown, per_rank=per_rank,
                      timeline=one_f_one_b_timeline() if with_timeline else None, extras=extras)
