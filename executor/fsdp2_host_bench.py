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

(10th percentiles of interleaved calls, :func:`executor.host_bench.paired_timings`), both models the executor's
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
        timings = paired_timings({"plain": plain, "fsdp2": sharded}, x, y, repeats=repeats, warmup=warmup)
    modules = spec.layers + 1
    fwd_us, step_us = per_unit_us(timings, "fsdp2", modules)
    return Fsdp2Timing(modules=modules, dp=dp, plain_forward=timings["plain", "forward"],
                       fsdp2_forward=timings["fsdp2", "forward"], plain_step=timings["plain", "step"],
                       fsdp2_step=timings["fsdp2", "step"], forward_module_us=fwd_us,
                       backward_module_us=max(0.0, step_us - fwd_us), reshard_after_forward=reshard_after_forward)
