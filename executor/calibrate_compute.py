"""Measure this machine's compute and write it into a cluster's device fields.

:func:`calibrate_compute` is the entry point (``trainplan calibrate --compute`` and ``validate --suite``
call it): it times, with :mod:`executor.compute_bench`, in the executor's threads per rank and format,

1. GEMMs over a grid of (m, n, k): square ones and every GEMM shape the tiny-scale run of ``model``
   plans (:func:`run_shapes`); on a GPU, larger squares and the model's GEMMs as planned (:func:`gpu_grid`),
   timed by CUDA events. A shape the model caps as misaligned (:mod:`simulator.gemm_alignment`, an odd
   vocabulary on Hopper) is left out of the curve, which is keyed by FLOPs alone. Each point's rate
   ``F / t`` is a point of ``device.gemm_efficiency``, as a fraction of ``device.peak_tflops`` in the compute
   format (raised to the best measured rate if a GEMM beat it: a peak no run reaches is no peak);
2. memory-bound kernels (:class:`~executor.compute_bench.MemoryKernel`) at growing sizes; at the
   largest, each kernel's bandwidth ``model_bytes / t`` as the compute model counts its bytes. Their
   median over kernels is the achieved bandwidth: ``gemm_efficiency.hbm_efficiency`` =
   achieved / ``device.hbm_bw_GBps`` (``hbm_bw_GBps`` raised to the achieved rate if above it);
3. one transformer block of the tiny ``model``, forward and backward timed apart on the CPU: the host time
   per dispatched operator of each phase

       kernel_launch_overhead_us = (t_fwd − Σ roofline times of the forward kernels) / forward calls,
       backward_call_overhead_us = (t_bwd − Σ roofline times of the backward kernels) / backward calls,

   with the roofline times from steps 1–2 (:func:`simulator.compute.layer_times`) and the calls counted
   from the workload's op list (:func:`simulator.workload.ops.layer_work`, ``Kernel.dispatches``: the
   operators eager torch dispatches, :mod:`simulator.workload.eager_dispatch`; the benchmark's leaf input
   adds one ``.grad`` accumulation), so the compute model reproduces the measured block, phase by phase,
   through the very formula it applies to every kernel of every plan.

   On the CPU (gloo, fp32) the two fields are then taken instead from the whole tiny model as a rank's step runs it
   (:mod:`executor.step_bench`: :data:`~executor.step_bench.STEP_PROBE_PROCESSES` gloo processes in lockstep, each
   micro-batch's forward after the previous backward or the previous step's optimizer), by the same formula over
   the whole model's calls and roofline (:func:`executor.calibrate_calls.step_call_overheads`): the block's tight
   loop kept the code and data hot and understated a rank's forward about twofold (docs/validation.md, "Per-operator
   host time in the rank's step"); the block's own figures stay in the report (``block_call_us``). The same steps'
   AdamW step gives ``op_call_overhead_us`` (step 4's formula) in place of the AdamW's tight loop, and the same
   steps under FSDP2 ZeRO-3 give ``dtensor_call_overhead_us`` in place of the fake group's tight loop (step 5).
   The plain steps' figures (these three, ``host.step_loop_us``, ``host.first_microbatch_cold_us``) are the median
   over :data:`~executor.step_launches.STEP_PROBE_LAUNCHES` independent launches of the probe, each launch's kept
   in the report (:mod:`executor.step_launches`: one launch read 17-24 % low on the twentieth session's VM).

   On a GPU (``--backend nccl``, ``kernel_dispatch: async``) a stream costs max(device, host), so the
   block gives ``o = t_block / kernels`` when it is host-bound and nothing (the base's ``o`` kept) when not;
4. the executor's AdamW step over the tiny model's parameters (on the CPU, gloo): ``op_call_overhead_us`` (the
   optimizer's calls, :mod:`simulator.host_overhead`) by the formula the model applies to it,

       op_call_overhead_us = (t_step − params · adam_bytes_per_param / B_hbm) / (ADAMW_PER_TENSOR_CALLS · tensors),

   with the bytes of the for-loop AdamW torch runs on the CPU

   (on a GPU, and for reference, a bare 1-element ``torch.add`` outside autograd), and this process's CPU
   cores: ``host.cpu_cores``;
5. on the CPU (gloo), the tiny model of a tp = 2 run made tensor-parallel over a 2-rank tp group of gloo
   processes against the plain model on the same ranks, the collectives' own time left out as the executor's tp
   clock leaves it out: ``host.tp_forward_module_us`` and ``host.tp_backward_module_us``, the host time torch's
   tensor parallelism adds per tensor-parallel module (:mod:`executor.tp_host_bench`), and from the same processes'
   AdamW steps ``host.tp_dtensor_call_us``, its optimizer's surcharge per call on a DTensor weight; and the tiny model
   wrapped in DDP on a 1-rank group against the plain one: ``host.ddp_forward_call_us`` and
   ``host.ddp_sync_backward_us``; and the tiny model with every block checkpointed against the plain one:
   ``host.checkpoint_forward_region_us`` and ``host.checkpoint_backward_region_us`` (beyond the block's
   recomputed kernels as the calibrated device times them; on the CPU in fp32 then re-measured in a rank's DDP
   step, :mod:`executor.step_checkpoint_bench`, and the step's figures written); the tiny model under FSDP2
   on a fake 2-rank group against the plain one: ``host.fsdp2_forward_module_us`` and
   ``host.fsdp2_backward_module_us``
   (:mod:`executor.fsdp2_host_bench`); and two processes running torch's pipeline schedule runtime over the
   tiny model's stages: ``host.pipeline_action_us``, its host time per action outside every phase, and
   ``host.pipeline_p2p_post_us``, per send or receive posted (:mod:`executor.pipeline_host_bench`); all in
   :mod:`executor.calibrate_host`. On a GPU the base's figures are kept (not measured there yet).

A component measurement, not a fit to a step: no communication, optimizer or time-sharing between
ranks is in it. The result replaces only these device fields and the host fields named above of ``base`` (a
preset or a ``trainplan calibrate`` file, whose network calibration is kept).
"""

from __future__ import annotations

import datetime
import platform
import statistics
import sys
from dataclasses import replace

import torch

from executor.compute_bench import (MemoryKernel, Timing, model_bytes, row_width, threads, time_bare_call,
                                    time_block, time_block_phases, time_gemm, time_memory_kernel)
from executor.calibrate_calls import block_call_overheads
from executor.compute_grid import ComputeGrid, default_grid, executed, gpu_grid, run_shapes, tiny_model
from executor.calibrate_host import (adamw_call_us, host_cores, measure_host_terms, with_host, with_dtensor_calls,
                                     with_step_ddp, with_step_dtensor_calls, with_step_loop, with_tp_dtensor_calls)
from executor.host_bench import AdamwTiming
from executor.step_bench import STEP_PROBE_PROCESSES, time_rank_steps
from executor.step_timing import RankStepTiming
from executor.step_checkpoint_bench import measure_step_checkpoint, with_step_checkpoint
from executor.compute_records import ComputeCalibration, GemmRow, MemoryRow
from executor.step_launches import STEP_PROBE_LAUNCHES, StepLaunches, launch_fields, with_launch_loop, with_launch_medians
from executor.launch import check_backend, threads_per_rank
from simulator.cluster.spec import Cluster, Device, KernelDispatch
from simulator.errors import SpecError
from simulator.gemm_alignment import misaligned_cap
from simulator.gemm_efficiency import GemmEfficiency

from simulator.workload.kinds import DtypePolicy
from simulator.workload.transformer import TransformerSpec

__all__ = ["PRECISIONS", "ComputeCalibration", "GemmRow", "MemoryRow", "calibrate_compute", "curve_points",
           "device_fields", "measure", "measure_rank_steps",  # this module's; the grid's and the host probes'
           "ComputeGrid", "adamw_call_us", "default_grid", "host_cores", "run_shapes", "tiny_model"]  # re-exported

PRECISIONS = (DtypePolicy.FP32, DtypePolicy.BF16_MIXED)
"""Formats a calibration measures in: those ``trainplan execute --precision`` runs."""

def measure(grid: ComputeGrid, *, dtype: DtypePolicy = DtypePolicy.FP32, backend: str = "gloo",
            thread_count: int = 1, repeats: int = 10, warmup: int = 2,
            progress: bool = False) -> tuple[tuple[GemmRow, ...], tuple[MemoryRow, ...], Timing, Timing,
                                             tuple[Timing, Timing] | None]:
    """Time the grid: GEMM rows, memory rows, a bare call, the block and (on the CPU) its forward and backward."""
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    say = (lambda text: print(text, file=sys.stderr)) if progress else (lambda text: None)
    with threads(thread_count):
        say(f"calibrate --compute: {len(grid.shapes)} GEMM shapes on {device} ({thread_count} thread(s))")
        gemms = tuple(GemmRow(shape=s, timing=time_gemm(s, dtype, device, repeats=repeats, warmup=warmup))
                      for s in grid.shapes)
        say(f"calibrate --compute: {len(MemoryKernel)} memory-bound kernels at {len(grid.elements)} sizes")
        memory = tuple(MemoryRow(kernel=k, elements=n, bytes=model_bytes(k, n, dtype),
                                 timing=time_memory_kernel(k, n, dtype, device, repeats=repeats, warmup=warmup))
                       for k in MemoryKernel for n in grid.elements)
        bare = time_bare_call(device, repeats=max(repeats, 100), warmup=warmup)
        say(f"calibrate --compute: one block of {grid.block.name}, micro-batch {grid.micro_batch}")
        phases = None
        if device.type == "cpu":
            fwd, bwd, block = time_block_phases(grid.block, grid.micro_batch, grid.block.seq_len, dtype,
                                                repeats=max(repeats, 50), warmup=warmup)
            phases = (fwd, bwd)
        else:
            block = time_block(grid.block, grid.micro_batch, grid.block.seq_len, dtype, device,
                               repeats=repeats, warmup=warmup)
    return gemms, memory, bare, block, phases

def curve_points(gemms: tuple[GemmRow, ...], peak_tflops: float) -> tuple[tuple[float, float], ...]:
    """(FLOPs, rate / peak) per distinct FLOP count (median rate over shapes of equal FLOPs), increasing."""
    by_flops: dict[float, list[float]] = {}
    for row in gemms:
        by_flops.setdefault(row.shape.flops, []).append(row.tflops)
    return tuple((flops, min(1.0, statistics.median(rates) / peak_tflops))
                 for flops, rates in sorted(by_flops.items()))

def device_fields(base: Device, grid: ComputeGrid, gemms, memory, block: Timing, dtype: DtypePolicy,
                  source: str, *, bare: Timing | None = None, dispatch: KernelDispatch = KernelDispatch.INLINE,
                  phases: tuple[Timing, Timing] | None = None) -> tuple[Device, int, float]:
    """The calibrated device, the block's host calls and its roofline time (module docstring).
    ``bare``: the bare operator call, written as ``op_call_overhead_us`` (the base's kept without it);
    ``dispatch``: how the measured device runs its kernels (``inline`` on the CPU, ``async`` on a GPU);
    ``phases``: the block's forward and backward timed apart (inline: one figure per phase; without them one
    figure for both, from ``block``)."""
    fmt = dtype.compute_dtype
    best = max(row.tflops for row in gemms)
    peak = max(base.peak_tflops.get(fmt, 0.0), best)
    largest = max(row.elements for row in memory)
    achieved = statistics.median(row.GBps for row in memory if row.elements == largest)
    hbm = max(base.hbm_bw_GBps, achieved)
    aligned = tuple(g for g in gemms if misaligned_cap(g.shape, dtype.activation_bytes, base.compute_capability) == 1.0)
    curve = GemmEfficiency(points=curve_points(aligned or gemms, peak), hbm_efficiency=min(1.0, achieved / hbm),
                           source=source)
    device = replace(base, peak_tflops={**base.peak_tflops, fmt: peak}, hbm_bw_GBps=hbm, gemm_efficiency=curve,
                     hbm_efficiency=None, kernel_launch_overhead_us=0.0, backward_call_overhead_us=None,
                     kernel_dispatch=dispatch,
                     op_call_overhead_us=base.op_call_overhead_us if bare is None else bare.median_s * 1e6)
    return block_call_overheads(base, device, executed(grid.block), grid.micro_batch, block, phases)

def _source(backend: str, thread_count: int, dtype: DtypePolicy, grid: ComputeGrid) -> str:
    host = f"{platform.node()} ({platform.processor() or platform.machine()}, {platform.system()})"
    width = row_width(torch.device("cuda" if backend == "nccl" else "cpu"), max(grid.elements))
    return (f"own measurement: trainplan calibrate --compute on {datetime.date.today().isoformat()}, host {host}, "
            f"torch {torch.__version__}, backend {backend}, {thread_count} thread(s), {dtype.value}; "
            f"{len(grid.shapes)} GEMM shapes, memory kernels up to {max(grid.elements)} elements in rows of {width}, "
            f"block of {grid.block.name} micro-batch {grid.micro_batch}")

def measure_rank_steps(grid: ComputeGrid, *, repeats: int, warmup: int, progress: bool = False,
                       wrapped: bool = True) -> RankStepTiming:
    """The whole tiny fp32 model of ``grid`` in a rank's step on :data:`~executor.step_bench.STEP_PROBE_PROCESSES`
    gloo processes of the executor's threads per rank (:mod:`executor.step_bench`; at least 100 timed steps);
    ``wrapped``: the DDP and FSDP2 steps too (False: the plain steps only, :mod:`executor.step_launches`)."""
    if progress:
        print(f"calibrate --compute: the tiny model's step on {STEP_PROBE_PROCESSES} processes in lockstep",
              file=sys.stderr)
    model = executed(replace(grid.block, dtype=DtypePolicy.FP32))
    return time_rank_steps(model, grid.micro_batch, processes=STEP_PROBE_PROCESSES, repeats=max(repeats, 100),
                           warmup=max(warmup, 5), thread_count=threads_per_rank(STEP_PROBE_PROCESSES), ddp=wrapped,
                           fsdp2=wrapped)


def measure_step_launches(grid: ComputeGrid, device: Device, adamw: AdamwTiming, *, repeats: int, warmup: int,
                          progress: bool = False) -> tuple[RankStepTiming, StepLaunches]:
    """:data:`~executor.step_launches.STEP_PROBE_LAUNCHES` independent launches of the rank-step probe (the first
    with its DDP and FSDP2 steps, which it returns) and each launch's plain-model fields
    (:mod:`executor.step_launches`)."""
    first = measure_rank_steps(grid, repeats=repeats, warmup=warmup, progress=progress)
    more = [measure_rank_steps(grid, repeats=repeats, warmup=warmup, progress=progress, wrapped=False)
            for _ in range(STEP_PROBE_LAUNCHES - 1)]
    spec = executed(grid.block)
    return first, StepLaunches(tuple(launch_fields(device, spec, grid.micro_batch, adamw, DtypePolicy.FP32, s)
                                     for s in (first, *more)))


def calibrate_compute(base: Cluster, spec: TransformerSpec, *, dtype: DtypePolicy = DtypePolicy.FP32,
                      backend: str = "gloo", nproc: int = 1, thread_count: int | None = None,
                      grid: ComputeGrid | None = None, repeats: int = 10, warmup: int = 2,
                      progress: bool = False) -> tuple[Cluster, ComputeCalibration]:
    """Measure this machine's compute and return ``base`` with the measured device fields.

    ``spec`` is the model whose tiny-scale run is measured (its GEMM shapes and its block);
    ``nproc`` the processes the executor will run on this machine, which sets the threads per rank
    (:func:`executor.launch.threads_per_rank`, or ``thread_count``). Only the device's peak in the
    ``dtype``'s compute format, ``hbm_bw_GBps``, ``gemm_efficiency`` and ``kernel_launch_overhead_us``
    change; the network fields of ``base`` are kept.
    """
    if dtype not in PRECISIONS:
        raise SpecError("precision", f"{dtype.value} is not a format the executor runs; use fp32 or bf16")
    check_backend(backend)  # nccl without a visible GPU: one SpecError before anything runs
    grid = grid or (gpu_grid(spec, dtype) if backend == "nccl" else default_grid(spec, dtype))
    count = threads_per_rank(nproc, thread_count)
    gemms, memory, bare, block, phases = measure(grid, dtype=dtype, backend=backend, thread_count=count,
                                                 repeats=repeats, warmup=warmup, progress=progress)
    source = _source(backend, count, dtype, grid)
    dispatch = KernelDispatch.ASYNC if backend == "nccl" else KernelDispatch.INLINE
    device, kernels, roofline = device_fields(base.device, grid, gemms, memory, block, dtype, source, bare=bare,
                                              dispatch=dispatch, phases=phases)
    terms = steps = launches = block_call_us = ckpt = None
    if backend == "gloo":
        terms = measure_host_terms(spec, grid.micro_batch, device, thread_count=count, repeats=repeats, warmup=warmup,
                                   progress=progress)
        device = with_dtensor_calls(replace(device, op_call_overhead_us=adamw_call_us(device, terms.adamw, dtype)),
                                    terms)
        if dtype is DtypePolicy.FP32:
            block_call_us = (device.kernel_launch_overhead_us, device.backward_call_overhead_us,
                             device.op_call_overhead_us)
            steps, launches = measure_step_launches(grid, device, terms.adamw, repeats=repeats, warmup=warmup,
                                                    progress=progress)
            device = with_step_dtensor_calls(with_launch_medians(device, launches), steps)
            ckpt = measure_step_checkpoint(executed(grid.block), grid.micro_batch, device, progress=progress,
                                           thread_count=threads_per_rank(STEP_PROBE_PROCESSES))
    where = torch.cuda.get_device_name(0) if backend == "nccl" else (platform.processor() or platform.machine())
    report = ComputeCalibration(device=where, threads=count, dtype=dtype, gemms=gemms, memory=memory,
                                bare_call=bare, block=block, block_kernels=kernels, block_roofline_s=roofline,
                                fields=device, tp_modules=terms and terms.tp, ddp=terms and terms.ddp,
                                adamw=terms and terms.adamw, checkpoint=terms and terms.checkpoint,
                                fsdp2=terms and terms.fsdp2, pipeline=terms and terms.pipeline, block_phases=phases,
                                fsdp2_zero2=terms and terms.fsdp2_zero2, rank_steps=steps,
                                fsdp2_optimizer=terms and terms.fsdp2_optimizer,
                                block_call_us=block_call_us, step_checkpoint=ckpt, step_launches=launches)
    name = base.name if base.name.endswith("-calibrated") else f"{base.name}-calibrated"
    joined = f"{base.source}; compute: {source}" if base.source else f"compute: {source}"
    node = with_step_checkpoint(with_launch_loop(with_step_loop(with_host(base.node, terms), steps), launches), ckpt)
    node = with_step_ddp(node, steps, terms.ddp.bucket_passes_s if terms is not None else 0.0)
    node = with_tp_dtensor_calls(node, device, terms)
    return replace(base, name=name, device=device, node=node, source=joined), report
