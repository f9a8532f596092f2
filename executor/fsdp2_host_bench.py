"""Time the host work FSDP2 adds per ``fully_shard`` module at the data-parallel size a run has
(``trainplan calibrate --compute``).

FSDP2 (``torch.distributed.fsdp.fully_shard``, torch 2.13) runs, per sharded module and call, a pre-forward hook
(``FSDPParamGroup.unshard``: the all-gather's copy-in, ``foreach_all_gather``; ``wait_for_unshard``: the copy-out,
``foreach_all_gather_copy_out``, and the unsharded parameters' set-up), a post-forward reshard, and in backward the
re-gather (ZeRO-3), the post-backward ``foreach_reduce`` (the reduce-scatter's copy-in, the call, the division and
the sharded gradient's accumulation) and the reshard [src: torch-fsdp2-host-path]. On a group of **one** rank
``unshard`` and ``wait_for_unshard`` skip the all-gather and its copies altogether (``if world_size == 1``), so a
1-rank probe misses that work; a real group of two processes would add the collectives' own time, which the
network model prices as calls of their own. This probe runs one process on torch's *fake* process group
(``init_process_group("fake", world_size=dp)``, which completes every collective at once without moving data):
FSDP2 takes its ``dp``-rank path, copies and bookkeeping included, and nothing waits for a peer.

    fsdp2_forward_module_us  = (t_fwd(FSDP2) − t_fwd(plain)) / modules
    fsdp2_backward_module_us = (t_fwd+bwd(FSDP2) − t_fwd+bwd(plain)) / modules − fsdp2_forward_module_us

(10th percentiles of interleaved calls, :func:`executor.host_bench.paired_timings`, every FSDP2 call starting from
sharded parameters as a training step does, :func:`resharded`), both models the executor's
GPT at the run's tiny scale, the FSDP2 one wrapped as the executor's ZeRO-3 wraps it (``fully_shard`` on every
block, then on the root, ``reshard_after_forward=True``), ``modules`` = blocks + 1 (the root).
:func:`simulator.framework_host.with_host_modules` charges the terms per module of each chunk
[src: own-fsdp2-fake-group-probe]. The difference also
holds the copies' kernels, which the compute model charges as memory-bound kernels
(:mod:`simulator.compile.fsdp2_copies`): at the tiny sizes measured (a few KB per module) those are well under a
µs each, so the term is host time.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from executor.compute_bench import Timing
from executor.host_bench import paired_timings, per_unit_us
from simulator.workload.transformer import TransformerSpec

PROBE_DP = 2
"""The data-parallel size the probe's fake group has: the suite's ZeRO plans' (and any size > 1 takes FSDP2's
multi-rank path; its copies grow with the module, not with dp)."""


@dataclass(frozen=True, kw_only=True)
class Fsdp2Timing:
    """What :func:`time_fsdp2_modules` measured and the per-module terms derived from it."""

    modules: int
    dp: int
    plain_forward: Timing
    fsdp2_forward: Timing
    plain_step: Timing
    fsdp2_step: Timing
    forward_module_us: float
    backward_module_us: float
    reshard_after_forward: bool = True
    """True: ZeRO-3 (the backward re-gathers each module); False: ZeRO-2 (the forward's gather is kept)."""


@contextlib.contextmanager
def fake_group(world: int):
    """torch's fake process group of ``world`` ranks as this process's default group (rank 0), destroyed after;
    refused where a group is initialised already (the probe needs its own world size)."""
    import torch.distributed as dist

    if dist.is_initialized():
        raise RuntimeError("the FSDP2 probe needs its own (fake) default process group; one is initialised already")
    dist.init_process_group("fake", rank=0, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def time_fsdp2_modules(spec: TransformerSpec, micro_batch: int, *, dp: int = PROBE_DP, repeats: int, warmup: int,
                       seed: int = 0, reshard_after_forward: bool = True) -> Fsdp2Timing:
    """The per-module terms (module docstring) for ``spec`` (fp32, the CPU), one micro-batch of ``micro_batch``
    sequences, on a fake group of ``dp`` ranks, every module wrapped with ``reshard_after_forward`` (True: the
    executor's ZeRO-3, False: its ZeRO-2)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from executor.model import build_gpt

    with fake_group(dp):
        mesh = init_device_mesh("cpu", (dp,))
        plain, sharded = build_gpt(spec, seed=seed), build_gpt(spec, seed=seed)
        for block in sharded.layers:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
        fully_shard(sharded, mesh=mesh, reshard_after_forward=reshard_after_forward)
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
        y = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
        modules_sharded = [*sharded.layers, sharded]
        timings = paired_timings({"plain": plain, "fsdp2": sharded}, x, y, repeats=repeats, warmup=warmup,
                                 after={"fsdp2": lambda: resharded(modules_sharded)})
    modules = spec.layers + 1
    fwd_us, step_us = per_unit_us(timings, "fsdp2", modules)
    return Fsdp2Timing(modules=modules, dp=dp, plain_forward=timings["plain", "forward"],
                       fsdp2_forward=timings["fsdp2", "forward"], plain_step=timings["plain", "step"],
                       fsdp2_step=timings["fsdp2", "step"], forward_module_us=fwd_us,
                       backward_module_us=max(0.0, step_us - fwd_us), reshard_after_forward=reshard_after_forward)


def resharded(modules) -> None:
    """Reshard every ``fully_shard`` module in ``modules`` (``FSDPModule.reshard``, a no-op where already sharded).

    Under ZeRO-2 (``reshard_after_forward=False``) a bare forward leaves the parameters gathered, so the next
    forward skips its all-gathers and their copies: timed in that order (the probe's forward, then its forward +
    backward), the step would hold no gather while the forward does, and ``step − forward`` would miss one gather's
    host work per module (counted on the fake pair: 3 all-gathers in the forward, 0 in the step after it)
    [src: own-zero22-fake-group-count-2026-11-26]. A training step starts resharded (the previous backward
    resharded), as every call here now does."""
    for module in modules:
        module.reshard()


@dataclass(frozen=True, kw_only=True)
class Fsdp2OptimizerTiming:
    """What :func:`time_fsdp2_optimizer` measured: the thread's CPU seconds of one AdamW step (median) over the plain
    model's parameters and over the FSDP2 model's sharded DTensors, and the surcharge per operator call derived."""

    tensors: int
    calls: int
    plain_cpu_s: float
    fsdp2_cpu_s: float
    dtensor_call_us: float


def time_fsdp2_optimizer(spec: TransformerSpec, micro_batch: int, *, dp: int = PROBE_DP, repeats: int, warmup: int,
                         seed: int = 0) -> Fsdp2OptimizerTiming:
    """The host surcharge of an optimizer call on DTensor parameters (``device.dtensor_call_overhead_us``), through
    FSDP2's own parameters: the executor's AdamW (:func:`executor.reference.make_optimizer`, torch's per-tensor loop
    on the CPU) stepped over the plain model's tensors and over the ZeRO-3-wrapped model's shards (fake group of
    ``dp`` ranks, gradients set by one backward), the steps interleaved, each timed by the thread's CPU clock
    (``time.thread_time``: on a shared machine a step of a few ms loses its core for whole scheduler slices, which
    the wall clock counts and the work does not; run it with one torch thread, as the calibration does, since an
    intra-op pool's spinning would count on this thread's clock):

        dtensor_call_us = max(0, median_cpu(FSDP2 step) − median_cpu(plain step)) / (10 · tensors)

    (:data:`simulator.host_overhead.ADAMW_PER_TENSOR_CALLS` calls per tensor). The shards' update moves half the
    plain one's bytes, which this leaves in the difference (about 0.1 µs per call at the tiny model's 30,080
    parameters) [src: own-fsdp2-wait-2026-11-26]."""
    import statistics
    import time

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from executor.model import build_gpt
    from executor.reference import make_optimizer
    from simulator.host_overhead import ADAMW_PER_TENSOR_CALLS

    with fake_group(dp):
        mesh = init_device_mesh("cpu", (dp,))
        plain, sharded = build_gpt(spec, seed=seed), build_gpt(spec, seed=seed)
        for block in sharded.layers:
            fully_shard(block, mesh=mesh)
        fully_shard(sharded, mesh=mesh)
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
        y = torch.randint(0, spec.vocab, (micro_batch, spec.seq_len), generator=g)
        steps = {}
        for name, model in (("plain", plain), ("fsdp2", sharded)):
            model(x, y).backward()
            steps[name] = make_optimizer(list(model.parameters())).step
        cpu = {name: [] for name in steps}
        for i in range(warmup + repeats):
            for name, step in steps.items():
                start = time.thread_time()
                step()
                if i >= warmup:
                    cpu[name].append(time.thread_time() - start)
    tensors = len(list(plain.parameters()))
    plain_s, fsdp2_s = (statistics.median(cpu[name]) for name in ("plain", "fsdp2"))
    calls = ADAMW_PER_TENSOR_CALLS * tensors
    return Fsdp2OptimizerTiming(tensors=tensors, calls=calls, plain_cpu_s=plain_s, fsdp2_cpu_s=fsdp2_s,
                                dtensor_call_us=max(0.0, fsdp2_s - plain_s) / calls * 1e6)
