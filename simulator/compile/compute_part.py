"""Compute side of a compiled step: per-chunk forward, backward and recompute times, parameters
per chunk, the bytes a stage boundary sends, and the step's FLOPs.

The workload says what a chunk runs and holds (:meth:`simulator.workload.Workload.chunk_load`:
kernels per repeated unit, parameters, boundary bytes; :mod:`simulator.workload.chunks` for the
transformer and the layer list); the device says how long that takes
(:func:`simulator.unit_times.unit_times`, a roofline per kernel). A chunk's time is the sum over its
units of repetitions × one repetition's time — for a transformer, ``L ×`` one block plus the
embedding on the model's first chunk and the final norm, logits and loss on its last.
Recomputation rows are the forward work backward repeats; they run inside the backward action, so
the time, the hardware FLOPs (:func:`step_flops`) and the memory report agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.compile.chunk_loads import chunk_load
from simulator.compile.costs import CostCache
from simulator.cluster.spec import KernelDispatch
from simulator.unit_times import unit_host_split, unit_phase_sums, unit_times
from simulator.power import PhasePower, power_limited, stretch, unit_power
from simulator.strategy.spec import AttentionKind
from simulator.workload import ChunkSlice, ComputeOptions, Recompute, TransformerSpec, Workload


@dataclass(frozen=True)
class ChunkCompute:
    """One chunk's per-micro-batch compute and what it holds."""

    fwd_s: float
    bwd_s: float
    recompute_s: float
    layer_params: float
    """Parameters of one block on this rank (0 for a layer list)."""
    edge_params: float
    """Parameters outside the blocks (embedding, head) on this rank; for a layer list, all of them."""
    boundary_bytes: int
    """Bytes of the activation this chunk hands to the next (per micro-batch, before any SP split)."""
    blocks: int = 0
    """Identical blocks of ``layer_params`` each (0 for a layer list: the chunk is one unit)."""
    moe_blocks: int = 0
    """Of the blocks, the mixture-of-experts ones (each exchanges tokens by all-to-all)."""
    expert_params: float = 0.0
    """Routed-expert parameters of the chunk on this rank (reduced over the expert-data-parallel group)."""
    host_bound: tuple[str, ...] = ()
    """Phases (``forward``, ``backward``, ``recompute``) whose kernels' host time exceeds their device time
    on this chunk (:mod:`simulator.host_overhead`): the step is host-bound there."""


def chunk_compute(cache: CostCache, workload: Workload, chunk: ChunkSlice, options: ComputeOptions,
                  share: float = 1.0) -> ChunkCompute:
    """Compute of one chunk: the workload's load timed on the cache's device (module docstring),
    remembered in ``cache`` per (workload, chunk, options, share); ``share``: processes per host core on
    the node (:func:`simulator.host_overhead.core_share`)."""
    chunk = load_slice(workload, chunk)
    return cache.memo(("chunk_compute", workload, chunk, options, share),
                      lambda: _chunk_compute(cache, workload, chunk, options, share))


def load_slice(workload: Workload, chunk: ChunkSlice) -> ChunkSlice:
    """A slice with the same load as ``chunk``, the same for every chunk of equal load: for a transformer
    without experts the load (:func:`simulator.workload.chunks.transformer_chunk_load`) reads only the
    layer count, whether the chunk is first or last, and whether the model is split (a tied embedding's
    copy on the last chunk); every block is alike. Other workloads: ``chunk`` itself."""
    if not isinstance(workload, TransformerSpec) or workload.moe is not None:
        return chunk
    first, last = chunk.first, chunk.last
    index, count = (0 if first else 1), (1 if first and last else 2 if first or last else 3)
    return ChunkSlice(index=index, count=count, start=0, layers=chunk.layers)


def _chunk_compute(cache: CostCache, workload: Workload, chunk: ChunkSlice, options: ComputeOptions,
                   share: float) -> ChunkCompute:
    load = cache.memo(("chunk_load", workload, chunk, options), lambda: chunk_load(cache, workload, chunk, options))
    device, dtype = cache.cluster.device, workload.dtype
    fwd = bwd = recompute = 0.0
    split = [[0.0, 0.0] for _ in range(3)]  # (device, host) seconds per phase
    for count, unit in load.units:
        f, b, r, host_split = _unit_answers(cache, dtype, unit, share)
        fwd, bwd, recompute = fwd + count * f, bwd + count * b, recompute + count * r
        for acc, part in zip(split, host_split):
            acc[0], acc[1] = acc[0] + count * part[0], acc[1] + count * part[1]
    host_share = share if device.kernel_dispatch is KernelDispatch.ASYNC else 1.0  # inline: both are shared
    bound = tuple(name for name, (d, h) in zip(("forward", "backward", "recompute"), split) if h * host_share > d > 0)
    if power_limited(device):
        fwd, bwd, recompute = _power_limited(cache, load, dtype, bound, (fwd, bwd, recompute))
    return ChunkCompute(fwd_s=fwd, bwd_s=bwd, recompute_s=recompute, layer_params=load.block_params,
                        edge_params=load.edge_params, boundary_bytes=load.boundary_bytes, blocks=load.blocks,
                        moe_blocks=load.moe_blocks, expert_params=load.expert_params, host_bound=bound)


def _unit_answers(cache: CostCache, dtype, unit, share: float) -> tuple:
    """(forward, backward, recompute seconds, host split) of one unit on the cache's device, remembered by the unit's
    value and, in front of that, by its identity (the entry holds the unit, so no other object takes its id): the
    units of a dense transformer's chunks are shared objects (:mod:`.chunk_loads`), and hashing one hashes its
    hundreds of kernels."""
    held = cache.memo(("unit answers", id(unit), dtype, share), lambda: [unit, None])
    if held[1] is None:
        device = cache.cluster.device
        sums = []  # unit_phase_sums, read once for both answers (each times every kernel of the unit)

        def phase_sums():
            if not sums:
                sums.append(unit_phase_sums(unit, device, dtype))
            return sums[0]

        held[1] = (*cache.memo(("unit_times", dtype, unit, share),
                               lambda: unit_times(unit, device, dtype, share, phase_sums())),
                   cache.memo(("unit_host_split", dtype, unit), lambda: unit_host_split(unit, device, dtype,
                                                                                         phase_sums())))
    return held[1]


def _power_limited(cache: CostCache, load, dtype, host_bound: tuple[str, ...],
                   times: tuple[float, float, float]) -> tuple[float, float, float]:
    """The chunk's (forward, backward, recompute) seconds with its compute-bound kernels stretched by the
    power limit's ``k`` over the whole chunk's mix (:mod:`simulator.power`); a host-bound phase keeps its time
    (its kernels wait for the host, so the card idles between them)."""
    device = cache.cluster.device
    phases = [PhasePower(), PhasePower(), PhasePower()]
    for count, unit in load.units:
        per = cache.memo(("unit_power", dtype, unit), lambda: unit_power(unit, device, dtype))
        phases = [acc + p.times(count) for acc, p in zip(phases, per)]
    k = stretch(device.power_draw, device.power_limit_W, phases[0] + phases[1] + phases[2])
    return tuple(t if name in host_bound else t + (k - 1.0) * p.compute_s
                 for t, p, name in zip(times, phases, ("forward", "backward", "recompute")))


def step_flops(workload: Workload, tokens: int, recompute: Recompute,
               attention: AttentionKind = AttentionKind.FLASH) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step of ``tokens`` tokens (samples × the workload's
    ``seq_len``) over all GPUs: :meth:`simulator.workload.Workload.step_flops`."""
    return workload.step_flops(tokens, recompute, flash_attention=attention is AttentionKind.FLASH)
