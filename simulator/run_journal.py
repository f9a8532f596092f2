"""The step journal beside a running results file: one line per completed step, so a run that dies keeps its steps.

``executor.run`` writes the results file (:mod:`simulator.run_results`) whole only while no step is timed or
about to be: before the first step (status ``running``, no steps), at the end (``complete``) and on a failure a rank
sees (``failed``). Between two steps rank 0 appends one line to the journal ``<results>.steps.jsonl``
(:func:`journal_path`) with every rank's record of the step just done::

    [{"t": seconds, "loss": float, "phases": {"forward": seconds, ...}}, ... one per rank, rank order]

and deletes the journal once the whole file is written at the end. Until 2026-11-26 rank 0 rewrote the whole
results file after every step instead (20-70 ms on the 2-core VM) while its peers waited at the next step's
barrier, and the step after it ran 0.1-0.9 ms slower than one after the gather alone [src: own-step-save-probe]: a
cost of the executor's bookkeeping, not of training, that the model had to carry (``host.step_after_save_us``;
docs/validation.md, ddp16, save16, cal19). One line is a few hundred bytes per rank.

A ``running`` file is what a run killed without a word leaves (SIGKILL, the supervisor's watchdog): a reader folds
the journal's steps into it (:func:`fold`), as :func:`simulator.run_results.load_results` does and the
supervisor's failure marking (``executor/supervise.py``) writes. A torn last line (the process killed inside the
write) is left out: its step was not completed as far as the file can tell.
"""

from __future__ import annotations

import json
from pathlib import Path

SUFFIX = ".steps.jsonl"


def journal_path(results: str | Path) -> Path:
    """The journal of the results file ``results``: the same path with :data:`SUFFIX` added."""
    p = Path(results)
    return p.with_name(p.name + SUFFIX)


def append(path: str | Path, records: list[dict]) -> None:
    """Append one step's records (one per rank) as a line of ``path`` (opened, written, closed: nothing held open)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(records, separators=(",", ":")) + "\n")


def read(path: str | Path) -> list[list[dict]]:
    """The journal's steps in order, each a list of per-rank records; none when the file is missing. A line that is
    not a complete JSON list (a write cut short) ends the journal there."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    steps = []
    for line in lines:
        try:
            records = json.loads(line)
        except ValueError:
            break
        if not isinstance(records, list):
            break
        steps.append(records)
    return steps


def rank_series(steps: list[list[dict]]) -> list[dict]:
    """Per rank, its ``step_time_s``, ``loss`` and ``phases_s`` lists over the steps every rank completed, from
    per-rank record lists (``steps[r]``: rank r's records in step order); a phase a record lacks counts 0."""
    n = min((len(s) for s in steps), default=0)
    out = []
    for records in steps:
        records = records[:n]
        names = sorted({p for rec in records for p in rec["phases"]})
        out.append({"step_time_s": [rec["t"] for rec in records], "loss": [rec["loss"] for rec in records],
                    "phases_s": {p: [rec["phases"].get(p, 0.0) for rec in records] for p in names}})
    return out


def fold(data: dict, path: str | Path) -> dict:
    """``data`` (a results file's JSON) with the journal at ``path`` folded in when its status is ``running``:
    each rank's step lists are the journal's (module docstring); anything else as it is."""
    if data.get("status") != "running":
        return data
    steps = read(path)
    ranks = data.get("ranks")
    if not steps or not isinstance(ranks, list) or any(len(s) != len(ranks) for s in steps):
        return data
    series = rank_series([[step[r] for step in steps] for r in range(len(ranks))])
    return data | {"ranks": [dict(rank) | s for rank, s in zip(ranks, series)]}
