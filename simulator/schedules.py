"""Pipeline schedules as data: per-rank ordered lists of (stage, kind, micro-batch) actions.

A :class:`PipelineSchedule` is what both the simulator and the executor run, so they cannot
disagree on what a schedule is. Stages are *global* (virtual) stage indices ``0 .. p·v − 1`` in
model order; stage ``s`` lives on pipeline rank ``s mod p`` (Megatron-LM's and torch's looped
placement of interleaved chunks). An action prints as ``{stage}{kind}{microbatch}``, e.g. ``2F0``,
the compact form of PyTorch's ``torch.distributed.pipelining`` ``_Action``; :func:`to_csv` writes
one row per rank in the text format its ``PipelineScheduleMulti._load_csv`` reads (compute-only).

Generators (pure functions of p, m, v):
- :func:`gpipe` (Huang et al. 2019): all forwards, then all backwards; holds m micro-batches.
- :func:`one_f_one_b` (PipeDream-Flush, Narayanan et al. 2021): p − r − 1 warm-up forwards on
  rank r, then alternate one forward and one backward; at most p micro-batches in flight.
- :func:`interleaved_1f1b` (Narayanan et al. SC'21 §2.2): v model chunks per rank, bubble
  (p − 1)/v of the non-interleaved one; Megatron-LM's original constraint m mod p = 0 applies.
All three have bubble (p − 1)/(m + p − 1) of the step (1/v of it interleaved) when the stage times
are equal and p2p is free; :func:`simulator.schedule_dry_run.dry_run` measures it, and
:func:`simulator.schedule_dry_run.validate` checks a schedule can run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from simulator.checks import enum_member
from simulator.enum_kind import Kind
from simulator.errors import SpecError


class ActionKind(Kind):
    """What one pipeline action computes (letters as in torch's ``_ComputationType``)."""

    F = "F"
    """Forward of one micro-batch through one stage."""
    B = "B"
    """Full backward of one micro-batch through one stage (input and weight gradients)."""
    I = "I"  # noqa: E741 - torch's letter for the input-gradient half of a split backward
    """Input-gradient half of a split backward (zero-bubble schedules); unblocks the stage before."""
    W = "W"
    """Weight-gradient half of a split backward; needs this stage's ``I`` of the same micro-batch."""


class ScheduleKind(Kind):
    """Pipeline schedule families; each also decides how many micro-batches' activations a stage holds."""

    GPIPE = "gpipe"
    """All forwards, then all backwards (Huang et al. 2019): every stage holds all m micro-batches."""
    ONE_F_ONE_B = "1f1b"
    """PipeDream-Flush (Narayanan et al. 2021): stage k holds at most min(p - k, m) micro-batches."""
    INTERLEAVED = "interleaved"
    """Interleaved 1F1B with v model chunks per rank (Narayanan et al. SC'21); the first stage holds
    (1 + (p - 1)/(p·v)) times the 1F1B activations (Korthikanti et al. 2022, §4.2.3)."""

    @classmethod
    def parse(cls, text: str) -> "ScheduleKind":
        return enum_member(cls, text, "schedule", "schedule")


_ACTION_RE = re.compile(r"^\s*(\d+)([FBIW])(\d+)\s*$")


@dataclass(frozen=True)
class Action:
    """One compute action: ``kind`` of micro-batch ``microbatch`` through global stage ``stage``."""

    stage: int
    kind: ActionKind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @classmethod
    def parse(cls, text: str) -> "Action":
        """Read ``2F0`` / ``1B3`` / ``0W7`` (torch's compact form) back into an :class:`Action`."""
        match = _ACTION_RE.match(text)
        if not match:
            raise SpecError("schedule", f"cannot read action {text!r}; write STAGE KIND MICROBATCH like 2F0 "
                            "(kinds F, B, I, W)")
        return cls(int(match.group(1)), ActionKind(match.group(2)), int(match.group(3)))


@dataclass(frozen=True)
class PipelineSchedule:
    """Per-rank ordered action lists of one pipeline (p ranks, m micro-batches, v stages per rank)."""

    ranks: tuple[tuple[Action, ...], ...]
    """``ranks[r]`` is rank r's actions, in the order it runs them."""
    p: int
    m: int
    v: int = 1
    kind: ScheduleKind | None = None
    """The generator that made it; None for a schedule read from a file."""
    schedules: int = 1
    """Pipeline schedules (``schedule.step()`` calls) the lists chain per optimizer step, each over m / schedules
    micro-batches with its own fill and drain (:func:`chained`)."""

    @property
    def n_stages(self) -> int:
        return self.p * self.v

    def rank_of(self, stage: int) -> int:
        """Pipeline rank that holds global stage ``stage`` (looped placement, ``stage mod p``)."""
        return stage % self.p

    def __str__(self) -> str:
        return "\n".join(f"rank {r}: " + " ".join(map(str, acts)) for r, acts in enumerate(self.ranks))


MAX_MICRO_BATCHES = 65_536
"""Micro-batches per pipeline and step a schedule is built for: a guard on work, not a model limit.
Every engine walks the schedule's action lists, linear in m (1e6 micro-batches took 10 s and 375 MB
in the closed form; 2^63 never ended); 65,536 is 16× the largest count a published run needs (Llama 3
405B: 16M tokens per step of 8,192-token sequences is 2,048 sequences [src: llama3-2024])."""


def micro_batches_ok(m):
    """Whether a schedule is built for ``m`` micro-batches (:data:`MAX_MICRO_BATCHES`); numbers or arrays."""
    return m <= MAX_MICRO_BATCHES


def _check_pm(p: int, m: int) -> None:
    if not isinstance(p, int) or isinstance(p, bool) or p < 1:
        raise SpecError("pp", f"must be a positive integer, got {p!r}")
    if not isinstance(m, int) or isinstance(m, bool) or m < 1:
        raise SpecError("micro_batches", f"must be a positive integer, got {m!r}")
    if not micro_batches_ok(m):
        raise SpecError("micro_batches", f"{m:,} micro-batches per pipeline and step is past the {MAX_MICRO_BATCHES:,} "
                        "a schedule is built for; raise the micro-batch size or dp, or lower the global batch")


def interleaved_ok(m, p):
    """Whether m micro-batches fit an interleaved schedule over p ranks (v > 1): at least two ranks
    (on one rank the chunks just run in order: nothing interleaves; Megatron-LM refuses a virtual
    pipeline without pipeline parallelism [src: megatron-core]) and m a multiple of p (Megatron-LM's
    original rule). Works on numbers and numpy arrays (the planner's vector check)."""
    return (m % p == 0) & (p > 1)


def gpipe(p: int, m: int) -> PipelineSchedule:
    """GPipe: on every rank, forwards of micro-batches 0..m−1, then their backwards in the same order."""
    _check_pm(p, m)
    ranks = tuple(tuple([Action(r, ActionKind.F, j) for j in range(m)] + [Action(r, ActionKind.B, j) for j in range(m)])
                  for r in range(p))
    return PipelineSchedule(ranks, p, m, 1, ScheduleKind.GPIPE)


def one_f_one_b(p: int, m: int) -> PipelineSchedule:
    """1F1B: rank r runs min(p − r − 1, m) warm-up forwards, then F/B pairs, then the remaining backwards."""
    _check_pm(p, m)
    ranks = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [Action(r, ActionKind.F, j) for j in range(warmup)]
        for i in range(m - warmup):
            acts += [Action(r, ActionKind.F, warmup + i), Action(r, ActionKind.B, i)]
        acts += [Action(r, ActionKind.B, j) for j in range(m - warmup, m)]
        ranks.append(tuple(acts))
    return PipelineSchedule(tuple(ranks), p, m, 1, ScheduleKind.ONE_F_ONE_B)


def interleaved_1f1b(p: int, m: int, v: int) -> PipelineSchedule:
    """Megatron-LM's interleaved 1F1B with ``v`` chunks per rank (Narayanan et al. SC'21 §2.2).

    Rank r holds stages r, r + p, …, r + (v−1)·p. Its k-th forward (of m·v) runs chunk
    ``(k div p) mod v`` on micro-batch ``(k div p·v)·p + k mod p`` — groups of p micro-batches
    per chunk; backwards walk the chunks in reverse. Warm-up: ``2·(p − r − 1) + (v − 1)·p``
    forwards (capped at m·v), then one forward one backward, then the remaining backwards.
    Constraint (Megatron-LM's original one): m must be a multiple of p when v > 1.
    """
    _check_pm(p, m)
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise SpecError("virtual_stages", f"must be a positive integer, got {v!r}")
    if v == 1:
        sched = one_f_one_b(p, m)
        return PipelineSchedule(sched.ranks, p, m, 1, ScheduleKind.INTERLEAVED)
    if p < 2:
        raise SpecError("schedule", f"interleaving {v} chunks needs pp ≥ 2 (on one rank they just run in order); "
                        "use 1f1b or gpipe, or raise --pp")
    if not interleaved_ok(m, p):
        lo, hi = (m // p) * p, (m // p + 1) * p
        fix = f"{lo} or {hi}" if lo else f"{hi}"
        raise SpecError("micro_batches", f"interleaved schedule needs micro-batches a multiple of pp={p}, "
                        f"got {m}; use {fix}")
    total = m * v

    def mb(k: int) -> int:
        return (k // (p * v)) * p + k % p

    ranks = []
    for r in range(p):
        def fwd(k: int) -> Action:
            return Action(((k // p) % v) * p + r, ActionKind.F, mb(k))

        def bwd(k: int) -> Action:
            return Action((v - 1 - (k // p) % v) * p + r, ActionKind.B, mb(k))

        warmup = min(2 * (p - r - 1) + (v - 1) * p, total)
        acts = [fwd(k) for k in range(warmup)]
        for i in range(total - warmup):
            acts += [fwd(warmup + i), bwd(i)]
        acts += [bwd(k) for k in range(total - warmup, total)]
        ranks.append(tuple(acts))
    return PipelineSchedule(tuple(ranks), p, m, v, ScheduleKind.INTERLEAVED)


def chained(one: PipelineSchedule, schedules: int) -> PipelineSchedule:
    """``schedules`` runs of ``one`` back to back on every rank, micro-batches renumbered (run i's j is
    i·m + j): gradient accumulation over several ``schedule.step()`` calls per optimizer step, as NeMo AutoModel's
    training loop runs it (one call per local batch, ``ga_steps = global / (local · dp)``) [src: automodel-ga-loop].
    No barrier between runs: rank r starts run i + 1 when its run i ends, and its first forward of it waits only
    for the activations, as torch's runtime plays it."""
    m = one.m
    ranks = tuple(tuple(Action(a.stage, a.kind, a.microbatch + i * m) for i in range(schedules) for a in acts)
                  for acts in one.ranks)
    return PipelineSchedule(ranks, one.p, m * schedules, one.v, one.kind, schedules)


def make_schedule(kind: ScheduleKind, p: int, m: int, v: int = 1, schedules: int = 1) -> PipelineSchedule:
    """The generator for ``kind``; GPipe and 1F1B take no ``v``. ``schedules`` > 1: that many schedules of
    m / schedules micro-batches chained (:func:`chained`)."""
    if schedules > 1:
        return chained(make_schedule(kind, p, m // schedules, v), schedules)
    if kind is ScheduleKind.GPIPE:
        return gpipe(p, m)
    if kind is ScheduleKind.ONE_F_ONE_B:
        return one_f_one_b(p, m)
    return interleaved_1f1b(p, m, v)


def max_in_flight(schedule: PipelineSchedule, rank: int) -> int:
    """Most (stage, micro-batch) activation sets rank ``rank`` holds at once, walking its actions.

    A forward adds one; a full backward (or the weight half ``W`` of a split one) frees it. GPipe
    holds m; 1F1B holds at most p on rank 0 (p − r on rank r). With v chunks each set is 1/v of
    the rank's layers.
    """
    held = peak = 0
    for act in schedule.ranks[rank]:
        if act.kind is ActionKind.F:
            held += 1
            peak = max(peak, held)
        elif act.kind in (ActionKind.B, ActionKind.W):
            held -= 1
    return peak


def to_csv(schedule: PipelineSchedule) -> str:
    """One line per rank, actions comma-separated (``0F0,0F1,0B0``): torch's compute-only CSV."""
    return "".join(",".join(map(str, acts)) + "\r\n" for acts in schedule.ranks)


def from_csv(text: str, kind: ScheduleKind | None = None) -> PipelineSchedule:
    """Read :func:`to_csv`'s format (or a torch ``_dump_csv`` compute-only file; empty cells are idle).

    p is the number of rows, v the number of stages over p, m the largest micro-batch + 1.
    Call :func:`simulator.schedule_dry_run.validate` on the result before running it.
    """
    rows = [line for line in text.splitlines() if line.strip()]
    if not rows:
        raise SpecError("schedule", "the CSV has no rows; write one line of actions per pipeline rank")
    ranks = tuple(tuple(Action.parse(cell) for cell in row.split(",") if cell.strip()) for row in rows)
    acts = [a for rank in ranks for a in rank]
    if not acts:
        raise SpecError("schedule", "the CSV holds no actions")
    p = len(ranks)
    n_stages = max(a.stage for a in acts) + 1
    if n_stages % p:
        raise SpecError("schedule", f"{n_stages} stages do not split evenly over {p} ranks")
    return PipelineSchedule(ranks, p, max(a.microbatch for a in acts) + 1, n_stages // p, kind)
