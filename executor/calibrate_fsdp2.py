"""The calibration's FSDP2 probe: the wait for a core of FSDP2's blocking collectives, measured inside the executor's
FSDP2 models (``comm.fsdp2_wait_us``; the rule that reads it: :mod:`simulator.cluster.fsdp2_wait`).

The sweep's wait (``comm.op_wait_us``, :mod:`executor.calibrate_modes`) is measured on calls issued back to back; an
FSDP2 step's calls each follow a module's compute, which the two ranks run apart, so each call also waits for the
slower rank (:mod:`simulator.cluster.fsdp2_wait`). So, on :data:`PROCESSES` gloo processes of this machine (one
FSDP2 pair, the suite's ZeRO cases), every rank runs the executor's own FSDP2 wrapping of the suite's tiny model
(:func:`executor.strategies.dp_wrap.wrap_fsdp`'s: ``fully_shard`` on every block, then the root; fp32) twice, with
``reshard_after_forward`` True (ZeRO-3) and False (ZeRO-2), their iterations interleaved, each :data:`MICRO_BATCHES`
micro-batches' forward and backward back to back as a step runs them (a barrier before each iteration, none between
micro-batches), and counts the seconds spent inside ``dist.all_gather_single`` and ``dist.reduce_scatter_single``
(the calls FSDP2 makes, ``_fsdp_collectives.py``), and the calls:

    W_fsdp2(p) = mean over ranks, models and timed iterations of  seconds / calls  −  mean T_fast(call)
                                                                              → comm.fsdp2_wait_us[p]

``T_fast`` the fitted cluster's estimate without waits of each call of the estimate's own list for the suite's zero3
and zero2 cases (a chunk's ``zero_fwd`` and ``zero_bwd`` per micro-batch, :func:`simulator.compile.compile_step`);
the count measured must equal the list's length, else nothing is written. The mean, not a percentile: a step pays
the sum of its calls' waits. Cost: one launch of :data:`ITERATIONS` iterations of each model after :data:`WARMUP`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

from simulator.cluster.spec import Cluster

MICRO_BATCHES = 2
"""Micro-batches per iteration: the suite's ZeRO cases (global batch 8, micro-batch 2, dp 2)."""
MICRO_BATCH = 2
"""Sequences per micro-batch: the suite's."""
ITERATIONS = 12
WARMUP = 3
PROCESSES = 2
"""The process count probed: one FSDP2 pair (:data:`simulator.cluster.fsdp2_wait.GROUP_SIZE`)."""
CASES = {3: "zero3", 2: "zero2"}
"""ZeRO stage → the suite case whose calls the estimate lists for it."""
_CALLS = ("all_gather_single", "reduce_scatter_single")

Timed = tuple[list[float], list[int]]
"""One rank's seconds inside FSDP2's collectives and calls made, per timed iteration."""


def _spec():
    from executor.compute_grid import tiny_model
    from simulator.validation_suite import MODEL
    from simulator.workload import DtypePolicy, get_preset

    return tiny_model(get_preset(MODEL), DtypePolicy.FP32)


def _worker(rank: int, world: int, spec, iterations: int, warmup: int) -> dict[int, Timed]:
    """One rank: the ZeRO-3 and ZeRO-2 wrappings (key: the stage), their iterations interleaved."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from executor.model import build_gpt

    mesh = init_device_mesh("cpu", (world,))
    models = {}
    for zero in CASES:
        model = build_gpt(spec, seed=0)
        for block in model.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=zero == 3)
        models[zero] = fully_shard(model, mesh=mesh, reshard_after_forward=zero == 3)
    g = torch.Generator().manual_seed(rank)  # each dp rank its own samples
    x = torch.randint(0, spec.vocab, (MICRO_BATCH, spec.seq_len), generator=g)
    y = torch.randint(0, spec.vocab, (MICRO_BATCH, spec.seq_len), generator=g)
    inside, count = [0.0], [0]
    saved = {n: getattr(dist, n) for n in _CALLS}

    def timed(fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                inside[0] += time.perf_counter() - start
                count[0] += 1
        return call

    out = {zero: ([], []) for zero in models}
    try:
        for name, fn in saved.items():
            setattr(dist, name, timed(fn))
        for i in range(warmup + iterations):
            for zero, model in models.items():
                model.zero_grad(set_to_none=False)
                dist.barrier()
                s0, n0 = inside[0], count[0]
                for _ in range(MICRO_BATCHES):
                    (model(x, y) / MICRO_BATCHES).backward()
                if i >= warmup:
                    out[zero][0].append(inside[0] - s0)
                    out[zero][1].append(count[0] - n0)
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)
    return out


def fsdp2_calls(*, iterations: int = ITERATIONS, warmup: int = WARMUP) -> list[dict[int, Timed]]:
    """Each rank's :data:`Timed` per ZeRO stage on :data:`PROCESSES` gloo processes."""
    from executor import launch

    return launch.run(_worker, PROCESSES, (_spec(), iterations, warmup), backend="gloo")


def listed_calls(fitted: Cluster, zero: int, processes: int = PROCESSES) -> tuple:
    """The FSDP2 calls of one micro-batch of the suite's ZeRO-``zero`` case as the estimate lists them (its chunk's
    ``zero_fwd`` then ``zero_bwd``), priced on ``fitted`` without waits on a node of ``processes`` processes; the
    framework FSDP2, as the executor runs it and writes it into the plan as run."""
    from executor.calibrate import on_node
    from executor.calibrate_modes import without_waits
    from dataclasses import replace

    from simulator.compile import compile_step
    from simulator.strategy import Framework, build_layout
    from simulator.validation_suite import case_by_name, case_plan

    cluster = on_node(without_waits(fitted), processes)
    strategy = replace(case_plan(case_by_name(CASES[zero])).strategy, framework=Framework.FSDP2)  # as the run's plan
    workload = _spec()
    layout = build_layout(strategy, cluster, workload, gpus=processes)
    chunk = compile_step(cluster, workload, strategy, layout=layout).stages[0].chunks[0]
    return chunk.zero_fwd + chunk.zero_bwd


def fsdp2_waits_us(fitted: Cluster, measured: list[dict[int, Timed]], processes: int = PROCESSES
                   ) -> dict[int, float]:
    """``{processes: W_fsdp2}`` in µs (module docstring), never below 0; empty where a model's calls per iteration
    differ from the estimate's list (the model would price other calls than those measured)."""
    excess = []
    for zero in CASES:
        listed = listed_calls(fitted, zero, processes)
        timed = [rank[zero] for rank in measured]
        if not listed or any(n != MICRO_BATCHES * len(listed) for _, counts in timed for n in counts):
            return {}
        fast_s = statistics.fmean(c.time_s for c in listed)
        excess += [s / n - fast_s for seconds, counts in timed for s, n in zip(seconds, counts)]
    return {processes: max(0.0, statistics.fmean(excess) * 1e6)}


def with_fsdp2_waits(cluster: Cluster, waits_us: dict[int, float]) -> Cluster:
    """``cluster`` with ``comm.fsdp2_wait_us`` = ``waits_us`` (none measured: unchanged)."""
    from dataclasses import replace

    if not waits_us:
        return cluster
    return replace(cluster, comm=replace(cluster.comm, fsdp2_wait_us=tuple(sorted(waits_us.items()))))


def measure_fsdp2_waits(fitted: Cluster, nprocs: Sequence[int]) -> dict[int, float]:
    """``comm.fsdp2_wait_us`` of ``fitted`` (the calibration's fit) measured on this machine now, where the design
    has :data:`PROCESSES` processes (else nothing)."""
    if PROCESSES not in set(nprocs):
        return {}
    return fsdp2_waits_us(fitted, fsdp2_calls())


def fsdp2_source_text(waits_us: dict[int, float]) -> str:
    """The cluster file's source words for :func:`measure_fsdp2_waits`' table ("" when not measured)."""
    if not waits_us:
        return ""
    return ("; fsdp2_wait_us (FSDP2's calls in the ZeRO-3 and ZeRO-2 models' micro-batches, mean per call less that "
            "fit, executor.calibrate_fsdp2): " + ", ".join(f"{us:.1f} us at {p} processes"
                                                            for p, us in sorted(waits_us.items())))
