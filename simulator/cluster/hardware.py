"""The hardware pieces of a cluster: one link type, the accelerator, and the host side of a node.

Frozen, validated dataclasses; every number carries its unit in its name. Bandwidths are per
direction in decimal GB/s (1e9 bytes/s). How these pieces are joined into nodes and a network is in
:mod:`simulator.cluster.interconnect`; the whole cluster in :mod:`simulator.cluster.spec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.checks import non_negative_number, positive_int, positive_number
from simulator.cluster.comm import CpuVendor
from simulator.cluster.kinds import LinkKind
from simulator.dtypes import Dtype
from simulator.errors import SpecError
from simulator.gemm_efficiency import MAMF_DTYPE, GemmCurve

if TYPE_CHECKING:
    from simulator.gemm_efficiency import GemmEfficiency


@dataclass(frozen=True, kw_only=True)
class Link:
    """One directional link type: its line rate, per-hop latency and achievable fraction."""

    kind: LinkKind
    """Physical kind; decides the latency class a communication library charges."""
    bw_GBps: float
    """Line bandwidth per direction, decimal GB/s (per GPU for intra-node, per NIC for network)."""
    latency_us: float
    """Latency of one hop over this link, microseconds."""
    efficiency: float = 1.0
    """Achievable fraction of ``bw_GBps`` (protocol and DMA overheads). 1.0 unless a source says."""

    def __post_init__(self) -> None:
        positive_number("bw_GBps", self.bw_GBps)
        non_negative_number("latency_us", self.latency_us)
        if not 0 < self.efficiency <= 1:
            raise SpecError("efficiency", f"must be in (0, 1], got {self.efficiency!r}")

    @property
    def bw_Bps(self) -> float:
        """Achievable bandwidth, bytes/s: ``bw_GBps × 1e9 × efficiency``."""
        return self.bw_GBps * 1e9 * self.efficiency

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


@dataclass(frozen=True, kw_only=True)
class Device:
    """An accelerator (or a CPU process standing in for one)."""

    name: str
    peak_tflops: dict[Dtype, float]
    """Dense peak throughput per numeric format, TFLOP/s (1e12 FLOP/s)."""
    memory_bytes: int
    """Device memory capacity, bytes (datasheet GB × 1e9)."""
    hbm_bw_GBps: float
    """Device memory bandwidth, decimal GB/s."""
    gemm_efficiency: "GemmEfficiency | None" = None
    """Achieved matmul efficiency against GEMM size (:mod:`simulator.gemm_efficiency`), measured;
    None: the default curve named by ``gemm_curve``."""
    gemm_curve: GemmCurve | None = None
    """Which published measurement the default curve comes from (its plateau over this device's BF16
    peak); None: the one the device's name suggests (a file written before the field)."""
    sm_count: int | None = None
    """Streaming multiprocessors (GPU compute units) that run a GEMM's thread blocks, for tile and
    wave quantisation (:mod:`simulator.gemm_shape`); None: GEMMs are timed by their FLOPs alone."""
    sustained_clock_ratio: float = 1.0
    """SM clock the device sustains in the run (its power limit, cooling) over the clock its matmul curve
    was measured at; it scales the compute term of every kernel, not HBM-bound time. 1.0: as measured —
    the MAMF plateaus were measured at each GPU's default power limit (the table notes e.g. GH200's 900 W
    [src: bekman-mle]); give less for a power-capped run."""
    kernel_launch_overhead_us: float = 0.0
    """Host time per kernel the compute model schedules that overlaps no kernel's execution, µs:
    framework dispatch, autograd bookkeeping and the launch itself. Every kernel of the workload's op
    list costs this on top of its roofline time (:func:`simulator.compute.kernel_time`). A CPU process
    runs its operators synchronously and pays it in full (``trainplan calibrate --compute`` measures
    it); a GPU's launches are asynchronous — control returns to the host before the kernel has run
    [src: nvidia-cuda-async] — so a host thread that runs ahead hides it: 0 in the GPU presets, whose
    GEMM curve's small-kernel fall-off carries what a short GEMM loses."""
    compute_capability: float | None = None
    """CUDA compute capability (7.0 V100, 8.0 A100, 8.9 L40S, 9.0 H100/H200, 10.0 B200) [src: nvidia-cuda-gpus]:
    the GPU generation NCCL's tuner keys its per-architecture tables by (``Protocol.bus_bw_cap``);
    None: not a CUDA GPU or not stated, no per-architecture figure applies."""

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("device.name", "must be a non-empty string")
        if self.sm_count is not None:
            positive_int("device.sm_count", self.sm_count)
        if self.compute_capability is not None:
            positive_number("device.compute_capability", self.compute_capability)
        if not 0 < self.sustained_clock_ratio <= 1:
            raise SpecError("device.sustained_clock_ratio", f"must be in (0, 1], got {self.sustained_clock_ratio!r}")
        non_negative_number("device.kernel_launch_overhead_us", self.kernel_launch_overhead_us)
        if not self.peak_tflops:
            raise SpecError("device.peak_tflops", "give at least one format, e.g. {bf16: 989}")
        for dtype, tflops in self.peak_tflops.items():
            positive_number(f"device.peak_tflops.{dtype.value}", tflops)
        positive_number("device.memory_GB", self.memory_bytes)
        positive_number("device.hbm_bw_GBps", self.hbm_bw_GBps)
        if self.gemm_curve is not None and not isinstance(self.gemm_curve, GemmCurve):
            raise SpecError("device.gemm_curve", f"must be a GemmCurve, got {self.gemm_curve!r}")
        if self.gemm_curve not in (None, GemmCurve.NONE) and MAMF_DTYPE not in self.peak_tflops:
            raise SpecError("device.peak_tflops", f"gemm_curve {self.gemm_curve.value!r} is relative to the "
                            f"{MAMF_DTYPE.value} peak; give peak_tflops.{MAMF_DTYPE.value}")

    def peak_flops(self, dtype: Dtype) -> float:
        """Peak FLOP/s for ``dtype``; a format the device file does not list is an error."""
        if dtype not in self.peak_tflops:
            known = ", ".join(d.value for d in self.peak_tflops)
            raise SpecError("device.peak_tflops", f"no {dtype.value} figure for {self.name}; known: {known}")
        return self.peak_tflops[dtype] * 1e12


@dataclass(frozen=True, kw_only=True)
class HostSpec:
    """The host side of a node: what ZeRO-Offload/Infinity and the input pipeline need."""

    cpu_memory_bytes: int
    """Host DRAM per node, bytes."""
    h2d_bw_GBps: float
    """Host-to-device PCIe bandwidth per GPU, per direction, decimal GB/s."""
    h2d_latency_us: float
    """Latency of one host↔device PCIe hop, µs (also the staging hop without GPUDirect RDMA)."""
    nvme_bytes: int = 0
    """NVMe capacity per node for ZeRO-Infinity offload, bytes (0: none)."""
    nvme_read_GBps: float = 0.0
    """Aggregate NVMe read bandwidth per node, GB/s."""
    nvme_write_GBps: float = 0.0
    """Aggregate NVMe write bandwidth per node, GB/s."""
    cpu_adam_params_per_s: float = 0.0
    """CPU optimizer throughput per node, parameters updated per second (0: unknown)."""
    storage_read_GBps: float = 0.0
    """Read bandwidth from training-data storage per node, GB/s (0: unknown)."""
    cpu_vendor: CpuVendor | None = None
    """Host CPU vendor (NCCL's LL cap across nodes depends on it, ``Protocol.bus_bw_cap``); None: not
    stated, read as NCCL reads any host that is not AMD."""

    def __post_init__(self) -> None:
        positive_number("host.cpu_memory_GB", self.cpu_memory_bytes)
        positive_number("host.h2d_bw_GBps", self.h2d_bw_GBps)
        non_negative_number("host.h2d_latency_us", self.h2d_latency_us)
        for name in ("nvme_bytes", "nvme_read_GBps", "nvme_write_GBps", "cpu_adam_params_per_s",
                     "storage_read_GBps"):
            non_negative_number(f"host.{name}", getattr(self, name))
