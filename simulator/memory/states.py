"""Model-state bytes per rank: parameters, gradients and Adam optimizer states, under ZeRO 0-3.

Bytes per parameter (Rajbhandari et al. SC'20, "ZeRO", §3.1 and Figure 1): mixed-precision Adam
keeps 16-bit parameters (2), 16-bit gradients (2) and K = 12 bytes of optimizer state (an fp32
master copy, momentum and variance, 4 each). Pure fp32 training keeps 4 + 4 + 8 (momentum and
variance; the weights are their own master). ZeRO partitions these over the Nd data-parallel
ranks, so per rank::

    ZeRO-0 (DDP)  (2 + 2 + K)·Ψ          ZeRO-2  2Ψ + (2 + K)·Ψ/Nd
    ZeRO-1        2Ψ + 2Ψ + K·Ψ/Nd       ZeRO-3  (2 + 2 + K)·Ψ/Nd

(the paper's 7.5B model on 64 GPUs: 120, 31.4, 16.6, 1.9 GB). Ψ/Nd is exact only for the
:attr:`Partitioning.FLAT` split; :class:`Partitioning` names the other splits frameworks really use,
which :func:`partition_numels` reproduces element by element.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from simulator.errors import SpecError
from simulator.memory.shapes import Shape, numel
from simulator.memory.strategy import Partitioning, ZeroStage
from simulator.workload.transformer import DtypePolicy

ADAM_STATES_PER_PARAM = 2
"""Adam keeps two fp32 moments per parameter, momentum and variance (Kingma & Ba 2015)."""
ADAM_STATE_BYTES = 4
"""Bytes per moment element: fp32 (torch.optim.Adam and DeepSpeed keep moments in fp32)."""


def optimizer_bytes_per_param(dtype: DtypePolicy) -> int:
    """K: fp32 master (if any) + Adam momentum + variance: 12 mixed precision, 8 pure fp32."""
    return dtype.master_bytes + ADAM_STATES_PER_PARAM * ADAM_STATE_BYTES


@dataclass(frozen=True, kw_only=True)
class ModelStateBytes:
    """Bytes of model states one rank holds."""

    params_bytes: int
    """Parameters as the forward pass reads them (16-bit in mixed precision)."""
    grads_bytes: int
    """Gradients as backward produces them."""
    optimizer_bytes: int
    """Optimizer state: fp32 master copy (mixed precision) + Adam momentum + variance."""

    @property
    def total_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def _check_rank(dp: int, rank: int | None) -> None:
    if not isinstance(dp, int) or isinstance(dp, bool) or dp < 1:
        raise SpecError("dp", f"must be a positive integer, got {dp!r}")
    if rank is not None and not 0 <= rank < dp:
        raise SpecError("rank", f"rank {rank} is outside 0..{dp - 1}")


def _dims(shapes) -> list[Shape]:
    """Shapes from ``[(name, shape), ...]`` or from bare shapes."""
    return [tuple(s[1]) if len(s) == 2 and isinstance(s[0], str) else tuple(s) for s in shapes]


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
    every rank's shard padded to chunk 0's size (rank 0, the most loaded, holds exactly that
    many real elements; trailing ranks' real shards can be smaller).
    """
    dims = _dims(shapes)
    counts = [numel(d) for d in dims]
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


def model_state_bytes(shapes, *, dp: int, zero: ZeroStage, dtype: DtypePolicy,
                      partitioning: Partitioning = Partitioning.FLAT, rank: int | None = None) -> ModelStateBytes:
    """Parameters, gradients and optimizer bytes of one data-parallel rank (``rank=None``: the most
    loaded). ``shapes`` are the tensors the rank's model replica holds, ``[(name, shape), ...]``
    (e.g. :func:`simulator.memory.shapes.stage_param_shapes`). ZeRO stage s partitions the
    optimizer (s >= 1), gradients (s >= 2) and parameters (s = 3) with ``partitioning``."""
    _check_rank(dp, rank)
    zero = ZeroStage(zero)
    full = sum(numel(d) for d in _dims(shapes))
    parts = partition_numels(shapes, dp, partitioning)
    part = max(parts) if rank is None else parts[rank]
    k = optimizer_bytes_per_param(dtype)
    return ModelStateBytes(
        params_bytes=(part if zero >= ZeroStage.ZERO3 else full) * dtype.param_bytes,
        grads_bytes=(part if zero >= ZeroStage.ZERO2 else full) * dtype.grad_bytes,
        optimizer_bytes=(part if zero >= ZeroStage.ZERO1 else full) * k,
    )
