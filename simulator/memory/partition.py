"""How a stage's tensors split over the ``dp`` ranks that partition their state (ZeRO): each rank's elements under
a :class:`~simulator.strategy.framework.Partitioning` (:func:`partition_numels`), torch ``ZeroRedundancyOptimizer``'s
whole-tensor assignment and FSDP2's unpadded shards; and the tensors' shapes and element counts read once
(:class:`ShapeCounts`) for these and :mod:`simulator.memory.states`, which turns the elements into bytes."""

from __future__ import annotations

from math import ceil
from typing import NamedTuple

from simulator.errors import SpecError
from simulator.memory.shapes import Shape, numel
from simulator.strategy.framework import Partitioning


def bare_shapes(shapes) -> list[Shape]:
    """Shapes from ``[(name, shape), ...]``, from bare shapes or from a :class:`ShapeCounts`."""
    if isinstance(shapes, ShapeCounts):
        return shapes.dims
    return [tuple(s[1]) if len(s) == 2 and isinstance(s[0], str) else tuple(s) for s in shapes]


class ShapeCounts(NamedTuple):
    """Tensors' bare shapes and element counts, read once (:func:`shape_counts`): all that the functions here (and
    :mod:`simulator.memory.states` after them) read of ``shapes``, and each takes one in their place (the memory
    report reads a stage's several times)."""

    dims: list[Shape]
    counts: list[int]


def shape_counts(shapes) -> ShapeCounts:
    """:class:`ShapeCounts` of ``shapes`` (as :func:`bare_shapes` reads them; one already made is itself)."""
    if isinstance(shapes, ShapeCounts):
        return shapes
    dims = bare_shapes(shapes)
    return ShapeCounts(dims, [numel(d) for d in dims])


def whole_tensor_assignment(numels: list[int], dp: int) -> list[int]:
    """Rank of each tensor under torch ``ZeroRedundancyOptimizer``'s partition: tensors sorted by
    size, largest first (a stable sort, so ties keep their order), each given to the rank with the
    fewest elements so far (the lowest such rank on a tie)."""
    sizes = [0] * dp
    owner = [0] * len(numels)
    for index in sorted(range(len(numels)), key=lambda i: numels[i], reverse=True):
        rank = min(range(dp), key=lambda r: sizes[r])
        owner[index] = rank
        sizes[rank] += numels[index]
    return owner


def partition_numels(shapes: list[tuple[str, Shape]] | list[Shape], dp: int,
                     partitioning: Partitioning) -> list[int]:
    """Elements of the partitioned state each of the ``dp`` ranks holds (index = rank).

    FLAT: ceil(N/dp) on every rank (the flat buffer is padded to a multiple of dp).
    WHOLE_TENSOR: the sum of the tensors :func:`whole_tensor_assignment` gives each rank.
    DIM0_PADDED: sum over tensors of ceil(dim0/dp)·(other dims) on every rank — FSDP2 allocates
    every rank's shard padded to chunk 0's size (true for parameters and gradients; the Adam state
    is built from the unpadded shard, :func:`dim0_real_numels`).
    """
    dims, counts = shape_counts(shapes)
    if partitioning is Partitioning.FLAT:
        return [ceil(sum(counts) / dp)] * dp
    if partitioning is Partitioning.WHOLE_TENSOR:
        per_rank = [0] * dp
        for count, rank in zip(counts, whole_tensor_assignment(counts, dp)):
            per_rank[rank] += count
        return per_rank
    if partitioning is Partitioning.DIM0_PADDED:
        padded = sum(ceil(d[0] / dp) * numel(d[1:]) if d else 1 for d in dims)
        return [padded] * dp
    raise SpecError("partitioning", f"unknown {partitioning!r}; known: {', '.join(p.value for p in Partitioning)}")


def dim0_real_numels(shapes, dp: int) -> list[int]:
    """Real (unpadded) elements of each rank's FSDP2 shard: min(c, max(0, d0 − r·c))·rest per
    tensor with c = ceil(d0/dp). FSDP2 keeps the padded shard but exposes ``narrow``ed views of
    the real rows as the sharded parameters (torch ``distributed/fsdp/_fully_shard/_fsdp_param.py``,
    ``_init_sharded_param``), and Adam's ``exp_avg``/``exp_avg_sq`` are ``zeros_like`` of those
    (``torch/optim/adam.py``, ``_init_group``), so trailing ranks hold less optimizer state.
    A 0-d tensor is not split: rank 0 holds it."""
    out = [0] * dp
    for d in bare_shapes(shapes):
        if not d:
            out[0] += 1
            continue
        rows, rest = ceil(d[0] / dp), numel(d[1:])
        for r in range(dp):
            out[r] += min(rows, max(0, d[0] - r * rows)) * rest
    return out
