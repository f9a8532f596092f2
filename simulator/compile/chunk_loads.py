"""A chunk's load with a dense transformer's units shared across layer counts (:func:`chunk_load`).

A dense transformer chunk of ``L`` blocks is ``L`` repetitions of one block's unit plus the embedding's unit on
the model's first chunk and the head's on its last (:func:`simulator.workload.chunks.transformer_chunk_load`);
the block's unit reads the model and the compute options, never ``L``, and the edges' read only whether the
chunk is first or last and whether the model is split. Building a unit (its kernels, autocast, FP8 casts,
eager dispatches) is most of a chunk's compile cost, and a search asks the same block under many layer splits
(GPT-3 175B on 1,024 A100s: 96 layers over pp·v chunks of 1 to 96 blocks) and at every place in the model, so
the block's unit is built once per options (from a middle chunk of one block) and the edges' units once per
place (from a chunk of no blocks there: first, last, both, and whether the model is split) and the options they
read (:func:`simulator.workload.chunks.transformer_edge_options`: not recompute, FP8 or expert parallelism), each
in the :class:`CostCache`; the chunk's load is the block repeated ``L`` times, then the edges. Its other fields
(parameters held, boundary bytes: a sum over the chunk's layers, ~170 µs for 96) are computed from the chunk itself
once per chunk and the options they read
(:func:`simulator.workload.chunks.transformer_fields_options`). Equal to :meth:`Workload.chunk_load`
(``tests/test_chunk_loads.py``).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.compile.costs import CostCache
from simulator.workload import ChunkSlice, ComputeOptions, TransformerSpec, Workload
from simulator.workload.chunks import (transformer_chunk_load, transformer_edge_options, transformer_fields_options,
                                      transformer_units)
from simulator.workload.protocol import ChunkLoad


_MIDDLE_BLOCK = ChunkSlice(index=1, count=3, start=0, layers=1)
"""A chunk of one block, neither first nor last: its units are the block's alone."""


def shares_units(workload: Workload, chunk: ChunkSlice) -> bool:
    """A dense transformer (the load its class defines) and a chunk of at least one block: its first unit is
    the block, repeated ``chunk.layers`` times."""
    return (isinstance(workload, TransformerSpec) and workload.moe is None and chunk.layers >= 1
            and type(workload).chunk_load is TransformerSpec.chunk_load)


def chunk_load(cache: CostCache, workload: Workload, chunk: ChunkSlice, options: ComputeOptions) -> ChunkLoad:
    """:meth:`Workload.chunk_load` of ``chunk``, the units of a dense transformer's chunk taken from its block's and
    its place's (module docstring)."""
    if not shares_units(workload, chunk):
        return workload.chunk_load(chunk, options)
    (_, block), = cache.memo(("block unit", workload, options),
                             lambda: transformer_units(workload, _MIDDLE_BLOCK, options))
    place = (0 if chunk.first else 1, 1 if chunk.first and chunk.last else 2 if chunk.first or chunk.last else 3)
    edges = cache.memo(("edge units", workload, place, transformer_edge_options(options)), lambda: transformer_units(
        workload, ChunkSlice(index=place[0], count=place[1], start=0, layers=0), options))
    fields = cache.memo(("chunk load fields", workload, chunk, transformer_fields_options(options)),
                        lambda: transformer_chunk_load(workload, chunk, options, units=()))
    return replace(fields, units=((chunk.layers, block), *edges))
