"""A chunk's load with a dense transformer's units shared across layer counts (:func:`chunk_load`).

A dense transformer chunk of ``L`` blocks is ``L`` repetitions of one block's unit plus the embedding's unit on
the model's first chunk and the head's on its last (:func:`simulator.workload.chunks.transformer_chunk_load`);
the block's unit reads the model and the compute options, never ``L``, and the edges' read only whether the
chunk is first or last and whether the model is split. Building a unit (its kernels, autocast, FP8 casts,
eager dispatches) is most of a chunk's compile cost, and a search asks the same block under many layer splits
(GPT-3 175B on 1,024 A100s: 96 layers over pp·v chunks of 1 to 96 blocks), so the units of a one-block
stand-in of the chunk are built once per (stand-in, options) in the :class:`CostCache` and the chunk's load is
those units with the block repeated ``L`` times. Its other fields (parameters held, boundary bytes: a sum over the
chunk's layers, ~170 µs for 96) are computed from the chunk itself once per chunk and the options they read
(:func:`simulator.workload.chunks.transformer_fields_options`). Equal to :meth:`Workload.chunk_load`
(``tests/test_chunk_loads.py``).
"""

from __future__ import annotations

from dataclasses import replace

from simulator.compile.costs import CostCache
from simulator.workload import ChunkSlice, ComputeOptions, TransformerSpec, Workload
from simulator.workload.chunks import transformer_chunk_load, transformer_fields_options
from simulator.workload.protocol import ChunkLoad


def shares_units(workload: Workload, chunk: ChunkSlice) -> bool:
    """A dense transformer (the load its class defines) and a chunk of at least one block: its first unit is
    the block, repeated ``chunk.layers`` times."""
    return (isinstance(workload, TransformerSpec) and workload.moe is None and chunk.layers >= 1
            and type(workload).chunk_load is TransformerSpec.chunk_load)


def chunk_load(cache: CostCache, workload: Workload, chunk: ChunkSlice, options: ComputeOptions) -> ChunkLoad:
    """:meth:`Workload.chunk_load` of ``chunk``, the units of a dense transformer's chunk taken from its one-block
    stand-in (module docstring)."""
    if not shares_units(workload, chunk):
        return workload.chunk_load(chunk, options)
    one = replace(chunk, layers=1)
    (_, block), *edges = cache.memo(("one-block units", workload, one, options),
                                    lambda: workload.chunk_load(one, options).units)
    fields = cache.memo(("chunk load fields", workload, chunk, transformer_fields_options(options)),
                        lambda: transformer_chunk_load(workload, chunk, options, units=()))
    return replace(fields, units=((chunk.layers, block), *edges))
