"""GPU memory the runtime takes besides tensors: the CUDA context, cuBLAS workspaces, NCCL buffers,
and what the caching allocator reserves beyond what it hands out.

How the frameworks report memory decides where each term goes (torch ``memory_stats`` docs [src: torch-cuda-memory]):

- ``allocated`` (``torch.cuda.max_memory_allocated``): every tensor the caching allocator serves,
  which includes the cuBLAS and cuBLASLt workspaces (PyTorch allocates them through
  ``CUDACachingAllocator``: ``getNewWorkspace`` / ``getNewCUDABlasLtWorkspace`` in
  ``aten/src/ATen/cuda/CublasHandlePool.cpp``) [src: torch-cublas-workspace];
- ``reserved`` (``torch.cuda.max_memory_reserved``): allocated plus the free parts of the segments
  the allocator keeps cached (fragmentation, :data:`ALLOCATOR_FRAGMENTATION_FRACTION`);
- the device total (``nvidia-smi``): reserved plus what lives outside the allocator, the CUDA
  context (:data:`CUDA_CONTEXT_BYTES`) and NCCL's own ``cudaMalloc`` buffers (:func:`nccl_buffer_bytes`).

Published runs quote ``allocated`` or ``reserved``; the fit verdict needs the device total.
A CPU device (the ``localhost-cpu`` preset: gloo, no CUDA) has none of these terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from simulator.cluster.spec import Device
from simulator.strategy.layout import ParallelLayout
from simulator.units import MiB

CUDA_CONTEXT_BYTES = 512 * MiB
"""(assumption) The CUDA context of one process on one GPU (driver state, module images under
CUDA's lazy loading): users report 0.3-0.5 GiB on A100/H100 with CUDA 12; no primary source gives a
figure. Measure it as ``nvidia-smi`` usage of a process minus ``torch.cuda.memory_reserved()``."""

CUBLAS_WORKSPACE_BYTES_SM90 = 4096 * 8 * 1024
"""cuBLAS workspace PyTorch gives each (handle, stream) on compute capability 9.0 (Hopper): 32 MiB
(``parseChosenWorkspaceSize``, ``default_size = sm90 ? 4096 * 8 * 1024 : ...``) [src: torch-cublas-workspace]."""
CUBLAS_WORKSPACE_BYTES_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8
"""The same default on every other architecture, ``:4096:2:16:8``: 8,519,680 bytes [src: torch-cublas-workspace]."""
CUBLASLT_WORKSPACE_BYTES = 1024 * 1024
"""cuBLASLt workspace per (handle, stream): ``CUBLASLT_WORKSPACE_SIZE`` default 1024 KiB
(``parseCUDABlasLtWorkspaceSize``), a separate allocation unless ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1``
[src: torch-cublas-workspace]."""
_SM90_NAMES = ("H100", "H200", "H800", "H20", "GH200")
"""Device names of compute capability 9.0 (the device file has no architecture field)."""

NCCL_SIMPLE_BUFF_BYTES = 4 * MiB
"""``NCCL_BUFFSIZE`` default, 4 MiB: the Simple protocol's buffer per connection [src: nccl-env, nccl-buffsizes]."""
NCCL_LL_BUFF_BYTES = 8 * 512 * 8 * 16
"""LL protocol buffer per connection: ``NCCL_LL_LINES_PER_THREAD`` (8) × ``NCCL_LL_MAX_NTHREADS`` (512)
× ``NCCL_STEPS`` (8) × 16-byte ``ncclLLFifoLine`` = 524,288 bytes [src: nccl-buffsizes]."""
NCCL_LL128_BUFF_BYTES = 120 * 640 * 8 * 8
"""LL128 protocol buffer per connection: ``NCCL_LL128_ELEMS_PER_THREAD`` (120) ×
``NCCL_LL128_MAX_NTHREADS`` (640) × ``NCCL_STEPS`` (8) × 8 bytes = 4,915,200 bytes [src: nccl-buffsizes]."""
NCCL_CONNECTION_BYTES = NCCL_SIMPLE_BUFF_BYTES + NCCL_LL_BUFF_BYTES + NCCL_LL128_BUFF_BYTES
"""One connection's buffers, all three protocols (9,633,792 bytes)."""
NCCL_CHANNELS = 32
"""(assumption) Channels NCCL opens per communicator: ``MAXCHANNELS`` (32 before NCCL 2.23), the most
it may pick; the count its topology search picks (often fewer, e.g. on PCIe) is not modelled."""


def cublas_workspace_bytes(device: Device) -> int:
    """cuBLAS + cuBLASLt workspace of one compute stream (PyTorch's defaults; 0 on a CPU device)."""
    return _cublas_workspace_bytes(device.name)


@lru_cache(maxsize=64)
def _cublas_workspace_bytes(name: str) -> int:
    """:func:`cublas_workspace_bytes` by device name (all it reads; asked once per pipeline stage)."""
    if not _is_cuda(name):
        return 0
    sm90 = any(tag in name.upper() for tag in _SM90_NAMES)
    return (CUBLAS_WORKSPACE_BYTES_SM90 if sm90 else CUBLAS_WORKSPACE_BYTES_DEFAULT) + CUBLASLT_WORKSPACE_BYTES


def is_cuda(device: Device) -> bool:
    """Whether the device runs CUDA (every preset but the CPU stand-in, whose name starts with CPU)."""
    return _is_cuda(device.name)


def _is_cuda(name: str) -> bool:
    return not name.upper().startswith("CPU")


def nccl_peers(layout: ParallelLayout) -> int:
    """Connections one rank receives on, per channel, over all its communicators: one ring
    predecessor per collective group of more than one rank (dp·cp, tp, cp) and the previous and next
    pipeline stage (activations forward, gradients backward) when pp > 1."""
    return (layout.dp_cp > 1) + (layout.tp > 1) + (layout.cp > 1) + (2 if layout.pp > 1 else 0)


def nccl_buffer_bytes(device: Device, layout: ParallelLayout) -> int:
    """NCCL's buffers on one rank: peers (:func:`nccl_peers`) × :data:`NCCL_CHANNELS` ×
    :data:`NCCL_CONNECTION_BYTES` (0 on a CPU device, which uses gloo)."""
    if not is_cuda(device):
        return 0
    return nccl_peers(layout) * NCCL_CHANNELS * NCCL_CONNECTION_BYTES


ALLOCATOR_FRAGMENTATION_FRACTION = 0.10
"""(assumption) The caching allocator reserves this fraction more than the transient memory it
serves (activations, buffers, the loss's working set): blocks split and cached by varying sizes.
Not sourced and not fitted; measure ``max_memory_reserved() / max_memory_allocated()`` on the target."""


@dataclass(frozen=True, kw_only=True)
class RuntimeBytes:
    """Runtime memory of one rank, by term."""

    cublas_workspace_bytes: int
    """cuBLAS + cuBLASLt workspaces (inside ``allocated``)."""
    allocator_slack_bytes: float
    """Reserved but not allocated (``reserved - allocated``)."""
    cuda_context_bytes: int
    """Outside the allocator."""
    nccl_buffers_bytes: int
    """Outside the allocator."""

    @property
    def outside_allocator_bytes(self) -> int:
        return self.cuda_context_bytes + self.nccl_buffers_bytes


def runtime_bytes(device: Device, layout: ParallelLayout, *, transient_bytes: float) -> RuntimeBytes:
    """The runtime terms of one rank whose activations, buffers and loss working set total ``transient_bytes``."""
    cuda = is_cuda(device)
    return RuntimeBytes(
        cublas_workspace_bytes=cublas_workspace_bytes(device),
        allocator_slack_bytes=ALLOCATOR_FRAGMENTATION_FRACTION * transient_bytes if cuda else 0.0,
        cuda_context_bytes=CUDA_CONTEXT_BYTES if cuda else 0,
        nccl_buffers_bytes=nccl_buffer_bytes(device, layout))
