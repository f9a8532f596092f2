"""The workload protocol: everything the rest of the simulator asks of a workload, in one place.

Consumers (compile, the layout, the memory model, the CLI, the executor's checks) call these
members instead of branching on the workload's class, so a new workload kind is one class that
implements :class:`Workload` — nothing else changes. The kinds today: :class:`TransformerSpec`,
:class:`LayerListWorkload` and, for model-state questions only, :class:`ParamCountModel`.

Override points (what a new kind implements; ``isinstance(x, Workload)`` checks that they exist):

- ``name``, ``dtype``, ``params``: identity, numeric formats and parameter count.
- ``layer_count``: units a pipeline can split (None: no layers known, so pipeline degree 1 only).
- ``seq_len``: tokens per sample (1 where a sample is not a sequence).
- ``has_compute``: whether :meth:`chunk_load` and :meth:`step_flops` can be answered.
- ``has_activation_shapes``: whether the transformer shapes the activation-memory model needs
  (hidden, heads, vocabulary, sequence; Korthikanti et al. 2022) are known.
- ``check_tp(tp)``: raise :class:`SpecError` naming ``tp`` if the workload cannot be split ``tp`` ways.
- ``check_ep(ep)``: the same for expert parallelism (a model without experts takes ep 1 only).
- ``with_seq(seq)``: the same workload trained at another sequence length.
- ``chunk_load(chunk, options)``: the kernels, parameters and stage-boundary bytes of one chunk.
- ``step_flops(tokens, recompute, flash_attention=)``: (model, hardware) FLOPs of ``tokens`` tokens.
- ``summary()`` / ``describe()``: the JSON and text forms ``trainplan model show`` prints.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from simulator.attention_efficiency import AttentionBackend
from simulator.errors import SpecError
from simulator.hashed_key import kept_hash, state_without_kept_hash
from simulator.workload.context import NO_CONTEXT_SPLIT, ContextSplit
from simulator.workload.flops import Recompute
from simulator.workload.fp8 import Fp8Recipe
from simulator.workload.grad_accum import GradAdd
from simulator.workload.kinds import DtypePolicy, KernelFusion, LossImpl
from simulator.workload.ops import Kernel

__all__ = ["ChunkLoad", "ChunkSlice", "ComputeOptions", "WorkUnit", "Workload", "divisors", "no_compute",
           "no_experts", "one_of"]


@dataclass(frozen=True, kw_only=True)
class ChunkSlice:
    """Which part of the model one pipeline chunk holds."""

    index: int
    """The chunk's position in the model, 0 … count − 1 (0 holds the input, count − 1 the output)."""
    count: int
    """Chunks the model is cut into (pipeline ranks × virtual stages)."""
    start: int
    """First layer of the chunk."""
    layers: int
    """Layers in the chunk."""

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.count - 1


@dataclass(frozen=True, kw_only=True)
class ComputeOptions:
    """How a chunk is run on one tensor-parallel rank for one micro-batch."""

    __hash__ = kept_hash  # hashed as a memo key thousands of times a search (simulator.hashed_key)
    __getstate__ = state_without_kept_hash

    micro_batch: int
    tp: int = 1
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False
    flash_attention: bool = True
    fusion: KernelFusion = KernelFusion.EAGER
    """How the framework fuses element-wise operations (dropout, softmax) into kernels."""
    ep: int = 1
    """Expert-parallel degree: a MoE layer's routed experts are split over ep ranks."""
    routing_skew: float = 1.0
    """Busiest expert-parallel rank's tokens ÷ its balanced share (MoE load imbalance)."""
    context: ContextSplit = NO_CONTEXT_SPLIT
    """How each sample's sequence is split over context-parallel ranks (:mod:`simulator.workload.context`)."""
    fp8: Fp8Recipe | None = None
    """The FP8 recipe the block's linear layers run (:mod:`simulator.workload.fp8`); None: none."""
    fp8_weight_shards: int = 1
    fp8_transpose: bool = True
    """Whether the device's FP8 GEMMs need transposed operand copies (``fp8.fp8_needs_transpose``: before Blackwell)."""
    """Ranks each FP8 weight is cast over (FSDP2's float8 all-gather casts the dp shard)."""
    attention_backend: AttentionBackend = AttentionBackend.FLASH_ATTENTION_2
    """The fused-attention kernel the framework runs (``Framework.attention_backend``)."""
    vocab_multiple: int = 1
    """The framework pads the vocabulary of the logits and loss to a multiple of this (``Framework.vocab_multiple``)."""
    loss: LossImpl = LossImpl.ONE_PASS
    """How the framework computes the cross-entropy (``Framework.loss_impl``, :mod:`simulator.workload.loss`)."""
    autocast: bool = False
    """Eager ``torch.autocast`` over fp32 parameters (:mod:`simulator.workload.autocast`): weight casts, fp32
    norms and residual stream; only for a bf16/fp16 model under ``MixedPrecision.AUTOCAST``."""
    cuda_kernels: bool = False
    """Whether the device runs torch's CUDA kernels (``simulator.compute.runs_cuda_kernels``): eager norms' γ/β
    backward kernel (:mod:`simulator.workload.eager_norm`)."""
    grad_add: GradAdd | None = None
    """The gradient-accumulation add each micro-batch's backward makes on the compute stream
    (:mod:`simulator.workload.grad_accum`); None: none there (fused into the weight-gradient GEMM, or on a
    reduction stream)."""


@dataclass(frozen=True, kw_only=True)
class WorkUnit:
    """The kernels of one repetition of a unit of work (a transformer block, the model's edges, a run
    of layers). Each entry of a phase is one operation's kernels — one row of a compute table."""

    fwd: tuple[tuple[Kernel, ...], ...]
    bwd: tuple[tuple[Kernel, ...], ...]
    recompute: tuple[tuple[Kernel, ...], ...] = ()
    """Forward kernels the backward pass repeats (activation recomputation)."""


@dataclass(frozen=True, kw_only=True)
class ChunkLoad:
    """What one chunk computes and holds on one tensor-parallel rank, per micro-batch."""

    units: tuple[tuple[int, WorkUnit], ...]
    """(repetitions, unit) pairs; the chunk's time is the sum of repetitions × unit time."""
    blocks: int
    """Identical blocks of ``block_params`` each (ZeRO-3 gathers them one at a time; tensor
    parallelism communicates per block); 0 when the chunk is one unit."""
    block_params: float
    """Parameters of one block on this rank."""
    edge_params: float
    """Parameters outside the blocks on this rank (embedding, head; for a layer list, all)."""
    boundary_bytes: int
    """Bytes of the activation the chunk hands to the next (before any sequence-parallel split)."""
    moe_blocks: int = 0
    """Of the ``blocks``, the mixture-of-experts ones (each exchanges its tokens by all-to-all)."""
    expert_params: float = 0.0
    """Of the blocks' parameters on this rank, the routed experts' (÷ tp·ep): their gradients are
    reduced over the expert-data-parallel group, the rest over the data-parallel group."""


@runtime_checkable
class Workload(Protocol):
    """What every workload kind provides (see the module docstring for each member)."""

    name: str
    dtype: DtypePolicy

    @property
    def params(self) -> int: ...

    @property
    def layer_count(self) -> int | None: ...

    @property
    def seq_len(self) -> int: ...

    @property
    def has_compute(self) -> bool: ...

    @property
    def has_activation_shapes(self) -> bool: ...

    def check_tp(self, tp: int) -> None: ...

    def check_ep(self, ep: int) -> None: ...

    def with_seq(self, seq_len: int) -> "Workload": ...

    def chunk_load(self, chunk: ChunkSlice, options: ComputeOptions) -> ChunkLoad: ...

    def step_flops(self, tokens: int, recompute: Recompute, *, flash_attention: bool) -> tuple[float, float]: ...

    def summary(self) -> dict: ...

    def describe(self) -> str: ...


def divisors(n: int, up_to: int | None = None) -> list[int]:
    """The positive divisors of ``n``, ascending; with ``up_to``, only those ≤ ``up_to``. Pairs d, n/d by
    trial division to min(√n, up_to): bounded work even for a batch of 1e19 sequences with ``up_to``."""
    limit = math.isqrt(n) if up_to is None else min(math.isqrt(n), up_to)
    small, large = [], []
    for d in range(1, limit + 1):
        if n % d == 0:
            small.append(d)
            if n // d != d:
                large.append(n // d)
    return [d for d in small + large[::-1] if up_to is None or d <= up_to]


def one_of(values: list[int]) -> str:
    """``[1, 2, 4]`` → ``"1, 2 or 4"`` (for error messages that suggest valid values)."""
    text = [str(v) for v in values]
    return text[0] if len(text) == 1 else ", ".join(text[:-1]) + " or " + text[-1]


def no_experts(ep: int) -> None:
    """The expert-parallel rule of a workload without experts: ep 1 only."""
    if ep != 1:
        raise SpecError("ep", f"{ep}: the model has no mixture-of-experts layers to split; use ep 1")


def no_compute() -> SpecError:
    """The error for a workload without compute asked for a time or FLOPs."""
    return SpecError("model", "a step time needs a transformer (preset or config.json) or a layer list; "
                     "a bare parameter count (--params) has no compute to time")
