"""The records ``trainplan calibrate --compute`` returns (:func:`executor.calibrate_compute.calibrate_compute`):
one row per GEMM and memory-bound kernel timed, and the whole calibration with the device fields written from it.
Kept apart from the measuring code so each module has one job; importable from :mod:`executor.calibrate_compute`
too, where callers found them."""

from __future__ import annotations

from dataclasses import dataclass

from executor.compute_bench import MemoryKernel, Timing
from executor.fsdp2_host_bench import Fsdp2OptimizerTiming, Fsdp2Timing
from executor.host_bench import AdamwTiming, CheckpointTiming, DdpTiming, TpModuleTiming
from executor.pipeline_host_bench import PipelineActionTiming
from executor.step_checkpoint_bench import StepCheckpointTiming
from executor.step_launches import StepLaunches
from executor.step_timing import RankStepTiming
from simulator.cluster.spec import Device
from simulator.gemm_shape import GemmShape
from simulator.workload.kinds import DtypePolicy


@dataclass(frozen=True, kw_only=True)
class GemmRow:
    shape: GemmShape
    timing: Timing

    @property
    def tflops(self) -> float:
        """Achieved rate of the median call, TFLOP/s."""
        return self.shape.flops / self.timing.median_s / 1e12

@dataclass(frozen=True, kw_only=True)
class MemoryRow:
    kernel: MemoryKernel
    elements: int
    bytes: float
    """Bytes the compute model counts for the call (:func:`executor.compute_bench.model_bytes`)."""
    timing: Timing

    @property
    def GBps(self) -> float:
        return self.bytes / self.timing.median_s / 1e9

@dataclass(frozen=True, kw_only=True)
class ComputeCalibration:
    """The measurements and the device fields written from them."""

    device: str
    threads: int
    dtype: DtypePolicy
    gemms: tuple[GemmRow, ...]
    memory: tuple[MemoryRow, ...]
    bare_call: Timing
    """One 1-element ``torch.add`` without autograd (for reference: the cheapest operator call)."""
    block: Timing
    block_kernels: int
    """Host calls the compute model charges for the block's forward and backward (``Kernel.dispatches``)."""
    block_roofline_s: float
    """The block's modelled time without the per-kernel overhead."""
    fields: Device
    """The device as written: peak, curve, bandwidth, ``kernel_launch_overhead_us``."""
    tp_modules: TpModuleTiming | None = None
    """The tensor-parallel module terms (step 5); None where not measured (a GPU)."""
    ddp: DdpTiming | None = None
    """DDP's terms (step 5); None where not measured (a GPU)."""
    checkpoint: CheckpointTiming | None = None
    """The activation-checkpoint terms (step 5); None where not measured (a GPU)."""
    adamw: AdamwTiming | None = None
    """The AdamW step that gave ``op_call_overhead_us`` (step 4); None: the bare call gave it (a GPU)."""
    fsdp2: Fsdp2Timing | None = None
    """FSDP2's per-module terms on a fake 2-rank group (step 5); None where not measured (a GPU)."""
    fsdp2_zero2: Fsdp2Timing | None = None
    """The same at ZeRO-2 (``reshard_after_forward=False``: the backward's term); None where not measured."""
    fsdp2_optimizer: Fsdp2OptimizerTiming | None = None
    """AdamW over FSDP2's shards against the plain model's tensors: ``dtensor_call_overhead_us``; None where not
    measured (a GPU)."""
    pipeline: PipelineActionTiming | None = None
    """torch's pipeline runtime per action on 2 processes (step 5); None where not measured (a GPU)."""
    block_phases: tuple[Timing, Timing] | None = None
    """The block's forward and backward timed apart (the CPU); None on a GPU."""
    rank_steps: RankStepTiming | None = None
    """The whole tiny model in a rank's step (the CPU, fp32), which gave the per-operator fields; None: the block."""
    block_call_us: tuple[float, float | None, float] | None = None
    """(forward, backward, optimizer call) µs per operator from the block's and the AdamW's tight loops, where
    ``rank_steps`` replaced them."""
    step_checkpoint: StepCheckpointTiming | None = None
    """Checkpointed blocks in a rank's DDP step (the CPU, fp32): the ``host.checkpoint_*_region_us`` written."""
    step_launches: StepLaunches | None = None
    """Each rank-step probe launch's plain-model fields, whose medians were written (the CPU, fp32);
    ``rank_steps`` is the first launch."""
