"""Time collectives on N local processes: the backend's own ("native") and the simulator's schedules replayed.

Method (as nccl-tests times a call, adapted to processes without CUDA events):
- ``warmup`` untimed calls, then ``repeats`` timed calls per (algorithm, size), interleaved: round ``k`` makes
  call ``k`` of every case in turn (:func:`_bench_worker`);
- before each call the buffer is refilled (untimed) and all ranks meet at ``dist.barrier()``;
- each rank times its call with ``time.perf_counter`` (after ``cuda.synchronize`` on NCCL);
- the time of one call is the maximum over ranks (the call ends when its slowest rank does);
- a :class:`Measurement` keeps every call's time, their mean, median, 10th and 90th percentiles, and their mean
  trimmed of the :data:`TRIM_FRACTION` fastest and slowest calls (:attr:`Measurement.trimmed_mean_s`).

What the calibration uses (since 2026-11-25, :mod:`executor.calibrate_modes`): below a few MiB a gloo call on a
shared machine is bimodal (a fast mode, and calls that wait a scheduler tick for a core: e.g. 0.3 ms against
4-8 ms for a 2-rank 4 KiB all-gather), so the median of 10-20 calls lands on either mode from one run to the
next. The network is fitted to the 10th percentiles (the calls that did not wait), the expected wait per call
is the plain mean's excess over that fit, and the estimate (fast + wait) is checked against the plain mean
(:attr:`Measurement.mean_s`): a training step, a sum of many calls, costs their mean (expectations add), stalls
included, which the trimmed mean (kept for comparison) partly drops.

Replayed algorithms run :func:`executor.p2p.replay_schedule` on the schedule
``simulator.collectives.registry.build_schedule`` produces, so measured and simulated calls move
the same bytes between the same ranks in the same steps.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass

from executor import launch
from executor.native_ops import native_call, prepare_input, reference
from executor.p2p import replay_schedule
from simulator.collectives.base import ELEMENT_BYTES, Op, Schedule
from simulator.errors import SpecError

NATIVE = "native"
"""Algorithm name of the backend's own implementation (``dist.all_reduce`` and friends)."""

TRIM_FRACTION = 0.1
"""Share of calls left out at each end of the sorted times before the mean (a 10 % trimmed mean, Tukey's
robust location estimate): a rare call held by other work for tens of ms does not set the figure."""

CHECK_RTOL = 1e-5
"""Relative tolerance of the replay-vs-reference check (float32 sums in a different order)."""
CHECK_ATOL = 1e-5
"""Absolute tolerance of the same check (inputs are standard normal, so sums are O(sqrt(p)))."""


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """Measured times of one (op, algorithm, group size, message size)."""

    op: Op
    algorithm: str
    ranks: int
    nbytes: int
    times_s: tuple[float, ...]
    """Time of each timed call, seconds (max over ranks), in call order."""
    median_s: float
    p10_s: float
    """10th percentile of ``times_s`` (linear interpolation), seconds."""
    p90_s: float
    """90th percentile of ``times_s``, seconds."""
    trimmed_mean_s: float
    """Mean of ``times_s`` without the :data:`TRIM_FRACTION` fastest and slowest (module docstring), seconds."""
    mean_s: float
    """Plain mean of ``times_s``, seconds: what the calibrated estimate (fast mode + expected wait) is checked
    against (module docstring)."""

    @classmethod
    def from_times(cls, op: Op, algorithm: str, ranks: int, nbytes: int, times_s) -> "Measurement":
        times = tuple(float(t) for t in times_s)
        if not times:
            raise SpecError("repeats", "need at least one timed call")
        return cls(op=op, algorithm=algorithm, ranks=ranks, nbytes=nbytes, times_s=times,
                   median_s=statistics.median(times), p10_s=percentile(times, 0.10),
                   p90_s=percentile(times, 0.90), trimmed_mean_s=trimmed_mean(times),
                   mean_s=statistics.fmean(times))


def trimmed_mean(values, fraction: float = TRIM_FRACTION) -> float:
    """Mean of ``values`` without ``floor(fraction · n)`` of the smallest and of the largest."""
    ordered = sorted(values)
    cut = int(fraction * len(ordered))
    kept = ordered[cut:len(ordered) - cut]
    return statistics.fmean(kept)


def percentile(values, q: float) -> float:
    """Percentile by linear interpolation between order statistics (numpy's default method)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, kw_only=True)
class BenchCase:
    """One thing to time: a message size and either a schedule to replay or the native call."""

    algorithm: str
    nbytes: int
    schedule: Schedule | None = None
    """None: the backend's own implementation of the op."""
    op: Op | None = None
    """A native case's op (None: the launch's op); a replayed case's op is its schedule's."""
    model: Schedule | None = None
    """A native case's stand-in for the fit: the schedule of the algorithm the backend runs
    (:data:`simulator.collectives.registry.GLOO_NATIVE`), which the estimate times; never replayed."""

    def op_for(self, launch_op: Op) -> Op:
        """The op this case times in a launch of ``launch_op``."""
        if self.schedule is not None:
            return self.schedule.op
        return launch_op if self.op is None else self.op

    @property
    def timed_schedule(self) -> Schedule | None:
        """The schedule the fit's estimate times for this case: the replayed one, or a native case's model."""
        return self.schedule if self.schedule is not None else self.model


def local_cluster(nproc: int, cluster=None):
    """``cluster`` (default: the ``localhost-cpu`` preset) holding ``nproc`` ranks: a one-node cluster gets
    exactly ``nproc`` on its node, the processes that run there (time-sharing of its cores counts them,
    :attr:`simulator.collectives.cost.Env.time_share`)."""
    from dataclasses import replace

    from simulator.cluster.io import load_cluster

    cluster = load_cluster("localhost-cpu") if cluster is None else cluster
    if cluster.nodes == 1 and cluster.node.gpus_per_node != nproc:
        cluster = replace(cluster, node=replace(cluster.node, gpus_per_node=nproc))
    if cluster.world_size < nproc:
        raise SpecError("nproc", f"{nproc} ranks do not fit the cluster's {cluster.world_size} GPUs")
    return cluster


def build_cases(cluster, op: Op, algorithms: list[str], nproc: int, sizes: list[int]) -> list[BenchCase]:
    """The cases to time: for each algorithm and size, its schedule from the simulator's registry."""
    from simulator.collectives.registry import build_schedule

    ranks = list(range(nproc))
    cases = []
    for algorithm in algorithms:
        for nbytes in sizes:
            if nbytes % ELEMENT_BYTES:
                raise SpecError("sizes", f"{nbytes} bytes is not a whole number of float32 elements")
            schedule = None if algorithm == NATIVE else build_schedule(cluster, ranks, op, nbytes, algorithm)
            cases.append(BenchCase(algorithm=algorithm, nbytes=nbytes, schedule=schedule))
    return cases


def measure(op: Op, algorithms: list[str], nproc: int, sizes: list[int], *, cluster=None,
            backend: str = "gloo", repeats: int = 10, warmup: int = 2, progress: bool = False) -> list[Measurement]:
    """Time ``op`` for every algorithm and size on ``nproc`` local processes."""
    cluster = local_cluster(nproc, cluster)
    cases = build_cases(cluster, op, algorithms, nproc, sizes)
    return measure_cases(op, cases, nproc, backend=backend, repeats=repeats, warmup=warmup, progress=progress)


def measure_cases(op: Op, cases: list[BenchCase], nproc: int, *, backend: str = "gloo", repeats: int = 10,
                  warmup: int = 2, progress: bool = False) -> list[Measurement]:
    """Time prepared cases in one launch of ``nproc`` processes; one Measurement per case (a replayed case
    of another op's schedule, or a native case naming its ``op``, is measured as that op: one launch can time
    all-reduce and all-gather)."""
    if repeats < 1 or warmup < 0:
        raise SpecError("repeats", f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    if op is Op.SEND_RECV and nproc < 2:
        raise SpecError("nproc", "send-recv needs at least 2 processes")
    per_rank = launch.run(_bench_worker, nproc, (op, cases, repeats, warmup, backend, progress), backend=backend)
    out = []
    for i, case in enumerate(cases):
        times = [max(rank_times[i][k] for rank_times in per_rank) for k in range(repeats)]
        out.append(Measurement.from_times(case.op_for(op), case.algorithm, nproc, case.nbytes, times))
    return out


def _bench_worker(rank: int, world: int, op: Op, cases: list[BenchCase], repeats: int, warmup: int,
                  backend: str, progress: bool) -> list[list[float]]:
    """Time every case on this rank, interleaved: round ``k`` times call ``k`` of every case in turn, so a burst
    of other work on the machine lasting seconds lands on all cases alike instead of on the few measured while
    it lasted (time-correlated load then moves the cases together, which the fit's common parameters absorb)."""
    import torch
    import torch.distributed as dist

    device = launch.device_for(backend, rank)
    sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
    prepared = []
    for case in cases:
        template = torch.full((case.nbytes // ELEMENT_BYTES,), float(rank + 1), device=device)
        buf = template.clone()
        if case.schedule is None:
            call = native_call(case.op_for(op), buf, rank, world)
        else:
            call = (lambda s=case.schedule, b=buf: replay_schedule(s, b, rank))
        prepared.append((template, buf, call))
    results: list[list[float]] = [[] for _ in cases]
    for k in range(warmup + repeats):
        for (template, buf, call), times in zip(prepared, results):
            buf.copy_(template)
            sync()
            dist.barrier()
            start = time.perf_counter()
            call()
            sync()
            if k >= warmup:
                times.append(time.perf_counter() - start)
    if progress and rank == 0:
        for case, times in zip(cases, results):
            print(f"  measured {case.op_for(op).value} {case.algorithm:>8} "
                  f"{case.nbytes:>11} B on {world} ranks: median {statistics.median(times) * 1e3:.3f} ms (rank 0)",
                  file=sys.stderr, flush=True)
    return results


def check_replays(op: Op, schedules: list[Schedule], nproc: int, *, backend: str = "gloo",
                  seed: int = 0) -> list[float]:
    """Replay each schedule on random inputs; return the largest |replay − reference| per schedule.

    Raises AssertionError naming the schedule when a result is not allclose to the reference
    (``dist.all_reduce`` for all-reduce; see :func:`executor.native_ops.reference`).
    """
    per_rank = launch.run(_check_worker, nproc, (op, schedules, backend, seed), backend=backend)
    return [max(rank_errors[i] for rank_errors in per_rank) for i in range(len(schedules))]


def _check_worker(rank: int, world: int, op: Op, schedules: list[Schedule], backend: str, seed: int) -> list[float]:
    import torch

    device = launch.device_for(backend, rank)
    errors = []
    for i, schedule in enumerate(schedules):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + i * 101 + rank)
        data = torch.randn(schedule.nbytes // ELEMENT_BYTES, generator=gen).to(device)
        expected, region = reference(op, data, rank, world, schedule.root)
        got = replay_schedule(schedule, prepare_input(op, data, rank, world), rank)
        if not torch.allclose(got[region], expected[region], rtol=CHECK_RTOL, atol=CHECK_ATOL):
            raise AssertionError(f"{schedule.algorithm} {op.value} of {schedule.nbytes} B differs from the "
                                 f"reference on rank {rank}")
        diff = (got[region] - expected[region]).abs()
        errors.append(float(diff.max()) if diff.numel() else 0.0)
    return errors


def measure_vs_estimate(cluster, op: Op, algorithms: list[str], nproc: int, sizes: list[int], backend: str = "gloo",
                        repeats: int = 10, warmup: int = 2, progress: bool = False) -> list[dict]:
    """Measure ``op`` and set each result beside ``registry.estimate`` for the same call.

    Rows: ``CollectiveEstimate.as_dict()`` plus ``measured_time_s`` (median), ``measured_p10_s``,
    ``measured_p90_s`` and ``error_pct`` = (estimate − measured) / measured × 100. The "native"
    algorithm is compared with the registry's ``auto`` choice (its own label kept in ``algorithm``,
    the estimate's in ``estimate_algorithm``).
    """
    from simulator.collectives.registry import estimate

    cluster = local_cluster(nproc, cluster)
    measurements = measure(op, algorithms, nproc, sizes, cluster=cluster, backend=backend, repeats=repeats,
                           warmup=warmup, progress=progress)
    rows = []
    for m in measurements:
        est = estimate(cluster, list(range(nproc)), op, m.nbytes, "auto" if m.algorithm == NATIVE else m.algorithm)
        row = est.as_dict()
        row.update(algorithm=m.algorithm, estimate_algorithm=est.algorithm, measured_time_s=m.median_s,
                   measured_p10_s=m.p10_s, measured_p90_s=m.p90_s,
                   error_pct=(est.time_s - m.median_s) / m.median_s * 100)
        rows.append(row)
    return rows
