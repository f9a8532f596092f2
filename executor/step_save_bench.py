"""What a rank's step loses when it follows the run's results rewrite: rank 0 saving the file while its peers wait.

Between two steps ``executor/run.py`` gathers every rank's step record on rank 0, writes each rank's status file, and
rank 0 rewrites the whole results file (``_Recorder.save``: a :class:`simulator.run_results.Results` built from every
completed step, its summary computed, written atomically); then a barrier starts the next step. The rewrite takes
rank 0 ~20 ms on a quiet 2-core VM (ddp-overlap, 24 steps, 2026-11-25 21:29 UTC: 19-22 ms between one step's end and
the next one's start on both ranks, against ~1 ms for the gather and status files alone), during which the other
ranks sleep in the barrier. The step after it computes slower than a step after the gather alone: its first
micro-batch's forward and backward find the caches cold and the waiting rank's core idle
[src: own-step-save-probe]. The rank-step probe (:mod:`executor.step_bench`) runs the gather and the status files
but not the rewrite, so its ``first_microbatch_cold_us`` is the smaller excess.

This probe runs the plain tiny model's step on :data:`~executor.step_bench.STEP_PROBE_PROCESSES` gloo processes
exactly as :mod:`executor.step_bench` does, and before every other step rank 0 also rewrites a results file of the
suite's shape through the run's own code (:class:`_Mirror`: the ``ddp-overlap`` case's plan at ``--scale tiny``,
every rank's last :data:`SAVE_PROBE_STEPS` records, :meth:`Results.save`). Steps after a rewrite and steps after
the gather alone alternate in one launch, so the machine's load drifts over both alike.

The waiting rank's steps are bimodal on the 2-core VM: fast, or fast + one ~4 ms scheduler tick, in 0-55 % of
either kind of step (up to 77 % at load 7; 2026-11-25, save16 [src: own-step-save-repeats]); a median jumps by a tick
when that share crosses one half, and repeated probes read 257-2178 µs that way. The tick is the blocking calls' wait,
which the comm model charges (``comm.blocking_wait_us``, :mod:`simulator.collectives.cost`); this term is the
rewrite's own excess, the shift of the fast mode, which each rank's lower quartile reads while fewer than 3/4 of its
steps wait a tick. Per rank

    after_save_s = lower quartile (:data:`FAST_QUANTILE`) of the step times (start → end, as the run times them)
                   of the steps after a rewrite
    plain_s      = the same quartile of the steps after the gather alone
    host.step_after_save_us = max(0, mean over ranks (after_save_s − plain_s)) · 1e6

with its spread, the 10th and 90th percentiles of the same over :data:`BOOTSTRAP_RESAMPLES` resamples of each rank's
steps of each kind (seeded: the same steps give the same spread), written into the cluster file's source text.
:mod:`simulator.step_loop` charges it once per step beside ``first_microbatch_cold_us``.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from dataclasses import dataclass
from typing import Sequence

from executor.compute_bench import Timing, timing_of
from executor.step_bench import STEP_PROBE_MICRO_BATCHES, STEP_PROBE_PROCESSES, _between_steps, _steps
from simulator.workload.transformer import TransformerSpec

SAVE_PROBE_CASE = "ddp-overlap"
"""The suite case whose results file the probe rewrites (the 2-process data-parallel plan at ``--scale tiny``)."""
SAVE_PROBE_STEPS = 24
"""Records per rank in the rewritten file: the default suite's steps per case (``simulator.validation_suite``)."""
CALIBRATE_REPEATS = 24
"""Steps of each kind ``trainplan calibrate --compute`` times in each of its takes of the probe
(:data:`executor.calibrate_moments.MOMENTS` takes, the median written: :func:`median_take`; one take of 40 steps
before 2026-11-26, whose value swung 72-695 µs between two quiet calibrations, docs/calibration.md)."""
FAST_QUANTILE = 0.25
"""The quantile of a rank's steps that reads their fast mode (module docstring) [src: own-step-save-repeats]."""
BOOTSTRAP_RESAMPLES = 200
"""Resamples behind the term's spread; seeded with :data:`BOOTSTRAP_SEED`."""
BOOTSTRAP_SEED = 0


def fast_step_s(seconds) -> float:
    """The :data:`FAST_QUANTILE` of ``seconds`` (linear between order statistics, ``statistics.quantiles``'s
    inclusive method); one step: itself."""
    ordered = sorted(seconds)
    at = FAST_QUANTILE * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def excess_us(after, plain) -> float:
    """``max(0, mean over ranks (fast_step_s(after_r) − fast_step_s(plain_r))) · 1e6``: the module docstring's term
    from each rank's step times after a rewrite (``after``) and after none (``plain``)."""
    return max(0.0, statistics.fmean(fast_step_s(a) - fast_step_s(p) for a, p in zip(after, plain, strict=True))) * 1e6


def excess_spread_us(after, plain, *, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The 10th and 90th percentiles of :func:`excess_us` over ``resamples`` resamples (with replacement) of each
    rank's steps of each kind."""
    rng = random.Random(seed)
    draw = lambda xs: [rng.choice(xs) for _ in xs]  # noqa: E731
    values = sorted(excess_us([draw(a) for a in after], [draw(p) for p in plain]) for _ in range(resamples))
    return values[int(0.1 * (resamples - 1))], values[int(0.9 * (resamples - 1))]


@dataclass(frozen=True, kw_only=True)
class SaveStepTiming:
    """What :func:`time_save_steps` measured (each per rank: median, p10, p90 over its steps)."""

    processes: int
    after_save_s: tuple[tuple[float, ...], ...]
    """Each rank's step times after rank 0's results rewrite."""
    plain_s: tuple[tuple[float, ...], ...]
    """Each rank's step times after the gather and status files alone."""
    save: Timing
    """Rank 0's rewrite itself."""

    @property
    def after_save(self) -> tuple[Timing, ...]:
        """Each rank's step after the rewrite: median, p10, p90."""
        return tuple(timing_of(list(s)) for s in self.after_save_s)

    @property
    def plain(self) -> tuple[Timing, ...]:
        """Each rank's step after the gather alone: median, p10, p90."""
        return tuple(timing_of(list(s)) for s in self.plain_s)

    @property
    def step_after_save_us(self) -> float:
        """µs a step loses after the rewrite (module docstring, :func:`excess_us`), at least 0."""
        return excess_us(self.after_save_s, self.plain_s)

    @property
    def spread_us(self) -> tuple[float, float]:
        """The term's bootstrap p10 and p90 (:func:`excess_spread_us`)."""
        return excess_spread_us(self.after_save_s, self.plain_s)


class _Mirror:
    """Rank 0's copy of every rank's last :data:`SAVE_PROBE_STEPS` step records, rewritten as the run rewrites its
    results file (``executor.run._Recorder``)."""

    def __init__(self, path: str, world: int):
        from executor.strategies.base import phases_absent
        from simulator.plan_scale import Scale, scale_plan
        from simulator.run_results import RunInfo
        from simulator.validation_suite import case_by_name, case_plan

        scaled = scale_plan(case_plan(case_by_name(SAVE_PROBE_CASE)), Scale.parse("tiny"), nproc=world)
        self.path, self.planned = path, scaled.planned
        self.absent = {p.value: 0.0 for p in phases_absent(scaled.run.layout())}
        self.info = RunInfo(plan=scaled.run, scale=str(scaled.scale), notes=scaled.notes, family="data-parallel",
                            precision="fp32", steps=SAVE_PROBE_STEPS, warmup=4, seed=0)
        self.env = {"backend": "gloo", "device": "cpu", "world": world, "precision": "fp32"}
        self.steps: list[list[dict]] = [[] for _ in range(world)]
        self.seconds: list[float] = []

    def save(self, gathered: list) -> None:
        from simulator.run_results import RankResult, Results, RunStatus

        start = time.perf_counter()
        for r, rec in enumerate(gathered):
            self.steps[r] = (self.steps[r] + [rec])[-SAVE_PROBE_STEPS:]
        ranks = tuple(RankResult(rank=r, step_time_s=tuple(s["t"] for s in steps), loss=tuple(s["loss"] for s in steps),
                                 phases_s={p: tuple((self.absent | s["phases"])[p] for s in steps)
                                           for p in sorted(self.absent | steps[0]["phases"])})
                      for r, steps in enumerate(self.steps))
        Results(status=RunStatus.RUNNING, plan=self.planned, run=self.info, environment=self.env,
                ranks=ranks).save(self.path)
        self.seconds.append(time.perf_counter() - start)


def _rank_save_steps(rank: int, world: int, spec: TransformerSpec, micro_batch: int, m: int, repeats: int,
                     warmup: int, seed: int, out_dir: str) -> tuple[list[float], list[float], list[float]]:
    """One rank: the plain model's steps of :func:`executor.step_bench._steps`, rank 0 rewriting the results file
    before every odd step; returns the step times after a rewrite, after none, and rank 0's rewrite times."""
    from executor.model import build_gpt

    mirror = _Mirror(os.path.join(out_dir, "results.json"), world) if rank == 0 else None

    def between(rank_, step, record, gathered, status_dir):
        _between_steps(rank_, step, record, gathered, status_dir)
        if mirror is not None and (step + 1) % 2:
            mirror.save(gathered)

    fwd, bwd, outside, opt, _, _ = _steps(build_gpt(spec, seed), rank, world, spec, micro_batch, m, 2 * repeats,
                                          warmup, seed, out_dir, between=between)
    steps = [m * (f + b) + o + p for f, b, o, p in zip(fwd, bwd, outside, opt)]
    after = [t for k, t in enumerate(steps) if (warmup + k) % 2]
    plain = [t for k, t in enumerate(steps) if not (warmup + k) % 2]
    return after, plain, (mirror.seconds if mirror is not None else [])


def time_save_steps(spec: TransformerSpec, micro_batch: int, *, processes: int = STEP_PROBE_PROCESSES,
                    micro_batches: int = STEP_PROBE_MICRO_BATCHES, repeats: int = 60, warmup: int = 5,
                    thread_count: int = 1, seed: int = 0) -> SaveStepTiming:
    """The probe of the module docstring: ``repeats`` steps after a rewrite and as many after none, interleaved."""
    import tempfile

    from executor.launch import run

    with tempfile.TemporaryDirectory(prefix="trainplan-save-probe-") as out_dir:
        per_rank = run(_rank_save_steps, processes, args=(spec, micro_batch, micro_batches, repeats, warmup, seed,
                                                          out_dir), num_threads=thread_count)
    return SaveStepTiming(processes=processes, after_save_s=tuple(tuple(r[0]) for r in per_rank),
                          plain_s=tuple(tuple(r[1]) for r in per_rank), save=timing_of(per_rank[0][2]))


def measure_save_steps(spec: TransformerSpec, micro_batch: int, *, thread_count: int, progress: bool = False
                       ) -> SaveStepTiming:
    """One take of the probe for ``trainplan calibrate --compute`` (the CPU, fp32): the tiny ``spec`` as the rank-step
    probe runs it, :data:`CALIBRATE_REPEATS` steps of each kind (~20 ms of rewrite each)."""
    if progress:
        import sys

        print(f"calibrate --compute: the tiny model's step after the run's results rewrite on {STEP_PROBE_PROCESSES} "
              "processes (one take)", file=sys.stderr)
    return time_save_steps(spec, micro_batch, repeats=CALIBRATE_REPEATS, thread_count=thread_count)


def median_take(takes: Sequence[SaveStepTiming]) -> SaveStepTiming:
    """Of the probe's takes at several moments (:mod:`executor.calibrate_moments`), the one whose term is the median
    (the middle one by :attr:`~SaveStepTiming.step_after_save_us` for an odd count, the lower middle for an even one):
    the take written."""
    return sorted(takes, key=lambda t: t.step_after_save_us)[(len(takes) - 1) // 2]


def save_moments_text(takes: Sequence[SaveStepTiming]) -> str:
    """``; taken at 3 moments, the median written: 695 us (moments ...)`` for the source field; empty for one take."""
    from executor.calibrate_moments import Moments

    if len(takes) < 2:
        return ""
    moments = Moments(tuple(t.step_after_save_us for t in takes))
    return f"; taken at {len(takes)} moments, the median written (executor.calibrate_moments): {moments.text()}"


def with_step_save(node, saved: SaveStepTiming | None):
    """``node`` with ``host.step_after_save_us`` = :attr:`SaveStepTiming.step_after_save_us`
    [src: own-step-save-probe]; as is without a host section or a probe (a GPU, bf16)."""
    from dataclasses import replace

    if node.host is None or saved is None:
        return node
    return replace(node, host=replace(node.host, step_after_save_us=saved.step_after_save_us))


def save_steps_dict(saved: SaveStepTiming | None) -> dict | None:
    """``calibrate --compute --json``'s record of the probe."""
    if saved is None:
        return None
    plain = lambda t: {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s}  # noqa: E731
    return {"processes": saved.processes, "after_save": [plain(t) for t in saved.after_save],
            "plain": [plain(t) for t in saved.plain], "save": plain(saved.save),
            "step_after_save_us": saved.step_after_save_us, "step_after_save_p10_p90_us": list(saved.spread_us)}


def save_steps_source(saved: SaveStepTiming) -> str:
    """The cluster file's source text for the term: its value, its bootstrap spread and the steps behind it."""
    low, high = saved.spread_us
    return (f"host.step_after_save_us {saved.step_after_save_us:.0f} (bootstrap p10..p90 {low:.0f}..{high:.0f}) from "
            f"the lower quartiles of {len(saved.after_save_s[0])} interleaved steps of each kind on "
            f"{saved.processes} processes [src: own-step-save-repeats]")


def save_steps_line(saved: SaveStepTiming) -> str:
    """``calibrate --compute``'s printed line."""
    after = statistics.fmean(fast_step_s(s) for s in saved.after_save_s)
    plain = statistics.fmean(fast_step_s(s) for s in saved.plain_s)
    low, high = saved.spread_us
    return (f"after save    {saved.step_after_save_us:.1f} us per step (p10..p90 {low:.0f}..{high:.0f}): the step "
            f"after rank 0's results rewrite ({saved.save.median_s * 1e3:.1f} ms) {after * 1e3:.3f} ms against "
            f"{plain * 1e3:.3f} ms after the gather alone, lower quartiles ({saved.processes} processes): "
            "host.step_after_save_us")
