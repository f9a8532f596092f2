"""Each rank's compute on its own device: multipliers of the representative's times on a mixed cluster.

The compiled step times each stage on the cluster's device (``Cluster.device``). On a cluster whose
nodes differ (:mod:`simulator.cluster.facts`: node groups of another GPU generation, slow GPUs), rank
``r`` of pipeline stage ``s`` on device ``D`` with throughput fraction ``φ`` (1 unless slow) computes

    factor(r) = T_s(D) / T_s(device) / φ,    T_s(X) = Σ over the stage's chunks of (fwd + bwd + recompute) on X,

each chunk timed by the same roofline (:func:`simulator.compile.compute_part.chunk_compute`) on ``D``:
its peak, HBM bandwidth and matmul-efficiency curve. One factor per (stage, device) scales the stage's
forward, backward and recompute alike (their ratios between devices differ by the kernels' mix only;
the optimizer and the data read are not scaled). The engines multiply it into the straggler model's
factor (:func:`simulator.engine.step._factors`); tp ranks of a stage wait for the slowest of them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from simulator.cluster.spec import Cluster, Device
from simulator.compile.compute_part import ChunkCompute
from simulator.compile.costs import CostCache
from simulator.strategy import ParallelLayout


def rank_factors(cluster: Cluster, layout: ParallelLayout,
                 chunk_time: Callable[[CostCache, int], ChunkCompute]) -> tuple[tuple[int, float], ...]:
    """(rank, factor) for every rank whose factor is not 1 (module docstring); ``chunk_time(cache, c)``
    times chunk ``c`` on the cache's device."""
    if not cluster.varies:
        return ()
    caches: dict[int, CostCache] = {}
    stage_s: dict[tuple[int, int], float] = {}

    def stage_time(stage: int, device: Device) -> float:
        key = (stage, id(device))  # the cluster's own device objects: alive, so their ids are stable
        if key not in stage_s:
            cache = caches.get(id(device))
            if cache is None:
                cache = caches[id(device)] = CostCache(replace(cluster, device=device))
            chunks = [chunk_time(cache, stage + k * layout.pp) for k in range(layout.v)]
            stage_s[key] = sum(c.fwd_s + c.bwd_s + c.recompute_s for c in chunks)
        return stage_s[key]

    out = []
    for rank in range(layout.world_size):
        node, gpu = cluster.place(rank)
        device, stage = cluster.device_of_node(node), layout.coords(rank).pp
        factor = 1.0 / cluster.gpu_speed(node, gpu)
        if device != cluster.device:
            base = stage_time(stage, cluster.device)
            factor *= stage_time(stage, device) / base if base > 0 else 1.0
        if factor != 1.0:
            out.append((rank, factor))
    return tuple(out)
