"""Rank 0's record of a run, and what every rank does between two steps (``executor/run.py``'s loop).

Between two steps every rank's step record is gathered on rank 0 (``dist.gather_object``), each rank writes its
step count to the supervisor's status folder (``executor/supervise.py`` watches it), and rank 0 appends the
gathered records as one line of the step journal (:mod:`simulator.run_journal`): :func:`between_steps`, which the
calibration's rank-step probe (:mod:`executor.step_bench`) runs as it is, so the probe's steps follow the same
bookkeeping as a run's. The whole results file is written only before the first step and at the end (or on a
failure): :class:`Recorder`. Until 2026-11-26 rank 0 rewrote the whole file after every step (20-70 ms on the 2-core
VM, its peers waiting at the next barrier) and the step after it ran slower (docs/validation.md, cal19).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from executor.measure import environment
from simulator import run_journal
from simulator.run_results import Failure, RankResult, Results, RunInfo, RunStatus, Staleness


def write_status(status_dir: str | None, rank: int, name: str, data) -> None:
    """``status_dir/rank{rank}.{name}`` = ``data`` as JSON, atomically (nothing without a status folder)."""
    if status_dir is None:
        return
    path = Path(status_dir) / f"rank{rank}.{name}"
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def between_steps(rank: int, step: int, record: dict, gathered: list | None, status_dir: str | None,
                  journal: str | Path | None) -> None:
    """Every rank's work after step ``step`` (module docstring): ``record`` gathered into rank 0's ``gathered``,
    the status file, and on rank 0 (``journal`` given) the journal line."""
    import torch.distributed as dist

    dist.gather_object(record, gathered, dst=0)
    write_status(status_dir, rank, "step", step + 1)
    if journal is not None and gathered is not None:
        run_journal.append(journal, gathered)


class Recorder:
    """Rank 0's copy of every rank's completed steps, and the results file and journal it writes."""

    def __init__(self, options, scaled, family, ctx, runner):
        self.options, self.scaled, self.ctx = options, scaled, ctx
        self.info = RunInfo(plan=scaled.run, scale=str(scaled.scale), notes=scaled.notes, family=family.family.value,
                            precision=ctx.precision.value, steps=options.steps, warmup=options.warmup,
                            seed=options.seed, components=runner.components(),
                            phases=getattr(runner, "phase_notes", {}))
        self.env = environment(ctx)
        self.steps: list[list[dict]] = [[] for _ in range(ctx.world)]
        self.final: list[dict] = [{} for _ in range(ctx.world)]
        self.journal = None if options.out is None else run_journal.journal_path(options.out)

    def results(self, status: RunStatus, failure: Failure | None = None) -> Results:
        ranks = tuple(RankResult(rank=r, step_time_s=tuple(s["step_time_s"]), loss=tuple(s["loss"]),
                                 phases_s={p: tuple(v) for p, v in s["phases_s"].items()},
                                 model_state_bytes=self.final[r].get("model_state", {}),
                                 peak_memory_bytes=self.final[r].get("peak"),
                                 peak_memory_kind=self.final[r].get("peak_kind"),
                                 peak_rss_bytes=self.final[r].get("rss"))
                      for r, s in enumerate(run_journal.rank_series(self.steps)))
        pushes = [f["pushes"] for f in self.final if f.get("pushes")]
        return Results(status=status, plan=self.scaled.planned, run=self.info, environment=self.env,
                       ranks=ranks, failure=failure, staleness=Staleness.from_pushes(pushes) if pushes else None)

    def start(self) -> None:
        """Before the first step: the results file with no steps (``running``) and an empty journal."""
        if self.journal is not None:
            self.journal.unlink(missing_ok=True)
            self.save(RunStatus.RUNNING)

    def add(self, gathered: list[dict]) -> None:
        """Keep one step's records (the journal line was written by :func:`between_steps`)."""
        for r, rec in enumerate(gathered):
            self.steps[r].append(rec)

    def save(self, status: RunStatus, failure: Failure | None = None) -> None:
        """Write the whole results file; a finished run's (``complete`` or ``failed``) replaces the journal."""
        if self.options.out is None:
            return
        self.results(status, failure).save(self.options.out)
        if status is not RunStatus.RUNNING:
            self.journal.unlink(missing_ok=True)
