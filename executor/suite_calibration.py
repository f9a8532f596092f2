"""``validate --suite --calibrate``: the one place that turns the flag into the cluster the suite is estimated on.

The network fit (``trainplan calibrate``) and the compute calibration (``trainplan calibrate --compute``) of this
machine, merged into ``RUNS/cluster.yaml``, and the note the report prints of what was measured. Moved out of
:mod:`executor.suite_run` (which runs the cases) to keep each module one job.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from executor.own_cpu import own_cpu_s
from executor.suite_run import _machine_busy_s, foreign_fraction
from simulator.errors import SpecError


def _probe_note(rows) -> str:
    """``; native broadcast probe median |error| X %`` per probe series (the calibration's probes), or ''."""
    import statistics

    series = dict.fromkeys((r.op, r.algorithm) for r in rows)
    return "".join(f"; {op} {algorithm} probe median |error| "
                   f"{statistics.median(abs(r.error_pct) for r in rows if (r.op, r.algorithm) == (op, algorithm)):.1f} %"
                   for op, algorithm in series)


def calibrated_cluster(base: str, runs: Path, *, calibrate_network: bool, nproc: int, backend: str = "gloo",
                       progress: bool = False) -> tuple[str, list[str]]:
    """The cluster (a preset name or a file path) the suite is estimated on, and what was measured for it.

    Without calibration: ``base`` as given. With ``calibrate_network``: ``trainplan calibrate``'s
    fit, with its design (``executor.calibrate.calibrate``'s defaults, :mod:`executor.calibrate_run`: the native
    all-reduce and all-gather fitted with the rings gloo runs, the native broadcast and ring replay probes, the
    sizes, repeats and warm-up) at its process counts up to ``nproc``, written to ``RUNS/cluster.yaml``.

    Then the compute calibration of ``trainplan calibrate --compute``
    (:func:`executor.calibrate_compute.calibrate_compute`: GEMMs of the suite model's tiny shapes,
    memory-bound kernels, the per-kernel overhead, at the threads per rank of ``nproc`` processes) is
    merged into the same cluster before the file is saved; every case is estimated on that file.
    """
    if not calibrate_network:
        return base, []
    from executor.calibrate import calibrate
    from simulator.cluster.io import load_cluster, save_cluster
    from simulator.collectives.base import Op
    from executor.calibrate_moments import moments_text
    from executor.calibrate_run import DEFAULT_PROCESSES, DEFAULT_SIZES, machine_note, spread_text
    from simulator.units import format_size

    if nproc < 2:
        raise SpecError("--nproc", f"--calibrate measures collectives on at least 2 processes, got {nproc}")
    counts = tuple(p for p in DEFAULT_PROCESSES if p <= nproc)
    cluster, fit = calibrate(nproc=counts, op=Op.ALL_REDUCE, backend=backend, base=load_cluster(base),
                             progress=progress)
    from executor.calibrate_compute import calibrate_compute
    from simulator.validation_suite import MODEL
    from simulator.workload import DtypePolicy, get_preset

    load0, busy0, own0, t0 = os.getloadavg()[0], _machine_busy_s(), own_cpu_s(), time.perf_counter()
    cluster, compute = calibrate_compute(cluster, get_preset(MODEL), dtype=DtypePolicy.FP32, backend=backend,
                                         nproc=nproc, progress=progress)
    wall = time.perf_counter() - t0
    compute_machine = machine_note(load0, os.getloadavg()[0], foreign_fraction(busy0, own0, wall))
    runs.mkdir(parents=True, exist_ok=True)
    path = save_cluster(cluster, runs / "cluster.yaml")
    note = (f"network calibrated now: native all-reduce and all-gather (fitted as gloo's rings) on {', '.join(map(str, counts))} {backend} "
            f"processes, {format_size(DEFAULT_SIZES[0])}..{format_size(DEFAULT_SIZES[-1])}: call latency "
            f"{fit.call_latency_us:.1f} us, hop latency {fit.latency_us:.1f} us, bandwidth {fit.bw_GBps:.3f} GB/s "
            f"(p10..p90 {spread_text(fit.spread)}), median |error| {fit.median_abs_error_pct:.1f} %"
            + ("" if not fit.blocking_wait_us else ", wait per blocking call "
               + ", ".join(f"{w:.0f} us at {p}" for p, w in sorted(fit.blocking_wait_us.items()))
               + ("" if not fit.wait_moments else " (median of moments: " + moments_text(fit.wait_moments) + ")"))
            + ("" if fit.replay_step_us is None else f", replay step {fit.replay_step_us:.0f} us")
            + ("" if not cluster.comm.async_broadcast_us else ", per broadcast of an asynchronous batch "
               + ", ".join(f"{us:.0f} us at {p}" for p, us in cluster.comm.async_broadcast_us))
            + _dtensor_note(cluster)
            + _probe_note(fit.probes) + "; compute calibrated "
            f"now on {compute.threads} thread(s) per rank: per-operator overhead "
            f"{compute.fields.kernel_launch_overhead_us:.2f} us forward, "
            f"{compute.fields.backward_call_overhead_us or 0.0:.2f} us backward"
            + ("" if compute.block_call_us is None else
               f" (a rank's step; the block's tight loop {compute.block_call_us[0]:.2f} / "
               f"{compute.block_call_us[1] or 0.0:.2f} us, AdamW's {compute.block_call_us[2]:.2f} us per op call)")
            + f", per op call {compute.fields.op_call_overhead_us:.1f} us, "
            + ("" if getattr(compute, "step_launches", None) is None else f"{compute.step_launches.note()}, ")
            + _dtensor_call_note(compute)
            + f"{cluster.node.host.cpu_cores if cluster.node.host else '?'} cores, "
            + (f"per tp module {compute.tp_modules.forward_module_us:.0f} us forward, "
               f"{compute.tp_modules.backward_module_us:.0f} us backward, " if compute.tp_modules else "")
            + (f"DDP {compute.ddp.forward_call_us:.0f} us per forward, {compute.ddp.sync_backward_us:.0f} us per "
               "synchronising backward, " if compute.ddp else "")
            + (f"FSDP2 {compute.fsdp2.forward_module_us:.0f} / {compute.fsdp2.backward_module_us:.0f} us per module "
               "forward / backward, " if compute.fsdp2 else "")
            + (f"pipeline runtime {compute.pipeline.action_us:.0f} us per action and "
               f"{compute.pipeline.post_us:.0f} us per p2p post, " if compute.pipeline else "")
            + f"{compute.dtype.value} peak "
            f"{compute.fields.peak_tflops[compute.dtype.compute_dtype] * 1e3:.1f} GFLOP/s"
            + (f"; while the network was measured: {fit.machine}" if fit.machine else "")
            + f"; while the compute was measured ({wall:.0f} s): {compute_machine}")
    return str(path), [note]


def _dtensor_call_note(compute) -> str:
    """The DTensor surcharge per optimizer call written (``device.dtensor_call_overhead_us``), and the fake group's
    tight-loop figure beside it where the rank-step probe's FSDP2 steps replaced it."""
    us = compute.fields.dtensor_call_overhead_us
    tight = compute.fsdp2_optimizer.dtensor_call_us if compute.fsdp2_optimizer else None
    in_step = compute.rank_steps is not None and compute.rank_steps.dtensor_call_us is not None
    return (f"per DTensor optimizer call {us:.1f} us more" + (f" (in a rank's FSDP2 step; tight loop {tight:.1f} us)"
                                                              if in_step and tight is not None else "") + ", "
            + _tp_dtensor_call_note(compute))


def _tp_dtensor_call_note(compute) -> str:
    """torch TP's DTensor AdamW surcharge written (``host.tp_dtensor_call_us``, thread CPU) and the wall reading
    beside it, where the tp probe timed its AdamW steps (val31)."""
    from executor.calibrate_host import tp_dtensor_call_us

    tp = getattr(compute, "tp_modules", None)
    if tp is None or tp.optimizer is None:
        return ""
    cpu, wall = (tp_dtensor_call_us(compute.fields, tp, wall=w) for w in (False, True))
    if cpu is None:
        return ""
    return f"torch TP's {cpu:.1f} us (a tp step's thread CPU; its wall {wall:.1f} us), "


def _dtensor_note(cluster) -> str:
    """The wait per DTensor tp call measured in the tp model (``comm.dtensor_wait_us``, with SP
    ``comm.dtensor_sp_wait_us``), or nothing where the calibration did not measure it."""
    comm = cluster.comm
    if not comm.dtensor_wait_us:
        return ""
    text = ", wait per DTensor tp call " + ", ".join(f"{us:.0f} us at {p}" for p, us in comm.dtensor_wait_us)
    if comm.dtensor_sp_wait_us:
        text += " (with sequence parallelism " + ", ".join(
            f"{us:.0f} us at {p}" for p, us in comm.dtensor_sp_wait_us) + ")"
    return text
