"""The calibration's DTensor probe: the wait for a core of the collectives torch tensor parallelism issues, measured
inside the executor's tp model (``comm.dtensor_wait_us``; the rule that reads it:
:mod:`simulator.cluster.dtensor_wait`).

The sweep's wait (``comm.op_wait_us``, :mod:`executor.calibrate_modes`) is measured on small calls that share rounds
with 1-4 MiB calls, after which a small call waits longer; a tp step's calls are all small and follow the model's
compute (docs/calibration.md, "The wait of a DTensor call"). So, on ``p`` gloo processes of this machine split into
tp pairs (``p`` = 2: one pair; 4: two pairs calling at once, as tp-dp's), every rank runs the executor's own tp model
(:func:`executor.strategies.tensor.parallelize_gpt` of the suite's tiny model at tp = 2, fp32) without and with
sequence parallelism, their iterations interleaved, each :data:`MICRO_BATCHES` micro-batches' forward and backward
back to back as a step runs them (a barrier before each iteration, none between micro-batches), and counts the
seconds the executor's own :class:`executor.phase_clock.TpClock` spends inside the functional collectives, and the
calls:

    W_dt(p) = mean over ranks and timed iterations of  tp_s / calls  −  mean T_fast(call)
                                              → comm.dtensor_wait_us[p] (no SP), comm.dtensor_sp_wait_us[p] (SP)

SP apart because its calls wait less: in the same launches (load 7-10) 0.78-0.88 of the other model's time per call,
about 0.77 of its wait once the fast times (more all-gathers) are taken off; in the suite's quiet runs 0.83-0.85
[src: own-dtensor-wait-2026-11-25].

``T_fast`` the fitted cluster's estimate without waits of each call torch's tp issues per micro-batch
(:func:`simulator.compile.torch_tp.calls`, the estimate's own list; the count measured must equal its length, else
nothing is written), on a node of ``p`` processes. The mean, not a percentile: a step pays the sum of its calls'
waits (as ``W(p)``).

Taken at :data:`executor.calibrate_moments.MOMENTS` moments spread over the calibration (:func:`dtensor_moment`:
before the network sweep, after the pair probe, after the FSDP2 probe), each with its share of the
:data:`ITERATIONS` timed iterations (``calls_per_moment``), and the median of the moments written
(:func:`with_dtensor_waits`), the moments
recorded in the source (:func:`dtensor_source_text`): one launch read 843 / 813 / 1,308 / 1,109 µs at 2 processes
in four calibrations while the runs' own time per call stayed at 1.10-1.38 ms (docs/validation.md, tp21 item 2; the
rule and why three: :mod:`executor.calibrate_moments`). Cost: per moment one launch per process count of 2 and 4 in
the design, ⌈:data:`ITERATIONS` / 3⌉ iterations of each model after :data:`WARMUP` (a one-take launch of 10: about
5-8 s on the idle 2-core VM, 15-25 s at load 8-10; measured cost of the three: docs/validation.md, tp22).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from executor.calibrate_moments import MOMENTS, Moments, calls_per_moment, moments_text
from simulator.cluster.spec import Cluster

MICRO_BATCHES = 4
"""Micro-batches per iteration: the suite's tp case (global batch 8, micro-batch 2, dp 1)."""
MICRO_BATCH = 2
"""Sequences per micro-batch: the suite's."""
ITERATIONS = 10
"""Timed iterations per launch, each ``MICRO_BATCHES`` micro-batches of each model (440 and 840 calls per rank)."""
WARMUP = 2
TP = 2
"""The tp degree probed (:data:`simulator.cluster.dtensor_wait.GROUP_SIZE`)."""
COUNTS = (2, 4)
"""Process counts probed where the design has them: one pair, and two pairs (the suite's tp-dp)."""
_FUNCOL_LAUNCHES = ("all_reduce", "all_gather_single", "reduce_scatter_single", "all_gather_tensor",
                    "reduce_scatter_tensor", "all_to_all_single")


def _spec():
    from executor.compute_grid import tiny_model
    from simulator.validation_suite import MODEL
    from simulator.workload import DtypePolicy, get_preset

    return tiny_model(get_preset(MODEL), DtypePolicy.FP32, tp=TP)


Timed = tuple[list[float], list[int]]
"""One rank's seconds inside the collectives and calls launched, per timed iteration."""


def _worker(rank: int, world: int, spec, iterations: int, warmup: int) -> dict[bool, Timed]:
    """One rank: the tp model without and with sequence parallelism (key: ``sp``), their iterations interleaved."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh

    from executor.model import build_gpt
    from executor.phase_clock import TpClock
    from executor.strategies.tensor import parallelize_gpt

    mesh = init_device_mesh("cpu", (world // TP, TP), mesh_dim_names=("dp", "tp"))
    models = {sp: parallelize_gpt(build_gpt(spec, seed=0), mesh["tp"], sp) for sp in (False, True)}
    g = torch.Generator().manual_seed(rank // TP)  # a tp pair's ranks see one batch
    x = torch.randint(0, spec.vocab, (MICRO_BATCH, spec.seq_len), generator=g)
    y = torch.randint(0, spec.vocab, (MICRO_BATCH, spec.seq_len), generator=g)
    count = [0]
    saved = {n: getattr(funcol, n) for n in _FUNCOL_LAUNCHES if hasattr(funcol, n)}

    def counted(fn):
        def launch(*args, **kwargs):
            count[0] += 1
            return fn(*args, **kwargs)
        return launch

    clock, out = TpClock(), {sp: ([], []) for sp in models}
    try:
        for name, fn in saved.items():
            setattr(funcol, name, counted(fn))
        with clock.timing():
            for i in range(warmup + iterations):
                for sp, model in models.items():
                    model.zero_grad(set_to_none=True)
                    dist.barrier()
                    s0, n0 = clock.seconds, count[0]
                    for _ in range(MICRO_BATCHES):
                        model(x, y).backward()
                    if i >= warmup:
                        out[sp][0].append(clock.seconds - s0)
                        out[sp][1].append(count[0] - n0)
    finally:
        for name, fn in saved.items():
            setattr(funcol, name, fn)
    return out


def probe_counts(nprocs: Sequence[int]) -> tuple[int, ...]:
    """The process counts of ``nprocs`` the probe runs at (:data:`COUNTS`)."""
    return tuple(p for p in COUNTS if p in set(nprocs))


def dtensor_calls(nprocs: Sequence[int], *, iterations: int = ITERATIONS, warmup: int = WARMUP
                  ) -> dict[int, list[dict[bool, Timed]]]:
    """Process count → each rank's :data:`Timed` of the model without and with sequence parallelism (key ``sp``)."""
    from executor import launch

    spec = _spec()
    return {p: launch.run(_worker, p, (spec, iterations, warmup), backend="gloo") for p in probe_counts(nprocs)}


def fast_call_s(fitted: Cluster, processes: int, sp: bool = False) -> tuple[float, int]:
    """(mean seconds, number) of the calls torch's tp issues per micro-batch of the probe's model (``sp``: with
    sequence parallelism), each at ``fitted``'s estimate without waits on a node of ``processes`` processes
    (:func:`simulator.compile.torch_tp.calls`)."""
    from executor.calibrate import on_node
    from executor.calibrate_modes import without_waits
    from simulator.compile.costs import CostCache
    from simulator.compile.torch_tp import calls

    spec, element_bytes = _spec(), 4  # fp32
    tokens = MICRO_BATCH * spec.seq_len
    fwd, bwd = calls(CostCache(on_node(without_waits(fitted), processes)), tuple(range(TP)),
                     tokens * spec.hidden * element_bytes, tokens * spec.vocab * element_bytes, sp=sp,
                     layers=spec.layers, first=True, last=True, full_recompute=False, concurrent=processes // TP)
    every = fwd + bwd
    return statistics.fmean(c.time_s for c in every), len(every)


def dtensor_waits_us(fitted: Cluster, measured: dict[int, list[dict[bool, Timed]]], sp: bool = False
                     ) -> dict[int, float]:
    """``W_dt(p)`` in µs per process count (module docstring) of the model without (``sp``: with) sequence
    parallelism, never below 0; a count whose calls per iteration differ from the estimate's list is left out (the
    model would price other calls than those measured)."""
    out = {}
    for processes, ranks in sorted(measured.items()):
        mean_fast_s, listed = fast_call_s(fitted, processes, sp)
        timed = [rank[sp] for rank in ranks]
        if any(n != MICRO_BATCHES * listed for _, counts in timed for n in counts):
            continue
        per_call = [s / n for seconds, counts in timed for s, n in zip(seconds, counts)]
        out[processes] = max(0.0, (statistics.fmean(per_call) - mean_fast_s) * 1e6)
    return out


def dtensor_moment(nprocs: Sequence[int], moments: int = MOMENTS) -> dict[int, list[dict[bool, Timed]]]:
    """One moment of the probe: :func:`dtensor_calls` with its share of the timed iterations,
    ⌈:data:`ITERATIONS` / ``moments``⌉ (:func:`executor.calibrate_moments.calls_per_moment`); ``nprocs`` without a
    probed count: nothing launched, ``{}``."""
    return dtensor_calls(nprocs, iterations=calls_per_moment(ITERATIONS, moments)) if probe_counts(nprocs) else {}


def dtensor_moments(fitted: Cluster, takes: Sequence[dict[int, list[dict[bool, Timed]]]]
                    ) -> tuple[dict[int, Moments], dict[int, Moments]]:
    """(``W_dt(p)``, with SP) of each take (:func:`dtensor_moment`) against the same ``fitted``, per process count in
    the order taken: ``({p: Moments}, {p: Moments})``; a take that :func:`dtensor_waits_us` leaves out adds no
    moment."""
    tables: dict[bool, dict[int, list[float]]] = {False: {}, True: {}}
    for measured in takes:
        for sp, table in tables.items():
            for p, us in dtensor_waits_us(fitted, measured, sp).items():
                table.setdefault(p, []).append(us)
    return tuple({p: Moments(tuple(v)) for p, v in tables[sp].items()} for sp in (False, True))


def with_dtensor_waits(cluster: Cluster, waits: dict[int, Moments], sp_waits: dict[int, Moments] | None = None
                       ) -> Cluster:
    """``cluster`` with ``comm.dtensor_wait_us`` = the median of ``waits``' moments per process count and
    ``comm.dtensor_sp_wait_us`` = that of ``sp_waits`` (none measured: unchanged)."""
    from dataclasses import replace

    if not waits and not sp_waits:
        return cluster
    return replace(cluster, comm=replace(cluster.comm,
                                         dtensor_wait_us=tuple(sorted((p, m.median) for p, m in waits.items())),
                                         dtensor_sp_wait_us=tuple(sorted((p, m.median)
                                                                         for p, m in (sp_waits or {}).items()))))


def dtensor_source_text(waits: dict[int, Moments], sp_waits: dict[int, Moments]) -> str:
    """The cluster file's source words for :func:`dtensor_moments`' tables, each the median written, every moment and
    their range ("" when not measured)."""
    if not waits:
        return ""
    return ("; dtensor_wait_us (DTensor's calls in the tp model's micro-batches, mean per call less that fit, "
            f"taken at {len(next(iter(waits.values())).values)} moments spread over the calibration, the median "
            "written, executor.calibrate_dtensor): "
            + moments_text(waits) + "; dtensor_sp_wait_us (the same with sequence parallelism): "
            + moments_text(sp_waits))
