"""The host terms of ``trainplan calibrate --compute`` (steps 4 and 5 of :mod:`executor.calibrate_compute`).

On the CPU (gloo) the framework terms are measured against the plain tiny model and written into the cluster's
``host`` section (:func:`with_host`): torch tensor parallelism per module on a 2-rank tp group, its collectives'
time excluded (:mod:`executor.tp_host_bench`), DDP per forward and synchronising
backward, ``torch.utils.checkpoint`` per region (:mod:`executor.host_bench`), FSDP2 per ``fully_shard`` module
on a fake multi-rank group, wrapped as ZeRO-3 and again as ZeRO-2 for its backward
(:mod:`executor.fsdp2_host_bench`), and torch's pipeline schedule runtime per action and per p2p post
on two gloo processes (:mod:`executor.pipeline_host_bench`); and the executor's AdamW step gives
``device.op_call_overhead_us`` (:func:`adamw_call_us`), and the same step over FSDP2's DTensor shards
``device.dtensor_call_overhead_us`` (:func:`with_dtensor_calls`; on the CPU in fp32 then re-measured in a rank's
FSDP2 step, :func:`with_step_dtensor_calls`); the tp probe's AdamW steps over torch tensor parallelism's DTensor
weights give ``host.tp_dtensor_call_us`` (:func:`with_tp_dtensor_calls`). On a GPU the base's figures are kept (not
measured there).
On the CPU in fp32 DDP's two terms are then taken from the rank-step probe's DDP steps (:func:`with_step_ddp`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

from executor.compute_bench import threads
from executor.compute_grid import executed, tiny_model
from executor.fsdp2_host_bench import Fsdp2OptimizerTiming, Fsdp2Timing, time_fsdp2_modules, time_fsdp2_optimizer
from executor.host_bench import (AdamwTiming, CheckpointTiming, DdpTiming, TpModuleTiming, time_adamw, time_checkpoint,
                                 time_ddp)
from executor.launch import threads_per_rank
from executor.pipeline_host_bench import PipelineActionTiming, time_pipeline_actions
from executor.tp_host_bench import TP_PROBE_RANKS, time_tp_group_modules
from simulator.cluster.spec import Device
from simulator.compute import Phase, layer_times, total_time
from simulator.workload import Recompute
from simulator.workload.kinds import DtypePolicy
from simulator.workload.transformer import TransformerSpec

PIPELINE_PROBE_PP = 2
"""Processes of the pipeline probe: the suite's pipelines' pp (each process one stage of the tiny model)."""


@dataclass(frozen=True, kw_only=True)
class HostTerms:
    """What the host-term probes measured (each derives its term; :func:`with_host` writes them)."""

    tp: TpModuleTiming
    ddp: DdpTiming
    adamw: AdamwTiming
    checkpoint: CheckpointTiming
    fsdp2: Fsdp2Timing
    pipeline: PipelineActionTiming
    fsdp2_zero2: Fsdp2Timing | None = None
    """The same probe with ``reshard_after_forward=False`` (ZeRO-2); None: not measured."""
    fsdp2_optimizer: Fsdp2OptimizerTiming | None = None
    """AdamW over FSDP2's DTensor shards against the plain model's tensors: ``device.dtensor_call_overhead_us``
    (:func:`with_dtensor_calls`); None: not measured."""


def measure_host_terms(spec: TransformerSpec, micro_batch: int, device: Device, *, thread_count: int, repeats: int,
                       warmup: int, progress: bool = False) -> HostTerms:
    """The probes of the module docstring for the tiny fp32 model of ``spec``; ``device``: the calibrated device,
    whose recompute time of one block is subtracted from the checkpoint's backward."""
    if progress:
        print("calibrate --compute: the tiny model under torch TP on 2 processes (tp = 2), DDP and checkpoints on a "
              "1-rank group, "
              "FSDP2 on a fake 2-rank group, its AdamW step, and torch's pipeline runtime on 2 processes",
              file=sys.stderr)
    model = tiny_model(spec, DtypePolicy.FP32)
    rerun_s = total_time(layer_times(executed(model), device, micro_batch, recompute=Recompute.FULL), Phase.RECOMPUTE)
    passes_s = ddp_bucket_passes_s(device, model)
    more = max(repeats, 100)
    with threads(thread_count):
        measured = dict(ddp=time_ddp(model, micro_batch, repeats=more, warmup=warmup, bucket_passes_s=passes_s),
                        adamw=time_adamw(model, repeats=more, warmup=warmup),
                        checkpoint=time_checkpoint(model, micro_batch, rerun_s, repeats=more, warmup=warmup),
                        fsdp2=time_fsdp2_modules(model, micro_batch, repeats=more, warmup=warmup),
                        fsdp2_zero2=time_fsdp2_modules(model, micro_batch, repeats=more, warmup=warmup,
                                                       reshard_after_forward=False),
                        fsdp2_optimizer=time_fsdp2_optimizer(model, micro_batch, repeats=more, warmup=warmup))
    tp = time_tp_group_modules(tiny_model(spec, DtypePolicy.FP32, tp=TP_PROBE_RANKS), micro_batch,
                               repeats=max(repeats, 50), warmup=warmup, thread_count=threads_per_rank(TP_PROBE_RANKS))
    pipeline = time_pipeline_actions(pp=PIPELINE_PROBE_PP, spec=model, micro_batch=micro_batch, repeats=more,
                                     warmup=warmup, thread_count=threads_per_rank(PIPELINE_PROBE_PP))
    return HostTerms(**measured, tp=tp, pipeline=pipeline)


def ddp_bucket_passes_s(device: Device, spec: TransformerSpec) -> float:
    """The model's seconds for DDP's bucket passes over the fp32 gradients of :func:`executor.model.build_gpt` of
    ``spec`` without bucket views (:func:`simulator.workload.ddp_bucket.ddp_bucket_kernel` through
    :func:`simulator.compute.kernel_s`, the step's own path) [src: torch-ddp-bucket-copies]."""
    from simulator.compute import kernel_s
    from simulator.workload.ddp_bucket import ddp_bucket_kernel

    return kernel_s(device, DtypePolicy.FP32, ddp_bucket_kernel(spec.params, 4, gradient_as_bucket_view=False))


def adamw_call_us(device: Device, adamw: AdamwTiming, dtype: DtypePolicy) -> float:
    """Host µs per AdamW operator call (step 4's formula): the measured step less its memory-bound update on
    ``device`` (:func:`simulator.compile.offload_part.gpu_optimizer_s`'s bytes over the achievable bandwidth),
    over its calls; at least 0. The update's bytes are those of the implementation ``make_optimizer`` ran,
    torch's default on ``device`` (the torch framework's,
    :meth:`~simulator.strategy.framework.Framework.optimizer_impl`)."""
    from simulator.cluster.spec import KernelDispatch
    from simulator.compile import adam_bytes_per_param
    from simulator.compute import achievable_hbm_Bps
    from simulator.host_overhead import ADAMW_PER_TENSOR_CALLS
    from simulator.strategy.framework import Framework

    impl = Framework.TORCH_DDP.optimizer_impl(foreach_device=device.kernel_dispatch is not KernelDispatch.INLINE)
    update_s = adamw.params * adam_bytes_per_param(dtype, impl) / achievable_hbm_Bps(device)
    return max(0.0, (adamw.step.median_s - update_s) / (ADAMW_PER_TENSOR_CALLS * adamw.tensors) * 1e6)


def with_dtensor_calls(device: Device, terms: HostTerms | None) -> Device:
    """``device`` with ``dtensor_call_overhead_us`` from the FSDP2 optimizer probe
    (:func:`executor.fsdp2_host_bench.time_fsdp2_optimizer`) where it ran, else as is (the base's figure)."""
    if terms is None or terms.fsdp2_optimizer is None:
        return device
    return replace(device, dtensor_call_overhead_us=terms.fsdp2_optimizer.dtensor_call_us)


def with_step_dtensor_calls(device: Device, steps) -> Device:
    """``device`` with ``dtensor_call_overhead_us`` from the rank-step probe's FSDP2 steps
    (:attr:`executor.step_timing.RankStepTiming.dtensor_call_us`: AdamW over the shards after an FSDP2 ZeRO-3 backward
    on 2 gloo processes, less the plain model's AdamW in the same processes, per call), in place of the fake group's
    tight loop (:func:`with_dtensor_calls`), as ``op_call_overhead_us`` is taken from the same steps' plain AdamW
    [src: own-dtensor-in-step-probe]; as is where the probe did not run FSDP2 steps."""
    us = None if steps is None else steps.dtensor_call_us
    return device if us is None else replace(device, dtensor_call_overhead_us=us)


def tp_dtensor_call_us(device: Device, tp: TpModuleTiming, *, wall: bool = False) -> float | None:
    """µs an AdamW operator call on a torch tensor-parallel DTensor weight costs beyond a plain tensor's, from the tp
    probe's AdamW steps in a 2-process tp step (:class:`executor.tp_host_bench.TpOptimizerTiming`):

        max(0, (c_opt(tp) − u(tp)) − (c_opt(plain) − u(plain))) / (ADAMW_PER_TENSOR_CALLS · dtensor_tensors)

    with ``c_opt`` the steps' thread-CPU medians (mean over ranks) and ``u(model) = elements · adam_bytes_per_param
    / achievable bandwidth`` on ``device``, the update of the rank's own elements (a tp rank holds about half of the
    sharded weights: its update is shorter, which would otherwise read as a cheaper DTensor call)
    [src: own-tp-dtensor-in-step-probe]. Thread CPU, not wall: on a quiet machine the two agree (2 processes on 2
    cores), while under other work's load the probe's plain AdamW wall read 1.5-5.4x its CPU, its tp AdamW 1.5-2.3x
    and the executor's tp run's 1.0-2.6x, so a difference of two walls read 3-98 µs per call where the CPU's read
    17-58 and tracked the run's (docs/validation.md, val31). ``wall``: from the wall medians (reported beside it). None where the probe did not time the steps."""
    from simulator.compile import adam_bytes_per_param
    from simulator.compute import achievable_hbm_Bps
    from simulator.host_overhead import ADAMW_PER_TENSOR_CALLS
    from simulator.strategy.kinds import OptimizerImpl

    opt = tp.optimizer
    if opt is None or opt.dtensor_tensors <= 0:
        return None
    tp_t, plain_t = (opt.tp, opt.plain) if wall else (opt.tp_cpu, opt.plain_cpu)
    if tp_t is None or plain_t is None:
        return None
    per_element_s = adam_bytes_per_param(DtypePolicy.FP32, OptimizerImpl.FOR_LOOP) / achievable_hbm_Bps(device)
    tp_s = tp_t.median_s - opt.tp_params * per_element_s
    plain_s = plain_t.median_s - opt.plain_params * per_element_s
    return max(0.0, tp_s - plain_s) / (ADAMW_PER_TENSOR_CALLS * opt.dtensor_tensors) * 1e6


def with_tp_dtensor_calls(node, device: Device, terms: HostTerms | None):
    """``node`` with ``host.tp_dtensor_call_us`` = :func:`tp_dtensor_call_us` on ``device`` where the tp probe timed
    its AdamW steps (the CPU, gloo); as is without a host section or the steps (the field stays unset, and
    ``device.dtensor_call_overhead_us`` prices torch TP's DTensor calls: :func:`simulator.host_overhead.dtensor_call_us`)."""
    us = None if terms is None else tp_dtensor_call_us(device, terms.tp)
    if node.host is None or us is None:
        return node
    return replace(node, host=replace(node.host, tp_dtensor_call_us=us))


def host_cores() -> int:
    """CPU cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where it does not exist)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def with_host(node, terms: HostTerms | None):
    """``node`` with its host's ``cpu_cores`` set to this machine's :func:`host_cores` and, where measured
    (``terms``), the framework terms of the module docstring (no host section: as is)."""
    if node.host is None:
        return node
    host = replace(node.host, cpu_cores=host_cores())
    if terms is not None:
        host = replace(host, tp_forward_module_us=terms.tp.forward_module_us,
                       tp_backward_module_us=terms.tp.backward_module_us,
                       ddp_forward_call_us=terms.ddp.forward_call_us, ddp_sync_backward_us=terms.ddp.sync_backward_us,
                       checkpoint_forward_region_us=terms.checkpoint.forward_region_us,
                       checkpoint_backward_region_us=terms.checkpoint.backward_region_us,
                       fsdp2_forward_module_us=terms.fsdp2.forward_module_us,
                       fsdp2_backward_module_us=terms.fsdp2.backward_module_us,
                       fsdp2_zero2_backward_module_us=(None if terms.fsdp2_zero2 is None
                                                       else terms.fsdp2_zero2.backward_module_us),
                       pipeline_action_us=terms.pipeline.action_us,
                       pipeline_p2p_post_us=terms.pipeline.post_us, pipeline_chunk_us=terms.pipeline.chunk_us)
    return replace(node, host=host)


def with_step_loop(node, steps):
    """``node`` with ``host.step_loop_us`` and ``host.first_microbatch_cold_us`` from the rank-step probe
    (:class:`executor.step_timing.RankStepTiming`: ``outside_s`` and ``first_cold_s``, µs, at least 0)
    [src: own-step-loop-probe], and where the probe ran FSDP2 steps ``host.fsdp2_sync_switch_us`` and
    ``host.fsdp2_zero_grad_us`` from them (``RankStepTiming.fsdp2_sync_switch_us``, ``.fsdp2_zero_grad_us``)
    [src: own-fsdp2-loop-probe]; as is without a host section or a probe (a GPU, bf16).

    ``host.rank_jitter_sd_fraction`` (:mod:`simulator.rank_max`) is NOT written from the same steps: max23 found the
    2-rank probe's lift (``step_independent_sd_fraction``) 3x the suite cases' own-work lift at 2 ranks and half of it
    at 4 (docs/validation.md, max23), so the field stays 0 until a per-process-count probe sizes it; a cluster file
    may still set it."""
    if node.host is None or steps is None:
        return node
    host = replace(node.host, step_loop_us=max(0.0, steps.outside_s * 1e6),
                   first_microbatch_cold_us=max(0.0, steps.first_cold_s * 1e6))
    if steps.fsdp2_zero_grad_us is not None:  # the probe's FSDP2 steps ran (the CPU in fp32)
        host = replace(host, fsdp2_sync_switch_us=steps.fsdp2_sync_switch_us,
                       fsdp2_zero_grad_us=steps.fsdp2_zero_grad_us)
    return replace(node, host=host)


def with_step_ddp(node, steps, bucket_passes_s: float = 0.0):
    """``node`` with DDP's host terms from the rank-step probe's DDP steps (:class:`executor.step_timing.RankStepTiming`)
    in place of the tight loop's on one rank (:func:`with_host`):

        host.ddp_forward_call_us  = RankStepTiming.ddp_forward_call_us
        host.ddp_sync_backward_us = max(0, RankStepTiming.ddp_sync_extra_s − bucket_passes_s) · 1e6

    ``bucket_passes_s``: the model's time for the reducer's bucket passes, a kernel of the step's own
    (:func:`ddp_bucket_passes_s`) [src: own-ddp-step-probe]; as is without a host section or DDP steps."""
    if node.host is None or steps is None or steps.ddp_forward_call_us is None:
        return node
    host = replace(node.host, ddp_forward_call_us=steps.ddp_forward_call_us,
                   ddp_sync_backward_us=max(0.0, steps.ddp_sync_extra_s - bucket_passes_s) * 1e6)
    return replace(node, host=host)
