"""Chunked pipelines on :class:`~simulator.collectives.cost.Env` (which mixes :class:`Pipelining` in): the chunk
counts a pipelined algorithm (ring, tree, chain) may cut its share into, a pipeline's time at a chunk count, the
fastest count, and the fraction of a hop latency each further chunk pays. The per-step α-β arithmetic is
:mod:`simulator.collectives.pipeline_cost`'s; the α-β link model itself :mod:`simulator.collectives.cost`'s."""

from __future__ import annotations

from collections.abc import Callable

from simulator.collectives.group import Flow, Group
from simulator.collectives.pipeline_cost import PipelineCost, PipelineLayout

PIPELINE_CHUNKS = tuple(2**i for i in range(11))
"""Chunk counts a pipelined algorithm may cut each channel's share into (1 … 1024); it takes the one
with the least time (segment-size tuning as MPI libraries do it, Pješivac-Grbović et al. 2007
[src: pjesivac-2007]). Each chunk beyond the first costs one message latency (:meth:`Env.best_pipeline`),
so the optimum is near ``sqrt((L−1)·nβ/α)`` for ``L`` levels. Under a protocol with a step size
(NCCL: one FIFO step, ``buffSize / NCCL_STEPS``) a chunk is at most one step, so only counts with
``n/k ≤ step_bytes`` are taken (all of them fail past 1024 steps: then 1024, a cap on the schedule's
size). Taking a minimum over a fixed set that only shrinks as bytes grow keeps the time increasing
in bytes and in 1/bandwidth."""


class Pipelining:
    """Pipeline part of :class:`~simulator.collectives.cost.Env` (on its ``protocol`` and ``family``; levels priced by
    :class:`PipelineCost` on the Env)."""

    def pipeline_time_s(self, levels: list[list[Flow]], chunks: int, chunk_bytes: float) -> float:
        """A pipeline: chunk ``j`` crosses level ``ℓ`` at step ``j + ℓ`` (``chunks + L − 1`` steps).

        ``levels`` hold unit flows (``nbytes`` = how many chunks the flow carries, usually 1); each
        chunk is ``chunk_bytes``. Step ``s`` runs levels ``max(0, s−chunks+1) .. min(L−1, s)``; fill and
        drain steps run fewer. With equal level costs ``c`` this is the textbook ``(chunks + L − 1)·c``.
        """
        return PipelineCost(self, levels).time_s(chunks, chunk_bytes)

    def best_pipeline(self, levels: list[list[Flow]] | Callable[[], list[list[Flow]] | PipelineLayout],
                      bytes_per_channel: float,
                      group: Group | None = None, key: tuple | None = None) -> tuple[float, int]:
        """``(time, chunks)``: the fastest chunk count of :data:`PIPELINE_CHUNKS` (ties: fewer chunks).

        ``levels`` (or a function that builds them or their :class:`PipelineLayout`) do not depend on the size:
        given ``group`` and a ``key`` naming them (algorithm, op, root), the levels and their arrays are kept in
        :attr:`Group.shapes`, per protocol, for the next size.

        ``T(k) = Σ_steps bw(k) + L + (k − 1)·α_max``: the steps' bandwidth terms at ``n/k`` bytes per
        chunk, the latency ``L`` of one chunk's path through the levels (chunk-level dataflow:
        chunk ``j`` waits only for chunk ``j`` upstream, chain.py ``PipelineChain.of(1)``), and the
        per-chunk overhead: every chunk after the first is one more message on the slowest hop, so
        it pays that hop's latency ``α_max`` once (the segmented pipeline ``(k + L − 1)·(α + sβ)``
        of Pješivac-Grbović et al. 2007 [src: pjesivac-2007]). A protocol whose sender may run
        ``fifo_steps`` chunks ahead (NCCL: ``NCCL_STEPS`` = 8 [src: nccl-chunks]) overlaps those
        latencies, so a further chunk pays ``α_max / fifo_steps``. Under a protocol with
        ``step_bytes`` a chunk is at most one FIFO step (:data:`PIPELINE_CHUNKS`).
        """
        pipe = self._pipeline(levels, group, key)
        latency = pipe.latency_s
        step = None if self.protocol is None else self.protocol.step_bytes
        counts = [k for k in PIPELINE_CHUNKS if step is None or bytes_per_channel / k <= step]
        counts = counts or [PIPELINE_CHUNKS[-1]]
        per_chunk = pipe.alpha_max_s * self.chunk_latency_share
        return min((pipe.bw_s(k, bytes_per_channel / k) + latency + (k - 1) * per_chunk, k) for k in counts)

    def _pipeline(self, levels, group: Group | None, key: tuple | None) -> PipelineCost:
        """The levels' :class:`PipelineCost` under this protocol, kept in ``group.shapes`` when keyed."""
        if group is None or key is None:
            return PipelineCost(self, levels() if callable(levels) else levels)
        shapes, own = group.shapes, ("pipeline", key, id(self.protocol), self.family)
        if own not in shapes:
            if ("layout", key) not in shapes:
                built = levels() if callable(levels) else levels  # levels of flows, or their layout already
                shapes[("layout", key)] = built if isinstance(built, PipelineLayout) else PipelineLayout(self, built)
            shapes[own] = PipelineCost(self, shapes[("layout", key)])
        return shapes[own]

    @property
    def chunk_latency_share(self) -> float:
        """Fraction of a hop latency each further pipeline chunk pays: ``1 / protocol.fifo_steps``
        (NCCL: 1/8, the chunks in flight overlap their latencies), 1 without a protocol."""
        return 1.0 if self.protocol is None else self.protocol.chunk_latency_share
