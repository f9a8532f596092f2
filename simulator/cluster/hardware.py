"""The hardware pieces of a cluster: one link type, the accelerator, and the host side of a node.

Frozen, validated dataclasses; every number carries its unit in its name. Bandwidths are per
direction in decimal GB/s (1e9 bytes/s). How these pieces are joined into nodes and a network is in
:mod:`simulator.cluster.interconnect`; the whole cluster in :mod:`simulator.cluster.spec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from simulator.checks import non_negative_number, positive_int, positive_number
from simulator.cluster.comm import CpuVendor
from simulator.cluster.kinds import LinkKind
from simulator.dtypes import Dtype
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


class KernelDispatch(Enum):
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
    :data:`simulator.compute.FP8_SAME_DURATION_EFFICIENCY` (an assumption)."""
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
    fsdp2_forward_module_us: float = 0.0
    """Host time FSDP2 adds per ``fully_shard`` module per forward, µs (all-gather copy-in/out, reshard);
    :func:`simulator.host_overhead.with_host_modules`. Measured by ``trainplan calibrate --compute`` on a fake
    2-rank group, FSDP2's multi-rank path (:mod:`executor.fsdp2_host_bench`) [src: own-fsdp2-fake-group-probe].
    0: not modelled."""
    fsdp2_backward_module_us: float = 0.0
    """Host time FSDP2 adds per ``fully_shard`` module per backward, µs (re-gather, reduce-scatter,
    post-backward). 0: not modelled."""
    tp_forward_module_us: float = 0.0
    """Host time torch's tensor parallelism (DTensor weights, ``parallelize_module``) adds per tensor-parallel
    module per forward, µs (DTensor dispatch, the parallel styles' hooks);
    :func:`simulator.host_overhead.with_host_modules`. 0: not modelled (GPU presets: not measured)."""
    tp_backward_module_us: float = 0.0
    """The same per backward, µs. 0: not modelled."""
    checkpoint_forward_region_us: float = 0.0
    """Host time ``torch.utils.checkpoint`` adds per checkpointed region per forward, µs;
    :func:`simulator.host_overhead.with_host_modules`. 0: not modelled (GPU presets: not measured)."""
    checkpoint_backward_region_us: float = 0.0
    """The same per backward, beyond the recomputed kernels, µs. 0: not modelled."""
    ddp_forward_call_us: float = 0.0
    """Host time torch ``DistributedDataParallel`` adds per forward call of the wrapped model, µs;
    :func:`simulator.host_overhead.with_host_modules`. 0: not modelled (GPU presets: not measured)."""
    ddp_sync_backward_us: float = 0.0
    """Host time DDP's synchronising backward adds per step (reducer hooks, bucket copies, finalisation; not the
    collective), µs; :func:`simulator.host_overhead.with_ddp_sync`. 0: not modelled."""
    pipeline_action_us: float = 0.0
    """Host time torch's pipeline schedule runtime (``torch.distributed.pipelining``'s ``_PipelineScheduleRuntime``)
    spends per action of a rank's list (compute, send, receive) outside the action's kernels and transfers, µs:
    the loop's dispatch and profiler range, the stage's per-chunk bookkeeping and the building of each p2p op list;
    :func:`simulator.host_overhead.with_host_modules` charges it per compute action with the sends and receives
    the runtime adds around it (:func:`simulator.host_overhead.pipeline_actions`). Measured on the CPU by
    ``trainplan calibrate --compute`` (:mod:`executor.pipeline_host_bench`) [src: own-pipeline-action-probe].
    0: not modelled (GPU presets: not measured on a GPU; there the chunk terms take the larger of the phase's
    kernels and the host time, and a real model's stage kernels outlast tens of µs per action)."""
    fsdp2_zero2_backward_module_us: float | None = None
    """:attr:`fsdp2_backward_module_us` for FSDP2 at ZeRO-2 (``reshard_after_forward=False``), whose backward
    does not re-gather the module, µs; measured by ``trainplan calibrate --compute`` with the same probe
    (:mod:`executor.fsdp2_host_bench`) [src: own-fsdp2-fake-group-probe]. None: not stated, ZeRO-2 is charged
    :attr:`fsdp2_backward_module_us` as ZeRO-3 is."""
    pipeline_p2p_post_us: float = 0.0
    """Host time torch's pipeline runtime blocks a rank's thread posting one send or receive of its list
    (``_batch_p2p``: ``dist.isend`` / ``dist.irecv`` through the backend, which for gloo takes the pair's lock and
    writes the rendezvous notice on the calling thread), µs: not in :attr:`pipeline_action_us` (the executor books
    posting as pp time, outside no phase); :func:`simulator.host_overhead.with_host_modules` charges it per send and
    receive the runtime puts around a forward or backward (:func:`simulator.pipeline_runtime.p2p_actions`).
    Measured on the CPU by ``trainplan calibrate --compute`` (:mod:`executor.pipeline_host_bench`)
    [src: own-pipeline-post-probe]. 0: not modelled (GPU presets: not measured on a GPU)."""
    step_loop_us: float = 0.0
    """Host time a rank's training loop spends per step outside every phase, µs: taking the step's batch and the
    replica's samples, slicing the micro-batches, entering and leaving the accumulation context, ``zero_grad``,
    the phase clocks' own calls; :func:`simulator.step_loop.step_loop_s` charges it once per step with the
    optimizer. Measured by ``trainplan calibrate --compute`` as the time outside the phases of the tiny model's
    step on 2 gloo processes (:mod:`executor.step_bench`) [src: own-step-loop-probe]. 0: not modelled (GPU
    presets: not measured on a GPU)."""
    first_microbatch_cold_us: float = 0.0
    """Extra host time of a step's first micro-batch forward over a later one's, µs: the first torch calls after
    the barrier and the between-step bookkeeping find their code and data cold; charged once per step by
    :func:`simulator.step_loop.step_loop_s`. Measured by ``trainplan calibrate --compute`` from the same probe's
    steps as the first micro-batch's forward less the mean of the others' [src: own-step-loop-probe]. 0: not
    modelled (GPU presets: not measured)."""
    cpu_cores: int | None = None
    """CPU cores of the node's host that run its processes (``os.sched_getaffinity``; ``trainplan calibrate
    --compute`` writes it): more active processes than cores time-share them
    (:func:`simulator.host_overhead.core_share`); None: not stated, no time-sharing modelled."""

    def __post_init__(self) -> None:
        positive_number("host.cpu_memory_GB", self.cpu_memory_bytes)
        positive_number("host.h2d_bw_GBps", self.h2d_bw_GBps)
        non_negative_number("host.h2d_latency_us", self.h2d_latency_us)
        for name in ("nvme_bytes", "nvme_read_GBps", "nvme_write_GBps", "cpu_adam_params_per_s",
                     "storage_read_GBps"):
            non_negative_number(f"host.{name}", getattr(self, name))
        if self.cpu_cores is not None:
            positive_int("host.cpu_cores", self.cpu_cores)
        non_negative_number("host.fsdp2_forward_module_us", self.fsdp2_forward_module_us)
        non_negative_number("host.fsdp2_backward_module_us", self.fsdp2_backward_module_us)
        non_negative_number("host.tp_forward_module_us", self.tp_forward_module_us)
        non_negative_number("host.tp_backward_module_us", self.tp_backward_module_us)
        non_negative_number("host.checkpoint_forward_region_us", self.checkpoint_forward_region_us)
        non_negative_number("host.checkpoint_backward_region_us", self.checkpoint_backward_region_us)
        non_negative_number("host.ddp_forward_call_us", self.ddp_forward_call_us)
        non_negative_number("host.ddp_sync_backward_us", self.ddp_sync_backward_us)
        non_negative_number("host.pipeline_action_us", self.pipeline_action_us)
        non_negative_number("host.pipeline_p2p_post_us", self.pipeline_p2p_post_us)
        non_negative_number("host.step_loop_us", self.step_loop_us)
        non_negative_number("host.first_microbatch_cold_us", self.first_microbatch_cold_us)
        if self.fsdp2_zero2_backward_module_us is not None:
            non_negative_number("host.fsdp2_zero2_backward_module_us", self.fsdp2_zero2_backward_module_us)
