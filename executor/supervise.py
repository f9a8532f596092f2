"""Run a plan on N local processes, as torchrun would, and turn any rank's failure into one answer.

``supervise(argv, nproc, timeout_s, out)`` runs ``executor.run ARGV`` N times with
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (a free loopback
port, as :func:`executor.launch.free_port` picks it), so the ranks run exactly the code torchrun
runs (gloo ranks forked from a forkserver that imported torch once, NCCL ranks as fresh
interpreters: :mod:`executor.rank_process`). It then watches them:

- every rank writes its step count and, on failure, its error to a private status folder;
- once a rank exits non-zero or writes an error, it waits a moment (:data:`SETTLE_S`) for the
  others to report, then blames, in this order: a rank whose own error is not a peer's failure, a
  rank that died without a word (a signal, e.g. SIGKILL), a rank still running while its peers
  failed (hung), the first rank to report;
- a watchdog blames the slowest rank when no rank has finished a step for ``timeout_s`` plus
  :data:`GRACE_S` (the process-group timeout should have fired first), or when the ranks are not
  all ready (model built) after :data:`STARTUP_S`;
- the survivors are terminated, and the results file (if rank 0 wrote one) is marked failed with
  the blamed rank and its error, keeping the completed steps (rank 0's step journal folded in where
  rank 0 died before writing them: :mod:`simulator.run_journal`).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from executor.launch import free_port
from executor.rank_process import RankProcess, backend_flag, start_for
from simulator.jsonio import read_json, write_json
from simulator.run_journal import fold, journal_path

SETTLE_S = 3.0
"""Seconds to wait after the first failure sign for the other ranks' reports (a dead peer's
neighbours fail in < 0.1 s on gloo: torch-cpu notes [src: own-gloo-probe])."""
GRACE_S = 15.0
"""Seconds the watchdog adds to the process-group timeout before it stops a silent run."""
STARTUP_S = 300.0
"""Seconds the ranks get to import torch, join the group and build the model before the watchdog
counts steps (a loaded 2-core machine needs tens of seconds to start 4 ranks)."""
TEARDOWN_S = 60.0
"""Seconds the ranks still running get to exit after a peer exited uncleanly *after* the final barrier
(every rank wrote ``done``): their results are complete, and a loaded 2-core machine takes seconds to
tear torch down, more than :data:`SETTLE_S` (a completed run was once blamed on the aborted peer)."""
_POLL_S = 0.1


@dataclass(frozen=True)
class Outcome:
    """How a supervised run ended: ``rank`` None and ``error`` empty when it succeeded."""

    rank: int | None
    error: str
    warning: str = ""
    """Set on a success whose ranks did not all exit cleanly after finishing (see :func:`_watch`)."""

    @property
    def ok(self) -> bool:
        return not self.error


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class _Ranks:
    def __init__(self, argv: list[str], nproc: int, status: Path, echo: bool = True):
        root = str(Path(__file__).resolve().parents[1])
        port, start = free_port(), start_for(backend_flag(argv))
        self.status, self.procs, self.logs = status, [], []
        for rank in range(nproc):
            env = os.environ | {"RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank),
                                "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1",
                                "MASTER_PORT": str(port),
                                "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
            log = open(status / f"rank{rank}.log", "w+")
            self.logs.append(log)
            self.procs.append(RankProcess([*argv, "--status-dir", str(status)], env, log, rank == 0 and echo, start))

    def steps(self) -> list[int]:
        """Steps each rank finished; -1 before it is ready (model built)."""
        return [s if isinstance(s := _read(self.status / f"rank{r}.step"), int) else -1
                for r in range(len(self.procs))]

    def finished(self) -> list[bool]:
        """Which ranks passed the run's final barrier (every step done, results written by rank 0)."""
        return [_read(self.status / f"rank{r}.done") is True for r in range(len(self.procs))]

    def errors(self) -> dict[int, dict]:
        return {r: e for r in range(len(self.procs)) if (e := _read(self.status / f"rank{r}.error"))}

    def blame(self) -> Outcome:
        errors, codes = self.errors(), [p.poll() for p in self.procs]
        for r, e in sorted(errors.items()):
            if not e.get("peer"):
                return Outcome(r, e["error"])
        for r, code in enumerate(codes):
            if code is not None and code < 0 and r not in errors:
                return Outcome(r, f"killed by signal {-code}")
        for r, code in enumerate(codes):
            if code not in (None, 0) and r not in errors:
                return Outcome(r, f"exited with code {code} without reporting: {self._tail(r)}")
        if errors:
            for r, code in enumerate(codes):
                if code is None and r not in errors:
                    steps = self.steps()[r]
                    return Outcome(r, f"hung: still running after its peers failed, {steps} step(s) done; "
                                      f"peers: {next(iter(errors.values()))['error']}")
            r = min(errors)
            return Outcome(r, errors[r]["error"])
        return Outcome(None, "failed without a report")

    def _tail(self, rank: int) -> str:
        log = self.logs[rank]
        log.flush()
        log.seek(0)
        lines = [ln for ln in log.read().splitlines() if ln.strip()]
        return lines[-1][:300] if lines else "no output"

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5.0
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in self.logs:
            log.close()


def _watch(ranks: _Ranks, timeout_s: float) -> Outcome:
    last_steps, last_change, failing_since = ranks.steps(), time.monotonic(), None
    while True:
        time.sleep(_POLL_S)
        codes = [p.poll() for p in ranks.procs]
        if all(c == 0 for c in codes):
            return Outcome(None, "")
        if all(c is not None for c in codes) and all(ranks.finished()) and not ranks.errors():
            # gloo's teardown can abort a process after the final barrier (SIGABRT, "terminate called
            # without an active exception"): every step and the results are complete, so the run succeeded
            return _teardown_warning(codes)
        if failing_since is None and (any(c not in (None, 0) for c in codes) or ranks.errors()):
            failing_since = time.monotonic()
        settle = TEARDOWN_S if _after_the_run(ranks, codes) else SETTLE_S
        if failing_since is not None and (time.monotonic() - failing_since > settle
                                          or all(c is not None for c in codes)):
            if settle == TEARDOWN_S and all(ranks.finished()):  # still tearing down past the limit: stopped,
                return _teardown_warning(codes)                  # but the run itself had completed
            return ranks.blame()
        steps = ranks.steps()
        if steps != last_steps:
            last_steps, last_change = steps, time.monotonic()
            continue
        limit = timeout_s + GRACE_S if min(steps) >= 0 else STARTUP_S
        if steps == last_steps and time.monotonic() - last_change > limit:
            r = min(range(len(steps)), key=lambda i: steps[i])
            return Outcome(r, f"no progress for {limit:g} s (watchdog); rank {r} had done {max(steps[r], 0)} "
                              "step(s)" + ("" if steps[r] >= 0 else " and was not ready"))


def _after_the_run(ranks: _Ranks, codes: list[int | None]) -> bool:
    """Whether every rank that exited uncleanly had passed the final barrier, and none reported an error."""
    finished = ranks.finished()
    return not ranks.errors() and all(finished[r] for r, c in enumerate(codes) if c not in (None, 0))


def _teardown_warning(codes: list[int | None]) -> Outcome:
    """A complete run some of whose ranks exited uncleanly (or were stopped) in teardown."""
    bad = ", ".join(f"rank {r} ({'still running' if c is None else 'signal ' + str(-c) if c < 0 else 'code ' + str(c)})"
                    for r, c in enumerate(codes) if c != 0)
    return Outcome(None, "", warning=f"{bad} exited uncleanly after the run had completed "
                                     "(torch.distributed teardown); the results are complete")


def _mark_failed(out: str | None, outcome: Outcome) -> None:
    """Record the blamed rank in the results file rank 0 left, its completed steps kept: those it wrote itself
    (a failure it saw) or, when it died without a word, those of the step journal beside it
    (:func:`simulator.run_journal.fold`), which this replaces."""
    if out is None or not Path(out).exists():
        return
    journal = journal_path(out)
    data = fold(read_json(out, "results"), journal)
    detail = (data.get("failure") or {}).get("detail", "")
    data["status"] = "failed"
    data["failure"] = {"rank": outcome.rank, "error": outcome.error, "detail": detail}
    write_json(out, data)
    journal.unlink(missing_ok=True)


def supervise(argv: list[str], nproc: int, *, timeout_s: float, out: str | None, echo: bool = True) -> Outcome:
    """Run ``executor.run`` with ``argv`` on ``nproc`` local processes; the outcome (see module docstring).
    ``echo`` False keeps rank 0's standard output in its log too (the validation suite prints its own lines)."""
    with tempfile.TemporaryDirectory(prefix="trainplan-run-") as status:
        ranks = _Ranks(argv, nproc, Path(status), echo)
        try:
            outcome = _watch(ranks, timeout_s)
        finally:
            ranks.stop()
    if not outcome.ok:
        _mark_failed(out, outcome)
    return outcome
