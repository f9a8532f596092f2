"""How a rank process ends once its run is over: flushed output, then ``os._exit``, no interpreter finalization.

Why (the SIGABRT "terminate called without an active exception" seen under load after every step had
completed, tests/test_cli_execute.py): gloo's worker threads (``ProcessGroupGloo::runLoop``, two per process
group) drop their reference to a finished ``AsyncWork`` a little after marking it complete, so the main thread
can be past the final barrier and ``destroy_process_group`` (which shuts the groups down but does not join
their workers while DDP, the mesh and torch's own tables still hold the groups) while a worker still owns the
work's tensors. When the last reference to a tensor made in Python goes, its ``PyObject`` is released under
the GIL; if the interpreter is finalizing by then, ``take_gil`` ends the thread with ``pthread_exit``, whose
forced unwind meets a ``noexcept`` destructor and calls ``std::terminate``. Backtrace of such an abort
(gdb, 2026-11-26, torch 2.13, Python 3.11, the 2-core VM; a rank leaving with asynchronous all-reduces of
Python-made tensors still queued): ``runLoop → ~AsyncAllreduceWork → ~AsyncWork →
TensorImpl::decref_pyobject → gil_scoped_acquire → take_gil → PyThread_exit_thread → pthread_exit →
_Unwind_ForcedUnwind → __gxx_personality_v0 → std::terminate``. The two-rank script of
``tests/test_rank_exit.py`` with ``sys.exit(3)`` in place of ``exit_rank(3)`` aborted a rank in 7 of 12
runs, with ``exit_rank`` in none of 6 (same day, load 7-15). The real case, caught with a core dump on the
same day (the torchrun command of ``test_torchrun_runs_the_same_entry_point`` looped on the tree before this
module, interleaved with the tree after it: 1 abort in 152 runs, 0 in 151; load 2.6-25, median 6.4): rank 1's
worker ran ``runLoop → ~AsyncBarrierWork → ~AsyncGatherWork → TensorImpl::decref_pyobject → … →
std::terminate``, the final barrier's work releasing the final ``gather_object``'s tensors.
pytorch/pytorch#179291 describes the same mechanism for a process group never destroyed.

A rank whose results and status are written has nothing left for finalization to do, so it leaves with
``os._exit``: no interpreter finalization and no C++ static destructors (profiler and gloo state included),
so no thread can reach the GIL of a dying interpreter. Standard streams are flushed first, since
``os._exit`` does not flush them.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_rank(code: int) -> NoReturn:
    """End this rank's process with exit status ``code`` without interpreter finalization (module docstring)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a reader that went away: nothing left to flush
            pass
    os._exit(code)
