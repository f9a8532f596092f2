"""Walking a pipeline schedule without an engine: its dry run (a list scheduler) and its validity check.

:func:`dry_run` times a :class:`~simulator.schedules.PipelineSchedule`'s action lists on ideal
ranks: each rank runs its actions in order, each as early as its dependencies allow (no events,
no contention), so the makespan is the critical-path time of the action order. With equal stage
times and free p2p, GPipe and 1F1B give the bubble (p − 1)/(m + p − 1) of the step (Huang et al.
2019; PipeDream-Flush, Narayanan et al. 2021) and interleaved 1F1B 1/v of it (Narayanan et al.
SC'21 §2.2). :func:`validate` checks a schedule (one read from a file, say) can run, a unit-time
dry run included. The schedules themselves, their generators and their CSV form are in
:mod:`simulator.schedules`.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import SpecError
from simulator.schedules import Action, ActionKind, PipelineSchedule


@dataclass(frozen=True)
class DryRun:
    """Timing of a schedule by :func:`dry_run`: when each action ran and how busy each rank was."""

    makespan_s: float
    """End of the last action, seconds from the start of the step."""
    busy_s: tuple[float, ...]
    """Seconds each rank computed."""
    timeline: tuple[tuple[int, Action, float, float], ...]
    """(rank, action, start_s, end_s) of every action, in the order they were timed."""

    @property
    def idle_s(self) -> tuple[float, ...]:
        """Seconds each rank waited within the makespan: ``makespan − busy``."""
        return tuple(self.makespan_s - b for b in self.busy_s)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all ranks' time: ``Σ idle / (p · makespan)``."""
        return sum(self.idle_s) / (len(self.busy_s) * self.makespan_s)


def _per_stage(name: str, value, n: int) -> tuple[float, ...]:
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,) * n
    if len(values) != n or any(not isinstance(x, (int, float)) or x < 0 for x in values):
        raise SpecError(name, f"give one non-negative time, or one per stage ({n}), got {value!r}")
    return tuple(float(x) for x in values)


def dry_run(schedule: PipelineSchedule, t_fwd_s, t_bwd_s, t_p2p_s: float = 0.0,
            t_w_s=None) -> DryRun:
    """Time ``schedule`` with a list scheduler: each rank runs its actions in order, each as early as
    its dependencies allow. No events, no contention: the critical-path time of the action order.

    Times are per stage (one number for all, or a tuple per global stage). ``t_bwd_s`` is a full
    backward; a split backward's ``W`` takes ``t_w_s`` (default half the backward, an assumption)
    and its ``I`` the rest. Dependencies: F(s, j) after F(s−1, j); B or I(s, j) after B or I(s+1, j),
    each plus ``t_p2p_s`` when the two stages sit on different ranks; within a rank, list order.
    Raises SpecError naming the stuck actions if the order deadlocks.
    """
    n = schedule.n_stages
    tf, tb = _per_stage("t_fwd_s", t_fwd_s, n), _per_stage("t_bwd_s", t_bwd_s, n)
    tw = tuple(b / 2 for b in tb) if t_w_s is None else _per_stage("t_w_s", t_w_s, n)
    if any(w > b for w, b in zip(tw, tb)):
        raise SpecError("t_w_s", "the weight-gradient time cannot exceed the full backward time")
    duration = {ActionKind.F: tf, ActionKind.B: tb, ActionKind.W: tw,
                ActionKind.I: tuple(b - w for b, w in zip(tb, tw))}
    # (stage, what is ready, micro-batch) -> when: F activations, I the input gradient (of a B or I), W weights
    done: dict[tuple[int, ActionKind, int], float] = {}
    pos, clock = [0] * schedule.p, [0.0] * schedule.p
    busy, timeline = [0.0] * schedule.p, []
    remaining = sum(len(acts) for acts in schedule.ranks)
    while remaining:
        progressed = False
        for r, acts in enumerate(schedule.ranks):
            while pos[r] < len(acts):
                act = acts[pos[r]]
                ready = _ready_time(schedule, act, done, t_p2p_s)
                if ready is None:
                    break
                start = max(clock[r], ready)
                end = start + duration[act.kind][act.stage]
                ready = ActionKind.I if act.kind is ActionKind.B else act.kind  # a full B yields I's gradient
                done[(act.stage, ready, act.microbatch)] = end
                if act.kind is ActionKind.B:
                    done[(act.stage, ActionKind.W, act.microbatch)] = end
                timeline.append((r, act, start, end))
                busy[r] += end - start
                clock[r], pos[r] = end, pos[r] + 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = " ".join(str(acts[pos[r]]) for r, acts in enumerate(schedule.ranks) if pos[r] < len(acts))
            raise SpecError("schedule", f"deadlock: no rank can run its next action ({stuck})")
    makespan = max(clock)
    return DryRun(makespan, tuple(busy), tuple(timeline))


def _ready_time(schedule: PipelineSchedule, act: Action, done: dict, t_p2p_s: float) -> float | None:
    """When ``act``'s cross-action inputs are ready, or None if a producer has not run yet."""
    s, j = act.stage, act.microbatch
    if act.kind is ActionKind.F:
        deps = [(s - 1, ActionKind.F)] if s > 0 else []
    elif act.kind is ActionKind.W:
        deps = [(s, ActionKind.I)]
    else:
        deps = [(s, ActionKind.F)] + ([(s + 1, ActionKind.I)] if s < schedule.n_stages - 1 else [])
    ready = 0.0
    for stage, key in deps:
        if (stage, key, j) not in done:
            return None
        hop = t_p2p_s if stage != s and schedule.rank_of(stage) != schedule.rank_of(s) else 0.0
        ready = max(ready, done[(stage, key, j)] + hop)
    return ready


def validate(schedule: PipelineSchedule) -> None:
    """Check a schedule can run; raise SpecError naming the first violation.

    Each rank touches only its own stages (``stage mod p``); every stage runs every micro-batch's
    forward once and its backward once (a full ``B``, or an ``I`` then a ``W``); on each rank a
    micro-batch's forward precedes its backward; and a dry run with unit times finishes (no deadlock).
    """
    p, m, n = schedule.p, schedule.m, schedule.n_stages
    if len(schedule.ranks) != p:
        raise SpecError("schedule", f"has {len(schedule.ranks)} rank lists for pp={p}")
    seen: dict[tuple[int, ActionKind, int], int] = {}
    for r, acts in enumerate(schedule.ranks):
        for i, act in enumerate(acts):
            where = f"rank {r} action {i} ({act})"
            if not (0 <= act.stage < n and 0 <= act.microbatch < m):
                raise SpecError("schedule", f"{where}: stage or micro-batch out of range "
                                f"({n} stages, {m} micro-batches)")
            if schedule.rank_of(act.stage) != r:
                raise SpecError("schedule", f"{where}: stage {act.stage} belongs to rank {schedule.rank_of(act.stage)}")
            key = (act.stage, act.kind, act.microbatch)
            if key in seen:
                raise SpecError("schedule", f"{where}: runs twice")
            needs = {ActionKind.B: ActionKind.F, ActionKind.I: ActionKind.F, ActionKind.W: ActionKind.I}.get(act.kind)
            if needs is not None and (act.stage, needs, act.microbatch) not in seen:
                raise SpecError("schedule", f"{where}: runs before {act.stage}{needs.value}{act.microbatch}")
            seen[key] = i
    for s in range(n):
        for j in range(m):
            has = {k for k in ActionKind if (s, k, j) in seen}
            if has not in ({ActionKind.F, ActionKind.B}, {ActionKind.F, ActionKind.I, ActionKind.W}):
                kinds = "".join(sorted(k.value for k in has)) or "nothing"
                raise SpecError("schedule", f"stage {s} micro-batch {j} has {kinds}; needs F and B (or F, I and W)")
    dry_run(schedule, 1.0, 1.0)
