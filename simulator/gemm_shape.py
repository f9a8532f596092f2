"""Tile and wave quantisation of a GEMM from its (m, n, k) shape.

A GPU GEMM library splits the m×n output into tiles of ``tile_m × tile_n``, one thread block per tile,
each stepping through all of k; the device runs ``sm_count`` tiles at a time, one *wave*
(NVIDIA, "Matrix Multiplication Background User's Guide", §2.1 "GPU Implementation" and §3
"Dimension Quantization Effects" [src: nvidia-gemm-guide]). Two losses follow from the shape alone:

- tile quantisation: a dimension that is not a multiple of the tile leaves the last tiles partly
  empty, but they cost a full tile: ``ceil(m/tile_m)·ceil(n/tile_n)`` tiles are computed;
- wave quantisation: ``tiles = batch·ceil(m/tile_m)·ceil(n/tile_n)`` run in ``ceil(tiles/sm_count)``
  waves, and a partial last wave costs a full one (the guide's example: 108 SMs on an A100).

So a GEMM costs what ``waves · sm_count`` full tiles cost: its *padded work*

    W = waves · sm_count · 2 · tile_m · tile_n · k        (FLOPs)

and :func:`quantisation` is ``F / W`` with ``F = 2·batch·m·n·k``. The library picks the tile
(its heuristics, §2.3 "Typical Tile Dimensions In cuBLAS And Performance"); we take the candidate
with the least padded work among :data:`TILES`, the guide's larger tiles (256×128, 128×256, 128×128).
ASSUMPTION: every candidate tile runs at the same per-SM rate (the guide says larger tiles are more
efficient, without a number), so the loss is a lower bound on the real one; smaller tiles (64×64 and
below, the guide's least efficient) are left out for the same reason. k adds no quantisation here:
k-loop effects beyond the roofline's memory term are not modelled. Newer libraries reduce wave
quantisation with split-K/stream-K kernels; this module does not model those.

Without ``sm_count`` (a CPU, or a cluster file that does not give it) a GEMM has no quantisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.errors import SpecError


@dataclass(frozen=True)
class GemmShape:
    """A (batched) GEMM producing ``batch`` m×n outputs from m×k by k×n."""

    m: float
    n: float
    k: float
    batch: float = 1.0
    weight_grad: bool = False
    """A linear layer's weight gradient ``dyᵀ·x``: its reduction dimension k is the token count and its
    operands' leading dimensions are m and n (:mod:`simulator.gemm_alignment`). Otherwise m is the
    token count (the forward ``x·Wᵀ``, the data gradient ``dy·W``, a plain row-major ``torch.mm``) and
    the leading dimensions are n and k."""

    @property
    def flops(self) -> float:
        """``2·batch·m·n·k``."""
        return 2.0 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True)
class Tile:
    """One output tile a thread block computes: ``m × n`` elements."""

    m: int
    n: int


TILES: tuple[Tile, ...] = (Tile(256, 128), Tile(128, 256), Tile(128, 128))
"""Candidate tiles: the guide's most efficient cuBLAS tiles (256×128 and 128×256) and the next,
128×128 [src: nvidia-gemm-guide]."""


def padded_flops(shape: GemmShape, sm_count: int, tile: Tile) -> float:
    """FLOPs the device spends on ``shape`` with ``tile``: full waves of full tiles (module docstring)."""
    tiles = math.ceil(shape.batch) * math.ceil(shape.m / tile.m) * math.ceil(shape.n / tile.n)
    waves = math.ceil(tiles / sm_count)
    return waves * sm_count * 2.0 * tile.m * tile.n * shape.k


def best_padded_flops(shape: GemmShape, sm_count: int | None) -> float:
    """The least padded work over :data:`TILES`; the GEMM's own FLOPs without ``sm_count``."""
    if sm_count is None:
        return shape.flops
    if sm_count < 1:
        raise SpecError("device.sm_count", f"must be a positive integer, got {sm_count!r}")
    return max(shape.flops, min(padded_flops(shape, sm_count, t) for t in TILES))


def quantisation(shape: GemmShape, sm_count: int | None) -> float:
    """Useful fraction ``F / W`` of the padded work, in (0, 1] (1 without ``sm_count``)."""
    return shape.flops / best_padded_flops(shape, sm_count)
