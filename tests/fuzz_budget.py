"""How many cases the fuzz suites run, and the per-case log of a long run (issue 15, part 4).

Cases per test, in order of precedence:

- ``TRAINPLAN_FUZZ_EXAMPLES=N``: N per test (randomised, not derandomised);
- ``--hypothesis-profile long``: the long run, :data:`LONG_TOTAL` cases per suite *in total*, shared
  evenly between the suite's tests (5 CLI command groups: 2,000 each; 4 API tests: 2,500 each), so
  that the suite reaches the issue's 10,000 cases without 10,000 per test (hours of CLI work);
- otherwise the suite's quick count, derandomised for CI.

``TRAINPLAN_FUZZ_LOG=path`` appends one JSON line per case (suite, test, command or entry point,
outcome, exit code, wall and CPU seconds) for ``benchmarks/fuzz_figure.py``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from contextlib import contextmanager

from hypothesis import HealthCheck, settings

LONG = settings.get_current_profile_name() == "long"
LONG_TOTAL = 10_000
"""Cases per suite in the long run (the issue's figure: >= 10,000 CLI and >= 10,000 API cases)."""
LOG_PATH = os.environ.get("TRAINPLAN_FUZZ_LOG")


def examples_per_test(quick: int, tests: int) -> int:
    """Cases per test for a suite of ``tests`` tests whose quick run has ``quick`` cases each."""
    if "TRAINPLAN_FUZZ_EXAMPLES" in os.environ:
        return int(os.environ["TRAINPLAN_FUZZ_EXAMPLES"])
    return math.ceil(LONG_TOTAL / tests) if LONG else quick


def fuzz_settings(quick: int, tests: int) -> settings:
    """Hypothesis settings for a fuzz suite (no deadline: the suites have their own hang limits)."""
    return settings(max_examples=examples_per_test(quick, tests), deadline=None,
                    derandomize="TRAINPLAN_FUZZ_EXAMPLES" not in os.environ and not LONG,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def current_test() -> str:
    """The running pytest test's id without the file (``test_x[param]``)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].rsplit(" (", 1)[0]


def log_case(suite: str, **fields) -> None:
    """Append one case to the log, when ``TRAINPLAN_FUZZ_LOG`` names one."""
    if LOG_PATH:
        with open(LOG_PATH, "a", encoding="utf-8") as out:
            out.write(json.dumps({"suite": suite, "test": current_test(), **fields}) + "\n")


@contextmanager
def timed():
    """Yields a dict that holds ``wall_s`` and ``cpu_s`` of the block once it ends."""
    clock = {}
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield clock
    finally:
        clock["wall_s"] = time.perf_counter() - wall
        clock["cpu_s"] = time.process_time() - cpu


class Hang(Exception):
    """A case ran past its limit."""


def _hang(signum, frame):
    raise Hang


@contextmanager
def limited(cpu_s: float, wall_s: float):
    """Raises :class:`Hang` in the block once it has used ``cpu_s`` of CPU time or ``wall_s`` of wall
    time. CPU time is the real limit (a loaded or ``nice``d machine does not turn slow into hung);
    the wall-time backstop catches a hang that sleeps."""
    previous = {sig: signal.signal(sig, _hang) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    signal.setitimer(signal.ITIMER_REAL, wall_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def spec_errors_only(suite: str, call, limit_s: float):
    """``call()``, or None when it raised SpecError; any other exception fails the test. Each case runs
    under ``limited(limit_s, 20 · limit_s)`` and is logged to ``suite`` when ``TRAINPLAN_FUZZ_LOG`` is set."""
    from simulator.errors import SpecError

    outcome = "ok"
    try:
        with timed() as clock, limited(limit_s, limit_s * 20):
            return call()
    except SpecError:
        outcome = "SpecError"
        return None
    except BaseException as error:
        outcome = type(error).__name__
        raise
    finally:
        log_case(suite, outcome=outcome, **clock)
