"""One local rank of ``trainplan execute`` (``executor/supervise.py``): ``executor.run`` with the supervisor's
environment, its standard error (and standard output, unless it is echoed) in the rank's log.

Two ways to start it (:class:`executor.launch.StartMethod`, the one home of the choice):

- ``FORKSERVER`` (gloo): forked from the launcher's forkserver, which imported torch once, and runs
  ``executor.run.main`` there; its start costs about 0.02 s of CPU instead of the 1.4 s a fresh interpreter
  spends importing torch (docs/quality.md, test23, where the ABAB check that the step times are unchanged is);
- ``SPAWN`` (NCCL: no fork near CUDA): ``python -m executor.run``, a fresh interpreter, as torchrun starts it.

Either way the rank ends through :func:`executor.rank_exit.exit_rank` (a rank that raises past ``main`` exits
with code 1 after printing its traceback to the log, as the interpreter does), so the exit codes the
supervisor reads are the same: 0, 2 for bad input, 1 for an error, minus the signal number for a signal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import IO

from executor.launch import ParentFd, StartMethod, adopt_streams, start_context


def _forked_rank(argv: list[str], env: dict[str, str], stdout: int, stderr: int) -> None:
    """Body of a forked rank: the supervisor's environment and streams, then ``executor.run`` as ``-m`` runs it."""
    os.environ.clear()
    os.environ.update(env)
    adopt_streams(stdout, stderr)
    from executor.rank_exit import exit_rank
    from executor.run import main

    try:
        code = main(argv)
    except SystemExit as err:  # argparse
        code = err.code if isinstance(err.code, int) else 1
    except BaseException:  # noqa: BLE001 - as the interpreter ends an uncaught error: traceback, code 1
        import traceback

        traceback.print_exc()
        code = 1
    exit_rank(code)


class RankProcess:
    """The started rank, with the part of ``subprocess.Popen``'s interface the supervisor uses."""

    def __init__(self, argv: list[str], env: dict[str, str], log: IO, echo: bool, start: StartMethod):
        self._popen = self._proc = None
        if start is StartMethod.SPAWN:
            self._popen = subprocess.Popen([sys.executable, "-m", "executor.run", *argv], env=env,
                                           stdout=None if echo else log, stderr=log)
            return
        sys.stdout.flush()
        self._proc = start_context(start).Process(
            target=_forked_rank, args=(argv, env, ParentFd(1 if echo else log.fileno()), ParentFd(log.fileno())))
        self._proc.start()

    def poll(self) -> int | None:
        return self._popen.poll() if self._popen is not None else self._proc.exitcode

    def terminate(self) -> None:
        (self._popen or self._proc).terminate()

    def kill(self) -> None:
        (self._popen or self._proc).kill()

    def wait(self, timeout: float) -> int:
        """The exit code; ``subprocess.TimeoutExpired`` when the rank is still running after ``timeout`` s."""
        if self._popen is not None:
            return self._popen.wait(timeout=timeout)
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired("executor.run", timeout)
        return self._proc.exitcode


def start_for(backend_name: str | None) -> StartMethod:
    """How a rank of a run with ``--backend backend_name`` (None: the default) starts."""
    from executor.options import resolve_backend

    return StartMethod.for_backend(resolve_backend(backend_name).value)


def backend_flag(argv: list[str]) -> str | None:
    """The value of ``--backend`` in ``argv`` (either spelling), or None."""
    for i, arg in enumerate(argv):
        if arg == "--backend" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--backend="):
            return arg.split("=", 1)[1]
    return None
