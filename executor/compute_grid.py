"""What ``trainplan calibrate --compute`` measures: the GEMM shapes, memory-kernel sizes and block
(:class:`ComputeGrid`), on the CPU (the tiny run's shapes, :func:`default_grid`) or on a GPU (the model's
shapes as planned and larger squares, :func:`gpu_grid`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.errors import SpecError
from simulator.gemm_shape import GemmShape
from simulator.plan_scale import Scale, ScaleKind, scale_model
from simulator.workload.kinds import DtypePolicy
from simulator.workload.ops import edge_work, layer_work
from simulator.workload.transformer import TransformerSpec

SQUARE_SIDES = (64, 128, 256, 512, 1024)
"""Sides n of the square n×n×n GEMMs measured besides the run's own shapes (as benchmarks/cpu_probe.py)."""
ELEMENTS = (2 ** 10, 2 ** 14, 2 ** 18, 2 ** 22)
"""Element counts of the memory-bound kernels; the bandwidth is read at the largest (16 MB in fp32)."""
TP_DEGREES = (1, 2, 4)
"""Tensor-parallel degrees whose tiny-run GEMMs are measured (a tiny model grows with tp: hidden 32·tp)."""
GPU_SQUARE_SIDES = (256, 512, 1024, 2048, 4096, 8192, 16384)
"""On a GPU (``--backend nccl``): square sides up to where the rate is flat (a 16384³ bf16 GEMM is 8.8 TFLOP,
about 11 ms on an H100/H200)."""
GPU_ELEMENTS = (2 ** 20, 2 ** 24, 2 ** 28)
"""On a GPU: memory-kernel sizes up to 2^28 elements (512 MB in bf16), several times any L2."""
GPU_TP_DEGREES = (1, 2, 4, 8)
"""On a GPU: tp degrees whose GEMMs of the model *as planned* (not tiny) at micro-batch 1 are measured."""
GPU_MAX_GEMM_BYTES = 12e9
"""On a GPU: a run's GEMM whose operands and output pass this many bytes is left out (it is on the plateau)."""

@dataclass(frozen=True, kw_only=True)
class ComputeGrid:
    """What to measure: GEMM shapes, memory-kernel sizes, and the block (its model and micro-batch)."""

    shapes: tuple[GemmShape, ...]
    elements: tuple[int, ...]
    block: TransformerSpec
    micro_batch: int

    def __post_init__(self) -> None:
        if not self.shapes or not self.elements:
            raise SpecError("grid", "measure at least one GEMM shape and one memory-kernel size")


def run_shapes(spec: TransformerSpec, micro_batch: int, tp: int = 1) -> tuple[GemmShape, ...]:
    """Every distinct GEMM shape (forward and backward) of one micro-batch of ``spec`` on one of ``tp`` ranks."""
    works = layer_work(spec, micro_batch, tp=tp) + edge_work(spec, micro_batch, tp=tp)
    kernels = [k for w in works for k in w.fwd + w.bwd if k.shape is not None]
    return tuple(dict.fromkeys(k.shape for k in kernels))


def tiny_model(spec: TransformerSpec, dtype: DtypePolicy, tp: int = 1) -> TransformerSpec:
    """``spec`` at the executor's ``--scale tiny`` for ``tp`` ranks (one stage), in the run's format."""
    tiny, _ = scale_model(spec, Scale(ScaleKind.TINY), tp=tp, stages=1)
    return replace(tiny, dtype=dtype)


def executed(spec: TransformerSpec) -> TransformerSpec:
    """``spec`` as :class:`executor.model.GPT` runs it: without dropout (the model has no dropout layers; a run
    reports ``p not run`` among its components), so that a timed block is counted with the kernels and
    dispatches it ran."""
    return replace(spec, dropout=0.0)


def default_grid(spec: TransformerSpec, dtype: DtypePolicy, micro_batch: int = 2) -> ComputeGrid:
    """Squares of :data:`SQUARE_SIDES` and the tiny runs' GEMMs at :data:`TP_DEGREES`; :data:`ELEMENTS`;
    the tiny block at tp 1."""
    squares = tuple(GemmShape(n, n, n) for n in SQUARE_SIDES)
    runs = tuple(s for tp in TP_DEGREES for s in run_shapes(tiny_model(spec, dtype, tp), micro_batch, tp))
    return ComputeGrid(shapes=tuple(dict.fromkeys(squares + runs)), elements=ELEMENTS,
                       block=tiny_model(spec, dtype), micro_batch=micro_batch)


def gpu_grid(spec: TransformerSpec, dtype: DtypePolicy, micro_batch: int = 2) -> ComputeGrid:
    """A GPU's grid: squares of :data:`GPU_SQUARE_SIDES` and the GEMMs of ``spec`` as planned (micro-batch 1,
    tp in :data:`GPU_TP_DEGREES`, those under :data:`GPU_MAX_GEMM_BYTES`); :data:`GPU_ELEMENTS`; the tiny
    block (host time per kernel). The tiny grid of :func:`default_grid` would leave a GPU's curve
    at a few percent of the peak: every tiny GEMM is launch-bound there."""
    squares = tuple(GemmShape(n, n, n) for n in GPU_SQUARE_SIDES)
    model = replace(spec, dtype=dtype)
    runs = tuple(s for tp in GPU_TP_DEGREES if spec.heads % tp == 0 for s in run_shapes(model, 1, tp)
                 if 2 * s.batch * (s.m * s.k + s.k * s.n + s.m * s.n) <= GPU_MAX_GEMM_BYTES)
    return ComputeGrid(shapes=tuple(dict.fromkeys(squares + runs)), elements=GPU_ELEMENTS,
                       block=tiny_model(spec, dtype), micro_batch=micro_batch)
