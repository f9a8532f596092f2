"""Gradient-bucket and ZeRO-3 defaults of the training frameworks: one named constant each, with its source.

The profiles (:mod:`simulator.profiles`) set them as strategy defaults and the memory model
(:mod:`simulator.memory.buffers`) sizes the buffers they imply; both import them from here.
PyTorch DDP's ``bucket_cap_mb=25`` is the all-reduce strategy's own default and lives with it:
:data:`simulator.strategy.sync.DDP_BUCKET_CAP_BYTES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.units import MiB

DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed ``zero_optimization.reduce_bucket_size`` default, 5e8 elements [src: deepspeed-config]."""

DEEPSPEED_ALLGATHER_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed ``zero_optimization.allgather_bucket_size`` default, 5e8 elements [src: deepspeed-config]."""

MEGATRON_BUCKET_PARAMS = 40_000_000
"""Megatron-Core ``DistributedDataParallelConfig.bucket_size`` default ``max(40e6, 1e6·dp)``
parameters; 40e6 is exact for dp ≤ 40 [src: megatron-core]."""

HOROVOD_FUSION_THRESHOLD_BYTES = 128 * MiB
"""Horovod ``HOROVOD_FUSION_THRESHOLD`` default, 128 MB (bytes: 128·1024·1024) since v0.21.0 (release
notes, PR #2468; the docs' Tensor Fusion page gives the older 64 MB) [src: horovod-docs]."""


@dataclass(frozen=True)
class DeepSpeedZero3Config:
    """DeepSpeed's stage-3 defaults (``constants.py``, 2021) [src: deepspeed-zero3-coordinator]."""

    prefetch_bucket_elements: int = 50_000_000
    """``stage3_prefetch_bucket_size``: elements prefetched ahead of the current submodule."""
    param_persistence_threshold_elements: int = 100_000
    """``stage3_param_persistence_threshold``: tensors of fewer elements stay whole, never gathered."""
    max_live_parameters_elements: int = 1_000_000_000
    """``stage3_max_live_parameters``: gathered elements alive at once (current + prefetched)."""
    max_reuse_distance_elements: int = 1_000_000_000
    """``stage3_max_reuse_distance``: a submodule's gathered tensors are kept after its use only when fewer
    elements are traced before its next use (:mod:`simulator.compile.ds_zero3_reuse`) [src: deepspeed-zero3-reuse]."""

    def gathered(self, numels) -> tuple[int, ...]:
        """The tensors (element counts, in order) that are partitioned and gathered."""
        return tuple(n for n in numels if n >= self.param_persistence_threshold_elements)

    def persistent_elements(self, numels) -> int:
        """Elements of the tensors kept whole on every rank."""
        return sum(n for n in numels if n < self.param_persistence_threshold_elements)

    def prefetch_calls(self, gathered_numels) -> int:
        """Prefetch depth in calls (:mod:`simulator.compile.ds_zero3`): ``max(1, ⌈prefetch / m̄⌉)`` capped by
        ``max(1, ⌊max_live / m̄⌋ − 1)``, ``m̄`` the mean gathered tensor."""
        if not gathered_numels:
            return 1
        mean = sum(gathered_numels) / len(gathered_numels)
        depth = max(1, math.ceil(self.prefetch_bucket_elements / mean))
        live_cap = max(1, math.floor(self.max_live_parameters_elements / mean) - 1)
        return min(depth, live_cap, len(gathered_numels))


DEEPSPEED_ZERO3 = DeepSpeedZero3Config()
"""The defaults every DeepSpeed ZeRO-3 estimate uses."""
