"""Time torch tensor parallelism's host cost per module on a real tp group (``trainplan calibrate --compute``).

A tp rank of the executor (:mod:`executor.strategies.tensor`) spends, beyond the plain model's work, DTensor's
dispatch of every operator on the modules' DTensors, the parallel styles' input and output hooks, and, around each
of the group's collectives, what a 1-rank mesh never runs: the functional collective's ``AsyncCollectiveTensor``
and autograd wrappers, the first operator after a wait (its ``__torch_dispatch__`` unwraps the result), and the
calls that follow a blocked thread's wake-up, which run on cold caches (a 32×32×96 GEMM 3 µs warm, 38-74 µs after
5 ms of sleep or other work: docs/validation.md, host14). The executor's forward and backward phases hold all of
that; only the time *inside* the functional collectives and their waits is its tp phase
(:class:`executor.phase_clock.TpClock`). This probe measures the terms the way those phases measure them:

    tp_forward_module_us  = max(0, (t_fwd(tp) − t_fwd(plain)) / modules)
    tp_backward_module_us = max(0, (t_fwd+bwd(tp) − t_fwd+bwd(plain)) / modules − tp_forward_module_us)

with ``t(tp)`` the tp model's forward (and forward + backward) *less the time the executor's own* ``TpClock``
*counts inside its collectives*, on :data:`TP_PROBE_RANKS` gloo processes of this machine forming one tp mesh, each
also timing the plain (unsplit) model in the same iterations; each ``t`` the **median** of its calls, the mean over
ranks. The median, not the 10th percentile (until 2026-11-26, tp21): a step's forward and backward phases are sums
over its micro-batches and modules, so they pay the typical call, and the step's loop (4 micro-batches back to back
after an AdamW step, the mean per micro-batch) measured 0.92-1.01 of this loop's median and 1.12-1.27 of its p10 in
the same launches (``benchmarks/tp_step_host_probe.py``, docs/validation.md "tp21")
[src: own-tp-step-host-probe-2026-11-26]; the median rather than the mean because one micro-batch right after a
barrier has rare long outliers under load. ``modules`` as there (4 per block, embedding and output layer). Both
models are the run's tiny model for tp = 2 (:func:`executor.compute_grid.tiny_model`), fp32, the ranks in lockstep
(a barrier before each model's iteration, as a run's step starts) [src: own-tp-group-probe].

The same processes then time the executor's AdamW step (:func:`executor.reference.make_optimizer`, torch's per-tensor
loop on the CPU) the way a tp rank's step runs it (:class:`executor.strategies.parallel.ParallelRunner`:
``zero_grad(set_to_none=True)``, a barrier, forward and backward with the tp clock on, the gradient norm the run
computes for its checks (untimed there too: it waits for the backward's last functional collectives and all-reduces
over the tp group, so that the AdamW step starts on finished gradients in both), then ``optimizer.step()``), on
the plain model's steps and then the tp model's, ``repeats`` steps each (:func:`_optimizer_steps`). The AdamW operators
on the tp model's DTensor weights cost more than on plain tensors (DTensor's dispatch of every ``lerp_``, ``mul_``,
``addcdiv_``...); per call

    tp_dtensor_call_us = max(0, (c_opt(tp) − u(tp)) − (c_opt(plain) − u(plain))) / (10 · dtensor_tensors)

with ``c_opt`` the steps' thread-CPU medians (mean over ranks; the wall medians are kept and reported: under other
work's load they follow it more than a run's AdamW does), ``u`` the memory-bound update of the rank's parameters on the
calibrated device (:func:`executor.calibrate_host.tp_dtensor_call_us`) and ``dtensor_tensors`` the tp model's
DTensor parameters (17 of the tiny model's 28, :func:`tp_param_counts`): ``host.tp_dtensor_call_us``, which the tp
cases' optimizer estimate reads in place of FSDP2's figure (:func:`simulator.host_overhead.dtensor_call_us`)
[src: own-tp-dtensor-in-step-probe].

Until 2026-11-25 the terms came from a **1-rank** mesh (``executor.host_bench``'s former ``time_tp_modules``), where
DTensor issues no collective: 147 / 227 µs per module there against 330-420 / 350-420 µs on a 2-rank group in the
same minutes (docs/validation.md, "Tensor-parallel cases"). The plain model's work on the tp rank is half its GEMMs'
flops; at the tiny scale those are a few µs of the difference and are left in it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace

from executor.compute_bench import Timing, timing_of
from executor.host_bench import TpModuleTiming, tp_modules
from simulator.workload.transformer import TransformerSpec

TP_PROBE_RANKS = 2
"""Ranks of the probe's tp mesh: the suite's tp degree (tp, tp-sp, tp-dp, 3d all run tp = 2) and this 2-core
machine's cores; the term is charged per module at any tp."""


def tp_probe_setup(spec: TransformerSpec, world: int, micro_batch: int, seed: int = 0, *,
                   sequence_parallel: bool = False) -> tuple[dict, object, object]:
    """A tp probe rank's models and batch: on a ``world``-rank cpu mesh, ``{"plain": the unsplit model, "tp": the
    executor's tp model}`` (with ``sequence_parallel`` also ``"sp"``: its tp model with sequence parallelism), each
    built from ``seed`` (:func:`executor.model.build_gpt`), and one micro-batch ``(x, y)`` of ``micro_batch``
    sequences drawn from ``seed``. Shared by :func:`_tp_rank` and the probes in ``benchmarks/`` that time the same
    models (``sp_module_probe.py``, ``tp_step_host_probe.py``)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from executor.model import build_gpt
    from executor.strategies.tensor import parallelize_gpt

    mesh = init_device_mesh("cpu", (world,))
    models = {"plain": build_gpt(spec, seed=seed), "tp": parallelize_gpt(build_gpt(spec, seed=seed), mesh, False)}
    if sequence_parallel:
        models["sp"] = parallelize_gpt(build_gpt(spec, seed=seed), mesh, True)
    g = torch.Generator().manual_seed(seed)  # the same batch on every rank, as a tp group's ranks see it
    x = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
    y = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
    return models, x, y


def _tp_rank(rank: int, world: int, spec: TransformerSpec, micro_batch: int, repeats: int, warmup: int,
             seed: int) -> dict[str, list[float]]:
    """One rank (``executor.launch.run``): per timed iteration the plain model's forward and forward + backward, then
    the tp model's, each less the seconds its ``TpClock`` counted inside the collectives (``collectives``: those
    seconds per forward + backward), then each model's AdamW step per step (``plain_optimizer``, ``tp_optimizer``:
    :func:`_optimizer_steps`)."""
    from executor.phase_clock import TpClock

    models, x, y = tp_probe_setup(spec, world, micro_batch, seed)
    plain, tp = models["plain"], models["tp"]
    clock, out = TpClock(), {k: [] for k in ("plain_forward", "plain_step", "tp_forward", "tp_step", "collectives")}
    _module_steps(plain, tp, x, y, clock, out, repeats, warmup)
    out.update(_optimizer_steps(models, x, y, clock, repeats, warmup))
    return out


def _module_steps(plain, tp, x, y, clock, out: dict, repeats: int, warmup: int) -> None:
    """:func:`_tp_rank`'s module loop: per iteration each model's forward and forward + backward after a barrier,
    less its collectives' seconds, appended to ``out``."""
    import torch.distributed as dist

    with clock.timing():
        for i in range(warmup + repeats):
            times = {}
            for name, model in (("plain", plain), ("tp", tp)):
                dist.barrier()
                c0, t0 = clock.seconds, time.perf_counter()
                loss = model(x, y)
                c1, t1 = clock.seconds, time.perf_counter()
                loss.backward()
                c2, t2 = clock.seconds, time.perf_counter()
                times[f"{name}_forward"], times[f"{name}_step"] = (t1 - t0) - (c1 - c0), (t2 - t0) - (c2 - c0)
                times["collectives"] = c2 - c0  # the plain model's 0 is overwritten by the tp model's
            if i >= warmup:
                for key, value in times.items():
                    out[key].append(value)


def _optimizer_steps(models: dict, x, y, clock, repeats: int, warmup: int) -> dict[str, list[float]]:
    """The plain model's steps, then the tp model's, each step's AdamW after its forward and backward, as a tp rank's
    step runs it (module docstring; the two loops apart, as the rank-step probe runs its plain and FSDP2 steps):
    ``{"plain_optimizer": [...], "tp_optimizer": [...]}``, seconds per step, and the same steps' thread CPU seconds
    (``plain_optimizer_cpu``, ``tp_optimizer_cpu``: what the written figure is taken from)."""
    import torch.distributed as dist

    from executor.reference import make_optimizer
    from executor.strategies.stage_experts import grad_norm

    out = {}
    for name in ("plain", "tp"):
        model = models[name]
        optimizer, params, wall, cpu = make_optimizer(model.parameters()), list(model.parameters()), [], []
        for i in range(warmup + repeats):
            optimizer.zero_grad(set_to_none=True)
            dist.barrier()
            with clock.timing():
                model(x, y).backward()
            # the run's untimed check before its AdamW step: the gradients' norm, all-reduced over the tp group
            grad_norm(params, [], device=x.device, sharded=False, dp_group=None, ep_group=None, pp_group=None,
                      tp_group=dist.group.WORLD if name == "tp" else None, tp_rank=dist.get_rank())
            w0, c0 = time.perf_counter(), time.thread_time()
            optimizer.step()
            if i >= warmup:
                wall.append(time.perf_counter() - w0)
                cpu.append(time.thread_time() - c0)
        out[f"{name}_optimizer"], out[f"{name}_optimizer_cpu"] = wall, cpu
    return out


def mean_timing(timings: list[Timing]) -> Timing:
    """Each statistic the mean over ranks."""
    return Timing(median_s=statistics.fmean(t.median_s for t in timings),
                  p10_s=statistics.fmean(t.p10_s for t in timings), p90_s=statistics.fmean(t.p90_s for t in timings))


@dataclass(frozen=True, kw_only=True)
class TpOptimizerTiming:
    """The AdamW steps of :func:`_optimizer_steps` (each statistic the mean over ranks) and what they step."""

    plain: Timing
    tp: Timing
    plain_params: int
    """Parameter elements the plain model's step updates."""
    tp_params: int
    """Parameter elements a tp rank's step updates (its DTensor weights' local shards and the plain tensors)."""
    dtensor_tensors: int
    """The tp model's DTensor parameters (each costs ``ADAMW_PER_TENSOR_CALLS`` DTensor calls per step)."""
    plain_cpu: Timing | None = None
    """The plain model's steps' thread CPU seconds (None: not timed; ``host.tp_dtensor_call_us`` is taken from these
    and :attr:`tp_cpu`)."""
    tp_cpu: Timing | None = None
    """The tp model's steps' thread CPU seconds."""


def tp_param_counts(spec: TransformerSpec, world: int = TP_PROBE_RANKS) -> tuple[int, int, int]:
    """``(plain elements, a tp rank's elements, DTensor parameters)`` of the probe's two models, counted on torch's
    fake ``world``-rank group (the models :func:`tp_probe_setup` builds; nothing runs)."""
    from torch.distributed.tensor import DTensor

    from executor.fsdp2_host_bench import fake_group

    with fake_group(world):
        models, _, _ = tp_probe_setup(spec, world, 1)
    tp = list(models["tp"].parameters())
    return (sum(p.numel() for p in models["plain"].parameters()),
            sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in tp),
            sum(isinstance(p, DTensor) for p in tp))


def module_terms(spec: TransformerSpec, per_rank: list[dict[str, list[float]]]) -> TpModuleTiming:
    """The module docstring's terms from each rank's timed iterations (:func:`_tp_rank`'s lists); with the AdamW
    steps' lists, their :class:`TpOptimizerTiming` too."""
    t = {key: mean_timing([timing_of(r[key]) for r in per_rank]) for key in per_rank[0]}
    modules = tp_modules(spec)
    fwd_us = max(0.0, (t["tp_forward"].median_s - t["plain_forward"].median_s) / modules * 1e6)
    step_us = (t["tp_step"].median_s - t["plain_step"].median_s) / modules * 1e6
    terms = TpModuleTiming(modules=modules, plain_forward=t["plain_forward"], tp_forward=t["tp_forward"],
                           plain_step=t["plain_step"], tp_step=t["tp_step"], forward_module_us=fwd_us,
                           backward_module_us=max(0.0, step_us - fwd_us), collectives=t["collectives"])
    if "tp_optimizer" not in t:
        return terms
    plain_params, tp_params, dtensors = tp_param_counts(spec)
    return replace(terms, optimizer=TpOptimizerTiming(plain=t["plain_optimizer"], tp=t["tp_optimizer"],
                                                      plain_params=plain_params, tp_params=tp_params,
                                                      dtensor_tensors=dtensors, plain_cpu=t.get("plain_optimizer_cpu"),
                                                      tp_cpu=t.get("tp_optimizer_cpu")))


def time_tp_group_modules(spec: TransformerSpec, micro_batch: int, *, repeats: int, warmup: int, thread_count: int,
                          seed: int = 0) -> TpModuleTiming:
    """The per-module terms (module docstring) of ``spec`` (the tiny model of a tp = 2 run, fp32), one micro-batch of
    ``micro_batch`` sequences, on :data:`TP_PROBE_RANKS` gloo processes of ``thread_count`` threads each."""
    from executor.launch import run

    per_rank = run(_tp_rank, TP_PROBE_RANKS, args=(spec, micro_batch, repeats, warmup, seed), num_threads=thread_count)
    return module_terms(spec, per_rank)
