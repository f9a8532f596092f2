"""Time this machine's compute the way the executor runs it: GEMMs, memory-bound kernels, one block.

Everything runs in one process with the executor's threads per rank (:func:`executor.launch.threads_per_rank`)
and in the run's compute format (fp32, or bf16 as under the executor's ``torch.autocast``), on the CPU
(gloo) or on ``cuda:0`` (nccl, synchronised around every timed call). Each measurement is ``warmup``
untimed calls, then ``repeats`` timed calls; the median and the 10th/90th percentiles are kept.

- GEMMs: ``torch.mm`` (``torch.bmm`` for a batched shape) of an m×k by a k×n operand;
- memory-bound kernels (:class:`MemoryKernel`) over N elements (in rows of :func:`row_width`), each with
  the bytes the compute model counts for it (:func:`model_bytes`), so that ``bytes / time`` is the
  bandwidth the model must use to reproduce it;
- one transformer block of the executor's model (:class:`executor.model.Block`), forward and backward:
  what a micro-batch costs per layer beyond the kernels' own work (dispatch, autograd).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable

import torch
import torch.nn.functional as F

from simulator.compile import adam_bytes_per_param
from simulator.gemm_shape import GemmShape
from simulator.workload.kinds import DtypePolicy
from simulator.workload.ops import DROPOUT_MASK_BYTES
from simulator.workload.transformer import TransformerSpec

TORCH_DTYPE = {DtypePolicy.FP32: torch.float32, DtypePolicy.BF16_MIXED: torch.bfloat16}
"""Tensor format of the measured kernels for each run precision the executor offers."""
ROW_WIDTH = 64
"""On the CPU: last-dimension width of the normalisation and softmax inputs (a tiny model's hidden-like row;
rows = N / 64). The CPU suite's calibration was measured with it: keep it."""
GPU_ROW_WIDTH = 4096
"""On a GPU: the row width of the same inputs. Over 64-wide rows (a few hundred bytes each) torch's row-wise
GPU kernels are far from HBM-bound: on the H200, layer norm moved 237 GB/s over 64-wide rows against 3071 GB/s
over 4096-wide ones, and calibrate wrote ``hbm_efficiency`` 0.465 [src: own-h200-2026-11-24] (why, per
kernel, was not measured). 4096 is the width benchmarks/gpu_measure.py measured
the memory-bound kernels at (docs/hardware_measured.md, "Memory-bound kernels"), a hidden size the presets'
models train at (Llama 2 7B, Llama 3 8B), and divides every size of
:data:`executor.compute_grid.GPU_ELEMENTS`. One width whatever the model: ``hbm_efficiency`` is one
device-wide figure that every model's kernels are timed by."""


@dataclass(frozen=True, kw_only=True)
class Timing:
    """Median and spread of ``repeats`` timed calls, seconds."""

    median_s: float
    p10_s: float
    p90_s: float


class MemoryKernel(Enum):
    """The memory-bound kernels of a training step that the compute model times by their bytes."""

    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    SOFTMAX = "softmax"
    GELU = "gelu"
    SWIGLU = "swiglu"
    """``silu(gate) · up`` over N outputs (gate and up each N elements)."""
    DROPOUT = "dropout"
    ADD = "add"
    """A residual add."""
    ADAM = "adam"
    """``torch.optim.Adam.step`` over N parameters (one tensor)."""


def model_bytes(kernel: MemoryKernel, elements: int, dtype: DtypePolicy) -> float:
    """Bytes the compute model counts for ``kernel`` over ``elements`` (:mod:`simulator.workload.ops`):
    a norm, softmax pass or GELU reads and writes N·e; SwiGLU reads 2N·e and writes N·e; dropout reads
    and writes N·e and writes a mask of N bytes; an add reads 2N·e and writes N·e; an Adam step moves
    :func:`simulator.compile.adam_bytes_per_param` bytes per parameter."""
    e = dtype.activation_bytes
    per_element = {MemoryKernel.SWIGLU: 3 * e, MemoryKernel.ADD: 3 * e,
                   MemoryKernel.DROPOUT: 2 * e + DROPOUT_MASK_BYTES, MemoryKernel.ADAM: adam_bytes_per_param(dtype)}
    return float(elements * per_element.get(kernel, 2 * e))


def row_width(device: torch.device, elements: int) -> int:
    """Last-dimension width of a memory-bound kernel's ``elements``-element input on ``device``:
    :data:`GPU_ROW_WIDTH` on a GPU, :data:`ROW_WIDTH` elsewhere; 1 (a column) where it does not divide
    ``elements``. Needs no GPU to call: it reads only ``device.type``."""
    width = GPU_ROW_WIDTH if device.type == "cuda" else ROW_WIDTH
    return width if elements % width == 0 else 1


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device: torch.device, *, repeats: int, warmup: int) -> Timing:
    """Median, p10 and p90 of ``repeats`` timed calls of ``fn`` after ``warmup`` untimed ones: wall clock on
    the CPU; on a GPU, CUDA events around each call, issued back to back (a host clock around a
    synchronisation adds the ~20 µs round trip to every call, which swamps a small kernel)."""
    for _ in range(warmup):
        fn()
    _synchronize(device)
    if device.type == "cuda":
        return _time_events(fn, repeats)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return Timing(median_s=statistics.median(times), p10_s=_percentile(times, 0.1), p90_s=_percentile(times, 0.9))


def _time_events(fn: Callable[[], object], repeats: int) -> Timing:
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(end) / 1e3 for start, end in pairs]
    return Timing(median_s=statistics.median(times), p10_s=_percentile(times, 0.1), p90_s=_percentile(times, 0.9))


def _percentile(values: list[float], q: float) -> float:
    """The value at rank ``round(q·(n − 1))`` of the sorted values (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def timing_of(seconds: list[float]) -> Timing:
    """The median, 10th and 90th percentiles (:func:`_percentile`) of ``seconds`` measured apart."""
    return Timing(median_s=statistics.median(seconds), p10_s=_percentile(seconds, 0.1),
                  p90_s=_percentile(seconds, 0.9))


@contextlib.contextmanager
def threads(count: int):
    """``torch.set_num_threads(count)`` for the block, restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def time_gemm(shape: GemmShape, dtype: DtypePolicy, device: torch.device, *, repeats: int, warmup: int) -> Timing:
    """``torch.mm`` (``torch.bmm`` when ``shape.batch > 1``) of m×k by k×n."""
    m, n, k, batch = (int(v) for v in (shape.m, shape.n, shape.k, shape.batch))
    kw = {"dtype": TORCH_DTYPE[dtype], "device": device}
    if batch > 1:
        a, b = torch.randn(batch, m, k, **kw), torch.randn(batch, k, n, **kw)
        return time_call(lambda: torch.bmm(a, b), device, repeats=repeats, warmup=warmup)
    a, b = torch.randn(m, k, **kw), torch.randn(k, n, **kw)
    return time_call(lambda: torch.mm(a, b), device, repeats=repeats, warmup=warmup)


def _memory_call(kernel: MemoryKernel, elements: int, dtype: DtypePolicy, device: torch.device) -> Callable:
    kw = {"dtype": TORCH_DTYPE[dtype], "device": device}
    width = row_width(device, elements)
    x = torch.randn(elements // width, width, **kw)
    if kernel is MemoryKernel.LAYER_NORM:
        return lambda: F.layer_norm(x, (width,))
    if kernel is MemoryKernel.RMS_NORM:
        return lambda: F.rms_norm(x, (width,))
    if kernel is MemoryKernel.SOFTMAX:
        return lambda: torch.softmax(x, dim=-1)
    if kernel is MemoryKernel.GELU:
        return lambda: F.gelu(x)
    if kernel is MemoryKernel.DROPOUT:
        return lambda: torch.native_dropout(x, 0.1, True)
    y = torch.randn_like(x)
    if kernel is MemoryKernel.SWIGLU:
        return lambda: F.silu(x) * y
    if kernel is MemoryKernel.ADD:
        return lambda: x + y
    param = torch.nn.Parameter(torch.randn(elements, dtype=torch.float32, device=device))
    param.grad = torch.randn_like(param)
    optimizer = torch.optim.Adam([param], lr=1e-3)
    return optimizer.step


def time_memory_kernel(kernel: MemoryKernel, elements: int, dtype: DtypePolicy, device: torch.device, *,
                       repeats: int, warmup: int) -> Timing:
    """One call of ``kernel`` over ``elements`` elements (an Adam step over that many fp32 parameters)."""
    with torch.no_grad():
        return time_call(_memory_call(kernel, elements, dtype, device), device, repeats=repeats, warmup=warmup)


def time_bare_call(device: torch.device, *, repeats: int, warmup: int) -> Timing:
    """One ``torch.add`` of two 1-element tensors without autograd: the framework's cheapest operator call."""
    a, b = torch.ones(1, device=device), torch.ones(1, device=device)
    with torch.no_grad():
        return time_call(lambda: torch.add(a, b), device, repeats=repeats, warmup=warmup)


def time_block(spec: TransformerSpec, micro_batch: int, seq: int, dtype: DtypePolicy, device: torch.device, *,
               repeats: int, warmup: int, seed: int = 0) -> Timing:
    """Forward and backward of one :class:`executor.model.Block` of ``spec`` on a (micro_batch, seq, hidden)
    input, as the executor trains it (fp32 weights; bf16 under ``torch.autocast``); gradients accumulate
    across calls as over micro-batches."""
    from executor.model import Block

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        block = Block(spec).to(device)
        x = torch.randn(micro_batch, seq, spec.hidden, device=device, requires_grad=True)
        grad = torch.randn(micro_batch, seq, spec.hidden, device=device)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if dtype is DtypePolicy.BF16_MIXED
                else contextlib.nullcontext())

    def step() -> None:
        with autocast:
            y = block(x)
        y.backward(grad)

    return time_call(step, device, repeats=repeats, warmup=warmup)


def time_block_phases(spec: TransformerSpec, micro_batch: int, seq: int, dtype: DtypePolicy, *, repeats: int,
                      warmup: int, seed: int = 0) -> tuple[Timing, Timing, Timing]:
    """On the CPU: (forward, backward, forward + backward) of :func:`time_block`'s block, each call's forward and
    backward timed apart (wall clock; the CPU runs them in the calling thread). Autograd's engine runs the
    backward without the model's Python, so its operators cost less host time than the forward's."""
    from executor.model import Block

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        block = Block(spec)
        x = torch.randn(micro_batch, seq, spec.hidden, requires_grad=True)
        grad = torch.randn(micro_batch, seq, spec.hidden)
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if dtype is DtypePolicy.BF16_MIXED
                else contextlib.nullcontext())
    fwd, bwd = [], []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        with autocast:
            y = block(x)
        middle = time.perf_counter()
        y.backward(grad)
        end = time.perf_counter()
        if i >= warmup:
            fwd.append(middle - start)
            bwd.append(end - middle)
    both = [f + b for f, b in zip(fwd, bwd)]
    return tuple(Timing(median_s=statistics.median(t), p10_s=_percentile(t, 0.1), p90_s=_percentile(t, 0.9))
                 for t in (fwd, bwd, both))
