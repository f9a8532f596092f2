"""Time the host cost torch's tensor parallelism adds per tensor-parallel module (``trainplan calibrate --compute``).

Torch's tensor parallelism (``parallelize_module`` with ``ColwiseParallel`` / ``RowwiseParallel``, and the
vocabulary-parallel embedding and output layer of :mod:`executor.strategies.tensor`) turns each such
module's weights into DTensors and wraps its inputs and outputs in hooks that convert between local
tensors and DTensors. Every operator on a DTensor goes through DTensor's dispatch (sharding
propagation, redistribution planning) before the local kernel runs [src: torch-dtensor-params]. That
host time is not a kernel of the compute model's op list, so it is measured here as its own term:

    tp_forward_module_us  = (t_fwd(tp model) − t_fwd(plain model)) / modules
    tp_backward_module_us = (t_fwd+bwd(tp) − t_fwd+bwd(plain)) / modules − tp_forward_module_us

(each t the 10th percentile of its calls, below)

with both models the executor's GPT (:func:`executor.model.build_gpt`) at the run's tiny scale, the tp
one made tensor-parallel by :func:`executor.strategies.tensor.parallelize_gpt` over a **1-rank** gloo
mesh (no peer to wait for: the collectives DTensor issues are 1-rank calls, so what remains is dispatch
and hook time), and ``modules`` = :func:`tp_modules` of the whole model: 4 per block (qkv, out, up,
down) plus the embedding and the output layer. Forward is timed with autograd on, as the executor
trains. :func:`simulator.framework_host.with_host_modules` charges the terms per module of each chunk.

Every term here is a difference of two timings, so each is read at the timings' 10th percentile (the least
disturbed calls): on a shared machine a difference of medians carries the load's noise into the term, and
can come out negative (then 0) for a term of a few hundred µs.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from dataclasses import dataclass

import torch

from executor.compute_bench import Timing, _percentile, time_call
from simulator.framework_host import TP_MODULES_PER_BLOCK, TP_EDGE_MODULES
from simulator.workload.transformer import TransformerSpec


@dataclass(frozen=True, kw_only=True)
class TpModuleTiming:
    """What :func:`time_tp_modules` (1-rank mesh) or :func:`executor.tp_host_bench.time_tp_group_modules` (a real tp
    group, what ``trainplan calibrate --compute`` runs) measured and the per-module terms derived from it."""

    modules: int
    plain_forward: Timing
    tp_forward: Timing
    """The tp model's forward; on a tp group less the seconds inside its collectives (``collectives``)."""
    plain_step: Timing
    """Forward and backward of the plain model."""
    tp_step: Timing
    forward_module_us: float
    backward_module_us: float
    collectives: Timing | None = None
    """On a tp group: the seconds per forward + backward inside the collectives and their waits (the executor's tp
    phase), left out of ``tp_forward`` and ``tp_step``; None on a 1-rank mesh (no collective runs)."""
    optimizer: object | None = None
    """On a tp group: the AdamW steps of the tp and the plain model in the same processes
    (:class:`executor.tp_host_bench.TpOptimizerTiming`), whence ``host.tp_dtensor_call_us``; None: not measured."""


def paired_timings(models: dict, x: torch.Tensor, y: torch.Tensor, *, repeats: int, warmup: int,
                   after: dict | None = None) -> dict:
    """``{(name, "forward" | "step"): Timing}`` of each model's forward (autograd on) and forward + backward on
    ``(x, y)``, the calls interleaved (every model's forward, then every model's step, ``repeats`` times), so
    that a load that comes and goes slows the compared models alike. ``after[name]``, where given, runs untimed
    after each of that model's calls (to return it to the state a training step starts from)."""
    after = after or {}
    calls = [((name, "forward"), lambda m=model: m(x, y)) for name, model in models.items()]
    calls += [((name, "step"), lambda m=model: m(x, y).backward()) for name, model in models.items()]
    for _ in range(warmup):
        for (name, _), fn in calls:
            fn()
            after.get(name, _nothing)()
    times: dict = {key: [] for key, _ in calls}
    for _ in range(repeats):
        for key, fn in calls:
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
            after.get(key[0], _nothing)()
    return {key: Timing(median_s=statistics.median(t), p10_s=_percentile(t, 0.1), p90_s=_percentile(t, 0.9))
            for key, t in times.items()}


def _nothing() -> None:
    """No reset (a model :func:`paired_timings` leaves as it is after each call)."""


def per_unit_us(timings: dict, wrapped: str, units: int) -> tuple[float, float]:
    """What ``wrapped`` adds over ``plain`` per unit (module, call, region), in µs, from the 10th percentiles:

        forward_us = max(0, (t_fwd(wrapped) − t_fwd(plain)) / units)
        step_us    = (t_fwd+bwd(wrapped) − t_fwd+bwd(plain)) / units

    (the step's extra is forward + backward; callers take the backward term as ``step_us − forward_us``
    less whatever else they know it holds)."""
    def extra_s(kind: str) -> float:
        return timings[wrapped, kind].p10_s - timings["plain", kind].p10_s
    return max(0.0, extra_s("forward") / units * 1e6), extra_s("step") / units * 1e6


def tp_modules(spec: TransformerSpec) -> int:
    """Tensor-parallel modules of the whole model: :data:`TP_MODULES_PER_BLOCK` per block plus
    :data:`TP_EDGE_MODULES` (vocabulary-parallel embedding and output layer)."""
    return TP_MODULES_PER_BLOCK * spec.layers + TP_EDGE_MODULES


@contextlib.contextmanager
def one_rank_group():
    """A 1-rank gloo process group on a file store (no port), destroyed after; the caller's own group, if
    one is initialised already, is used as is."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    with tempfile.TemporaryDirectory() as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


def time_tp_modules(spec: TransformerSpec, micro_batch: int, *, repeats: int, warmup: int,
                    seed: int = 0) -> TpModuleTiming:
    """The per-module terms (module docstring) for ``spec`` (the tiny model of a tp run, fp32), one
    micro-batch of ``micro_batch`` sequences, on the CPU, on a 1-rank mesh. ``trainplan calibrate --compute`` measures
    them on a 2-rank tp group instead (:mod:`executor.tp_host_bench`; the 1-rank mesh runs no collective and misses
    the host work around them: docs/validation.md, "Tensor-parallel cases"); ``benchmarks/host_overhead_probe.py``
    keeps this one for comparison."""
    from torch.distributed.device_mesh import init_device_mesh

    from executor.model import build_gpt
    from executor.strategies.tensor import parallelize_gpt

    with one_rank_group():
        mesh = init_device_mesh("cpu", (1,))
        plain, tp = build_gpt(spec, seed=seed), parallelize_gpt(build_gpt(spec, seed=seed), mesh, False)
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
        y = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)

        timings = paired_timings({"plain": plain, "tp": tp}, x, y, repeats=repeats, warmup=warmup)
    modules = tp_modules(spec)
    fwd_us, step_us = per_unit_us(timings, "tp", modules)
    return TpModuleTiming(modules=modules, plain_forward=timings["plain", "forward"],
                          tp_forward=timings["tp", "forward"], plain_step=timings["plain", "step"],
                          tp_step=timings["tp", "step"], forward_module_us=fwd_us,
                          backward_module_us=max(0.0, step_us - fwd_us))


@dataclass(frozen=True, kw_only=True)
class DdpTiming:
    """What :func:`time_ddp` measured and the DDP terms derived from it."""

    plain_forward: Timing
    ddp_forward: Timing
    plain_step: Timing
    ddp_step: Timing
    """Forward and a synchronising backward under DDP."""
    forward_call_us: float
    sync_backward_us: float
    bucket_passes_s: float = 0.0
    """The model's own time for the reducer's bucket passes (copy-in, division, copy-back), subtracted: they are
    charged as a kernel of the step (:mod:`simulator.compile.ddp_copies`), not as host time."""


def _bucket_hook(_state, bucket):  # unannotated return: DDP compares it with a non-string type
    """The executor's DDP communication hook (``executor.strategies.ddp_sync.ReplayHook.on_bucket``) without its
    collective, which the model times as a collective call of its own: average the bucket, return it."""
    buf = bucket.buffer()
    buf.div_(1)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def time_ddp(spec: TransformerSpec, micro_batch: int, *, repeats: int, warmup: int, seed: int = 0,
             bucket_passes_s: float = 0.0) -> DdpTiming:
    """DDP's host terms for ``spec`` (fp32, the CPU, one bucket holding every gradient as the suite's plans have it):

        ddp_forward_call_us   = t_fwd(DDP) − t_fwd(plain)
        ddp_sync_backward_us  = (t_fwd+bwd(DDP, synchronising) − t_fwd+bwd(plain)) − ddp_forward_call_us
                                − bucket_passes_s

    on a 1-rank gloo group, the model wrapped as :mod:`executor.strategies.data_parallel` wraps it (its comm hook
    without the collective, :func:`_bucket_hook`): the wrapper's per-call work (``_pre_forward``,
    ``prepare_for_backward``) and the reducer's per-gradient hooks and finalisation. ``bucket_passes_s``: the
    model's time for the bucket copies and division this run makes (6 passes of the gradients' bytes), which the
    step charges as a kernel of its own (:mod:`simulator.compile.ddp_copies`), so they are not counted twice."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from executor.model import build_gpt

    with one_rank_group():
        plain = build_gpt(spec, seed=seed)
        ddp = DDP(build_gpt(spec, seed=seed), bucket_cap_mb=1 << 20)
        ddp.register_comm_hook(None, _bucket_hook)
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
        y = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
        timings = paired_timings({"plain": plain, "ddp": ddp}, x, y, repeats=repeats, warmup=warmup)
    fwd_us, step_us = per_unit_us(timings, "ddp", 1)
    return DdpTiming(plain_forward=timings["plain", "forward"], ddp_forward=timings["ddp", "forward"],
                     plain_step=timings["plain", "step"], ddp_step=timings["ddp", "step"], forward_call_us=fwd_us,
                     sync_backward_us=max(0.0, step_us - fwd_us - bucket_passes_s * 1e6),
                     bucket_passes_s=bucket_passes_s)


@dataclass(frozen=True, kw_only=True)
class AdamwTiming:
    """One step of the executor's AdamW (:func:`executor.reference.make_optimizer`) over a model's parameters."""

    step: Timing
    tensors: int
    params: int


def time_adamw(spec: TransformerSpec, *, repeats: int, warmup: int, seed: int = 0) -> AdamwTiming:
    """``optimizer.step()`` of the executor's AdamW over the parameters of :func:`executor.model.build_gpt` of
    ``spec`` (fp32, gradients set), as every family steps it: on the CPU torch runs its per-tensor loop
    (:data:`simulator.host_overhead.ADAMW_PER_TENSOR_CALLS` operator calls per tensor) [src: torch-adam-impl]."""
    from executor.model import build_gpt
    from executor.reference import make_optimizer

    params = list(build_gpt(spec, seed=seed).parameters())
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    optimizer = make_optimizer(params)
    step = time_call(optimizer.step, torch.device("cpu"), repeats=repeats, warmup=warmup)
    return AdamwTiming(step=step, tensors=len(params), params=sum(p.numel() for p in params))


@dataclass(frozen=True, kw_only=True)
class CheckpointTiming:
    """What :func:`time_checkpoint` measured and the per-region terms derived from it."""

    regions: int
    plain_forward: Timing
    checkpointed_forward: Timing
    plain_step: Timing
    checkpointed_step: Timing
    recompute_region_s: float
    """The model's own time for rerunning one region's forward (its recompute kernels), subtracted."""
    forward_region_us: float
    backward_region_us: float


def time_checkpoint(spec: TransformerSpec, micro_batch: int, recompute_region_s: float, *, repeats: int,
                    warmup: int, seed: int = 0) -> CheckpointTiming:
    """The host time ``torch.utils.checkpoint`` (non-reentrant, as :mod:`executor.recompute` applies it) adds per
    checkpointed region, beyond the recomputed kernels the compute model already charges:

        checkpoint_forward_region_us  = (t_fwd(full recompute) − t_fwd(plain)) / blocks
        checkpoint_backward_region_us = (t_fwd+bwd(full) − t_fwd+bwd(plain)) / blocks − forward term
                                        − recompute_region_s

    (10th percentiles, as above), one region per block (``Recompute.FULL``), ``recompute_region_s`` the model's
    time for one block's recomputed forward on the calibrated device (the caller's)."""
    from executor.model import build_gpt
    from executor.recompute import RecomputeClock, apply_recompute
    from simulator.workload import Recompute

    plain, ckpt = build_gpt(spec, seed=seed), build_gpt(spec, seed=seed)
    apply_recompute(ckpt, Recompute.FULL, RecomputeClock())
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
    y = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
    timings = paired_timings({"plain": plain, "ckpt": ckpt}, x, y, repeats=repeats, warmup=warmup)
    regions = spec.layers
    fwd_us, step_us = per_unit_us(timings, "ckpt", regions)
    return CheckpointTiming(regions=regions, plain_forward=timings["plain", "forward"],
                            checkpointed_forward=timings["ckpt", "forward"], plain_step=timings["plain", "step"],
                            checkpointed_step=timings["ckpt", "step"], recompute_region_s=recompute_region_s,
                            forward_region_us=fwd_us,
                            backward_region_us=max(0.0, step_us - fwd_us - recompute_region_s * 1e6))
