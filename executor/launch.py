"""Run a function on N local processes joined in one torch.distributed process group.

``run(fn, nproc)`` starts ``nproc`` processes, joins them with ``init_process_group`` over a free
loopback TCP port, calls ``fn(rank, world_size, *args)`` on each, and returns the per-rank return
values in rank order.

Start method (:class:`StartMethod`): gloo ranks are forked from a ``forkserver`` that imported torch
once (the server is started on the first launch and kept for the process's life), NCCL ranks are
``spawn``ed (a fresh interpreter: CUDA must never be initialised before a fork, and the forked start
has not been checked on a GPU). A spawned rank spends about 1.4 s of CPU importing torch before its
work; a forked one about 0.02 s (``benchmarks/launch_start_cpu.py``, 2026-11-26, docs/quality.md,
test23). What a forked rank measures is the same: docs/quality.md (test23) has the ABAB check. The
caller's environment at launch time is handed to each rank (a forked rank would otherwise see the
server's, frozen when it started); variables torch reads only at import (e.g. ``OMP_NUM_THREADS``)
are the server's, which is why the ranks set their thread count themselves (:attr:`LaunchConfig.num_threads`).

Failure handling: each rank reports its result or its traceback on one queue. The parent reads the
queue itself instead of relying on ``mp.spawn``/``torchrun``, which SIGTERM the survivors as soon as
one rank dies (torch ``multiprocessing.spawn`` docs [src: torch-mp-spawn]; seen with torch 2.13 on
gloo [src: own-gloo-probe]): the *first* report of a failure is the one raised, as a
:class:`LaunchError` naming the rank and carrying its traceback, and only then are the survivors
(usually blocked in a collective with the dead peer) terminated.

``fn`` and its arguments must be picklable (a module-level function); return values travel back
pickled, so return plain Python values (floats, lists, dicts), not tensors on a device.
"""

from __future__ import annotations

import os
import queue
import socket
import sys
import traceback
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any, Callable

from simulator.errors import SpecError

BACKENDS = ("gloo", "nccl")
"""Process-group backends the launcher knows: gloo (CPU tensors) and NCCL (CUDA tensors)."""

_POLL_S = 0.05
"""How often the parent checks for dead processes while waiting for reports, seconds."""


class StartMethod(Enum):
    """How the rank processes start (module docstring)."""

    SPAWN = "spawn"
    """A fresh interpreter per rank, which imports torch itself."""
    FORKSERVER = "forkserver"
    """Forked from a server process that imported :data:`PRELOAD` once."""

    @staticmethod
    def for_backend(backend: str) -> "StartMethod":
        """The default: the forkserver for gloo, spawn for NCCL (no fork near CUDA)."""
        return StartMethod.SPAWN if backend == "nccl" else StartMethod.FORKSERVER


PRELOAD = ["torch", "torch.distributed", "executor.launch", "executor.run"]
"""Modules the forkserver imports before it forks any rank (``executor.run``: a ``trainplan execute`` rank's entry
point, 0.44 s of CPU after torch on the 2-core VM, 2026-11-26)."""


class LaunchError(RuntimeError):
    """A rank raised (or died). ``rank`` is the first rank that reported; ``detail`` its traceback."""

    def __init__(self, rank: int, detail: str):
        self.rank = rank
        self.detail = detail
        last = detail.strip().splitlines()[-1] if detail.strip() else "no detail"
        super().__init__(f"rank {rank} failed: {last}\n{detail}")


@dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    """How the processes are started and joined."""

    nproc: int
    """Number of processes (= world size)."""
    backend: str = "gloo"
    """torch.distributed backend: ``gloo`` (CPU) or ``nccl`` (one CUDA device per rank)."""
    timeout_s: float = 300.0
    """Whole-run limit, seconds: the parent gives up and terminates every rank after it."""
    pg_timeout_s: float = 60.0
    """Process-group timeout, seconds: how long a rank waits for an absent peer in a collective."""
    num_threads: int | None = 1
    """torch intra-op threads per rank (1: ranks do not oversubscribe the cores; None: torch default)."""
    start: StartMethod | None = None
    """How the ranks start; None: :meth:`StartMethod.for_backend`."""

    def __post_init__(self) -> None:
        if not isinstance(self.nproc, int) or self.nproc < 1:
            raise SpecError("nproc", f"must be a positive integer, got {self.nproc!r}")
        check_backend(self.backend)
        if self.timeout_s <= 0 or self.pg_timeout_s <= 0:
            raise SpecError("timeout_s", "timeouts must be positive seconds")


def threads_per_rank(local_ranks: int, threads: int | None = None) -> int:
    """torch intra-op threads of each of ``local_ranks`` processes on this machine, as ``trainplan execute``
    sets them: ``threads`` when given, else the cores divided among the ranks (at least 1)."""
    if threads is not None:
        return threads
    return max(1, (os.cpu_count() or 1) // max(1, local_ranks))


MAX_PROCESSES_PER_CORE = 8
"""Local processes per CPU core beyond which a measuring run is refused: a guard on work, not a model
limit (each process then gets an eighth of a core or less, and a gloo full mesh of N processes opens
N·(N−1) connections); past one per core it runs with a warning."""


def check_local_processes(nproc: int, flag: str = "--nproc") -> str | None:
    """SpecError when ``nproc`` local processes exceed :data:`MAX_PROCESSES_PER_CORE` per core; else a
    warning to print when they exceed the cores (they time-share them), or None."""
    import os

    cores = os.cpu_count() or 1
    if nproc > MAX_PROCESSES_PER_CORE * cores:
        raise SpecError(flag, f"{nproc} processes on {cores} cores is past the {MAX_PROCESSES_PER_CORE} per core a "
                        f"measurement is run with; use at most {MAX_PROCESSES_PER_CORE * cores}")
    if nproc > cores:
        return (f"warning: {nproc} processes on {cores} cores time-share them: measured times include the sharing "
                "(the estimates charge it as max(1, processes / Host.cpu_cores)) and vary more from run to run")
    return None


def check_backend(backend: str) -> None:
    """Raise SpecError for an unknown backend, or NCCL without enough CUDA devices."""
    if backend not in BACKENDS:
        raise SpecError("backend", f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend == "nccl":
        import torch

        if not torch.cuda.is_available():
            raise SpecError("backend", "nccl needs CUDA GPUs and none is available; use --backend gloo")


def device_for(backend: str, rank: int) -> "Any":
    """The torch device a rank's tensors live on: CPU for gloo, ``cuda:rank`` for NCCL."""
    import torch

    if backend == "nccl":
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_context(start: StartMethod):
    """The multiprocessing context that starts ranks by ``start`` (the forkserver preloads :data:`PRELOAD`)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context(start.value)
    if start is StartMethod.FORKSERVER:
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


class ParentFd:
    """A file descriptor of the launching process handed to a started rank: pickled as
    ``multiprocessing.reduction.DupFd``, which passes it over the forkserver's socket (or keeps it open across a
    spawn), so the rank writes where its launcher writes now, not where the forkserver's streams pointed when it
    started (a long-lived caller such as pytest's ``capfd`` or a notebook may have moved them since)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return _detach, (reduction.DupFd(self.fd),)


def _detach(dup) -> int:
    return dup.detach()


def adopt_streams(stdout: int, stderr: int) -> None:
    """In a started rank: make ``stdout``/``stderr`` (from :class:`ParentFd`) its file descriptors 1 and 2 (a spawned
    rank receives 1 and 2 themselves: nothing to move)."""
    for fd, target in ((stdout, 1), (stderr, 2)):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)


def run(fn: Callable[..., Any], nproc: int, args: tuple = (), *, backend: str = "gloo",
        timeout_s: float = 300.0, pg_timeout_s: float = 60.0, num_threads: int | None = 1,
        start: StartMethod | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``nproc`` processes; return the results in rank order.

    Raises :class:`LaunchError` for the first rank that fails, and ``TimeoutError`` after
    ``timeout_s``. The process group is created before ``fn`` and destroyed after it.
    """
    config = LaunchConfig(nproc=nproc, backend=backend, timeout_s=timeout_s, pg_timeout_s=pg_timeout_s,
                          num_threads=num_threads, start=start)
    ctx = start_context(config.start or StartMethod.for_backend(backend))
    reports = ctx.Queue()
    port = free_port()
    env = dict(os.environ)
    sys.stdout.flush()
    sys.stderr.flush()
    streams = (ParentFd(1), ParentFd(2))
    procs = [ctx.Process(target=_worker, args=(rank, config, port, fn, args, reports, env, streams), daemon=True)
             for rank in range(nproc)]
    for proc in procs:
        proc.start()
    finished = False
    try:
        results = _collect(procs, reports, config)
        finished = True
        return results
    finally:
        _stop(procs, graceful=finished)
        reports.close()


def _collect(procs: list, reports, config: LaunchConfig) -> list[Any]:
    import time

    results: dict[int, Any] = {}
    deadline = time.monotonic() + config.timeout_s
    while len(results) < len(procs):
        try:
            kind, rank, payload = reports.get(timeout=_POLL_S)
        except queue.Empty:
            _check_alive(procs, results)
            if time.monotonic() > deadline:
                raise TimeoutError(f"distributed run did not finish within {config.timeout_s:g} s")
            continue
        if kind == "error":
            raise LaunchError(rank, payload)
        results[rank] = payload
    return [results[r] for r in range(len(procs))]


def _check_alive(procs: list, results: dict) -> None:
    """A rank that exited non-zero without a report (killed, segfault) is a failure too."""
    for rank, proc in enumerate(procs):
        if rank not in results and proc.exitcode not in (None, 0):
            raise LaunchError(rank, f"process exited with code {proc.exitcode} before reporting")


def _stop(procs: list, graceful: bool) -> None:
    """Join the ranks; after a failure, terminate survivors at once (they may wait on a dead peer)."""
    for proc in procs:
        if graceful:
            proc.join(timeout=10.0)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5.0)


def _worker(rank: int, config: LaunchConfig, port: int, fn: Callable, args: tuple, reports,
            env: dict[str, str], streams: tuple[int, int]) -> None:
    """Body of one rank: take the caller's environment and standard streams, join the group, run ``fn``, report its
    result or traceback."""
    import torch
    import torch.distributed as dist

    os.environ.clear()
    os.environ.update(env)
    adopt_streams(*streams)
    try:
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        if config.backend == "nccl":
            torch.cuda.set_device(device_for("nccl", rank))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(config.nproc), LOCAL_RANK=str(rank))
        dist.init_process_group(config.backend, rank=rank, world_size=config.nproc,
                                timeout=timedelta(seconds=config.pg_timeout_s))
        result = fn(rank, config.nproc, *args)
        reports.put(("ok", rank, result))
    except BaseException:  # noqa: BLE001 - every failure must reach the parent, then this rank exits
        reports.put(("error", rank, traceback.format_exc()))
        reports.close()
        reports.join_thread()  # flush the report before the group closes and peers fail in turn
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the group may be broken by a dead peer; nothing to clean
                pass
