"""The hardware pieces of a cluster: one link type and the accelerator (the host side of a node:
:mod:`simulator.cluster.host_spec`).

Frozen, validated dataclasses; every number carries its unit in its name. Bandwidths are per
direction in decimal GB/s (1e9 bytes/s). How these pieces are joined into nodes and a network is in
:mod:`simulator.cluster.interconnect`; the whole cluster in :mod:`simulator.cluster.spec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.checks import non_negative_number, positive_int, positive_number
from simulator.cluster.host_spec import HostSpec  # noqa: F401 (re-exported: one import for every part)
from simulator.cluster.kinds import LinkKind
from simulator.dtypes import Dtype
from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.gemm_efficiency import MAMF_DTYPE, GemmCurve
from simulator.power_model import PowerDraw

if TYPE_CHECKING:
    from simulator.attention_efficiency import AttentionEfficiency
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


class KernelDispatch(Kind):
    """How a device's kernels relate to the host thread that issues them
    (:mod:`simulator.host_overhead` combines the two times by it)."""

    INLINE = "inline"
    """The kernel runs in the calling thread (a CPU process, torch's CPU operators): host time per call
    adds to the kernel's, and the device's compute shares the host's cores with other processes."""
    ASYNC = "async"
    """The launch returns before the kernel has run (a CUDA stream) [src: nvidia-cuda-async]: a stream
    of kernels takes the larger of its device time and its host (launch) time."""


@dataclass(frozen=True, kw_only=True)
class Device:
    """An accelerator (or a CPU process standing in for one)."""

    name: str
    peak_tflops: dict[Dtype, float]
    """Dense peak throughput per numeric format, TFLOP/s (1e12 FLOP/s)."""
    memory_bytes: int
    """Device memory capacity, bytes (datasheet GB × 1e9)."""
    hbm_bw_GBps: float
    """Device memory bandwidth, decimal GB/s (the datasheet figure)."""
    hbm_efficiency: float | None = None
    """Achievable fraction of ``hbm_bw_GBps`` for a streaming kernel: a published STREAM-like
    measurement on this GPU (BabelStream's Copy, one read and one write per element, as an elementwise
    layer norm, GELU, dropout or add kernel) over its datasheet figure [src: azure-ai-bench]. The
    roofline's memory term of every kernel runs at ``hbm_bw_GBps × hbm_efficiency``
    (:func:`simulator.compute.achievable_hbm_Bps`); a fraction, as a link's ``efficiency``, so a run on
    the same GPU with another memory (HBM2e H100, 40 GB A100) keeps it. None: the measured curve's
    ``gemm_efficiency.hbm_efficiency`` (1.0 unless measured: the datasheet)."""
    gemm_efficiency: "GemmEfficiency | None" = None
    """Achieved matmul efficiency against GEMM size (:mod:`simulator.gemm_efficiency`), measured;
    None: the default curve named by ``gemm_curve``."""
    fp8_gemm_efficiency: "GemmEfficiency | None" = None
    """Achieved FP8 matmul efficiency against GEMM size, relative to ``peak_tflops.fp8`` (a published FP8
    GEMM measurement, e.g. ``{plateau, dtype: fp8}``); None: the FP8 GEMMs are timed on the BF16 curve by
    :data:`simulator.kernel_roofline.FP8_SAME_DURATION_EFFICIENCY` (an assumption)."""
    attention_efficiency: "AttentionEfficiency | None" = None
    """Published fused-attention kernel rates by backend, pass, causal mask and sequence length
    (:mod:`simulator.attention_efficiency`); None: the attention core is timed on the matmul curve by its
    FLOPs (no kernel-level source for this device)."""
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
    [src: bekman-mle]); give less for a clock the run held lower for another reason (cooling, a locked
    clock). A power limit is modelled by ``power_limit_W`` and ``power_draw`` instead (:mod:`simulator.power`)."""
    power_limit_W: float | None = None
    """The board's power limit in the run, W (the datasheet TDP unless the run capped it, e.g. 500 W H100s):
    with ``power_draw``, the limit :mod:`simulator.power` stretches compute-bound kernels to; None: no limit."""
    power_draw: PowerDraw | None = None
    """Watts per kernel class at the maximum clock and the stretch exponent (:class:`PowerDraw`, measured);
    None: the power limit is not modelled."""
    kernel_launch_overhead_us: float = 0.0
    """Host time per kernel the compute model schedules, µs: framework dispatch, autograd bookkeeping and
    the launch itself. A CPU process runs its operators synchronously and pays it on top of every
    kernel's roofline time (``trainplan calibrate --compute`` measures it); a GPU's launches are
    asynchronous [src: nvidia-cuda-async], so a stream of kernels costs the larger of its device and host
    times (``kernel_dispatch``, :mod:`simulator.host_overhead`): 5 µs in the GPU presets, the CPU side of
    a CUDA launch [src: hta-launch-stats], which only a model of very short kernels notices."""
    backward_call_overhead_us: float | None = None
    """Host time per call in backward on an ``inline`` device, µs: autograd's engine runs the backward's
    operators from C++, without the model's Python and the graph recording a forward call pays, so a call costs
    less there (``trainplan calibrate --compute`` times the block's forward and backward apart). On an
    ``inline`` device ``kernel_launch_overhead_us`` is then the forward's (and a recomputed forward's) time per
    dispatched operator (:mod:`simulator.workload.eager_dispatch`). None: ``kernel_launch_overhead_us`` in
    backward too (every preset but localhost-cpu; an ``async`` device ignores it)."""
    kernel_dispatch: KernelDispatch = KernelDispatch.INLINE
    """Whether host time per kernel adds to (``inline``) or overlaps (``async``) device time
    (:class:`KernelDispatch`); the default keeps a file written before the field as it was read."""
    op_call_overhead_us: float = 0.0
    """Host time of one eager operator call outside autograd, µs: the optimizer's per-tensor calls
    (:mod:`simulator.host_overhead`). ``trainplan calibrate --compute`` measures it as a bare 1-element
    ``torch.add``; 0: not modelled."""
    dtensor_call_overhead_us: float = 0.0
    """Extra host time of an operator call on DTensor operands over a plain call, µs: DTensor's sharding
    propagation and redistribution checks in Python on every call. Charged to the optimizer's calls when
    the parameters are DTensors (FSDP2, torch tensor parallel; :func:`simulator.host_overhead.dtensor_params`).
    localhost-cpu: our probe's bare DTensor ``add_`` minus a plain one; 0: not modelled."""
    compute_capability: float | None = None
    """CUDA compute capability (7.0 V100, 8.0 A100, 8.9 L40S, 9.0 H100/H200, 10.0 B200) [src: nvidia-cuda-gpus]:
    the GPU generation NCCL's tuner keys its per-architecture tables by (``Protocol.bus_bw_cap``);
    None: not a CUDA GPU or not stated, no per-architecture figure applies."""

    def call_overhead_us(self, backward: bool = False) -> float:
        """Host µs per call of a forward (``backward`` False) or backward operator: ``kernel_launch_overhead_us``,
        or ``backward_call_overhead_us`` in backward where the device gives it."""
        if backward and self.backward_call_overhead_us is not None:
            return self.backward_call_overhead_us
        return self.kernel_launch_overhead_us

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError("device.name", "must be a non-empty string")
        if self.sm_count is not None:
            positive_int("device.sm_count", self.sm_count)
        if self.compute_capability is not None:
            positive_number("device.compute_capability", self.compute_capability)
        if not 0 < self.sustained_clock_ratio <= 1:
            raise SpecError("device.sustained_clock_ratio", f"must be in (0, 1], got {self.sustained_clock_ratio!r}")
        if self.power_limit_W is not None:
            positive_number("device.power_limit_W", self.power_limit_W)
            if self.power_draw is not None and self.power_limit_W <= self.power_draw.idle_W:
                raise SpecError("device.power_limit_W", f"{self.power_limit_W:g} W is not above the idle draw "
                                f"{self.power_draw.idle_W:g} W of device.power_draw; give the board's limit")
        non_negative_number("device.kernel_launch_overhead_us", self.kernel_launch_overhead_us)
        non_negative_number("device.op_call_overhead_us", self.op_call_overhead_us)
        if self.backward_call_overhead_us is not None:
            non_negative_number("device.backward_call_overhead_us", self.backward_call_overhead_us)
        non_negative_number("device.dtensor_call_overhead_us", self.dtensor_call_overhead_us)
        if not isinstance(self.kernel_dispatch, KernelDispatch):
            raise SpecError("device.kernel_dispatch", f"must be a KernelDispatch, got {self.kernel_dispatch!r}")
        if not self.peak_tflops:
            raise SpecError("device.peak_tflops", "give at least one format, e.g. {bf16: 989}")
        for dtype, tflops in self.peak_tflops.items():
            positive_number(f"device.peak_tflops.{dtype.value}", tflops)
        positive_number("device.memory_GB", self.memory_bytes)
        positive_number("device.hbm_bw_GBps", self.hbm_bw_GBps)
        self._check_achievable_hbm()
        if self.gemm_curve is not None and not isinstance(self.gemm_curve, GemmCurve):
            raise SpecError("device.gemm_curve", f"must be a GemmCurve, got {self.gemm_curve!r}")
        if self.attention_efficiency is not None and MAMF_DTYPE not in self.peak_tflops:
            raise SpecError("device.attention_efficiency", f"is relative to the {MAMF_DTYPE.value} peak; give "
                            f"peak_tflops.{MAMF_DTYPE.value}")
        if self.fp8_gemm_efficiency is not None and Dtype.FP8 not in self.peak_tflops:
            raise SpecError("device.fp8_gemm_efficiency", "is relative to the FP8 peak; give peak_tflops.fp8")
        if self.gemm_curve not in (None, GemmCurve.NONE) and MAMF_DTYPE not in self.peak_tflops:
            raise SpecError("device.peak_tflops", f"gemm_curve {self.gemm_curve.value!r} is relative to the "
                            f"{MAMF_DTYPE.value} peak; give peak_tflops.{MAMF_DTYPE.value}")

    def _check_achievable_hbm(self) -> None:
        if self.hbm_efficiency is None:
            return
        field = "device.hbm_efficiency"
        if not (isinstance(self.hbm_efficiency, (int, float)) and 0 < self.hbm_efficiency <= 1):
            raise SpecError(field, f"must be in (0, 1], got {self.hbm_efficiency!r}")
        if self.gemm_efficiency is not None and self.gemm_efficiency.hbm_efficiency != 1.0:
            raise SpecError(field, "the device also gives gemm_efficiency.hbm_efficiency; give one of the two")

    def peak_flops(self, dtype: Dtype) -> float:
        """Peak FLOP/s for ``dtype``; a format the device file does not list is an error."""
        if dtype not in self.peak_tflops:
            known = ", ".join(d.value for d in self.peak_tflops)
            raise SpecError("device.peak_tflops", f"no {dtype.value} figure for {self.name}; known: {known}")
        return self.peak_tflops[dtype] * 1e12
