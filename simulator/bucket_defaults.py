"""Gradient-bucket defaults of the training frameworks: one named constant each, with its source.

The profiles (:mod:`simulator.profiles`) set them as strategy defaults and the memory model
(:mod:`simulator.memory.buffers`) sizes the buffers they imply; both import them from here.
PyTorch DDP's ``bucket_cap_mb=25`` is the all-reduce strategy's own default and lives with it:
:data:`simulator.strategy.sync.DDP_BUCKET_CAP_BYTES`.
"""

from __future__ import annotations

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
