"""ZeRO-3 / FSDP2 parameter gathers of one chunk (:func:`simulator.compile.step.stage_work`'s helpers):
per-block all-gathers, the routed experts apart over the expert-data-parallel group when ep > 1.
See :mod:`simulator.compile.comm_part` for the call sizes and order."""

from __future__ import annotations

from simulator.compile import comm_part, ep_part
from simulator.compile.compute_part import ChunkCompute
from simulator.strategy.formats import sync_dtype
from simulator.strategy import ParallelLayout
from simulator.strategy.framework import Framework
from simulator.work import CommCall
from simulator.workload.fp8 import FP8_BYTES, fp8_linear_weights


def expert_split(layout: ParallelLayout, cc) -> tuple[float, float]:
    """(dense, routed-expert) parameters per block of a chunk on this rank: the experts apart when ep > 1
    (partitioned over the expert-data-parallel group, :mod:`simulator.compile.ep_part`)."""
    if layout.ep > 1 and cc.expert_params > 0 and cc.blocks:
        return cc.layer_params - cc.expert_params / cc.blocks, cc.expert_params / cc.blocks
    return cc.layer_params, 0.0


def gathers(cache, layout, cc, dp_group, edp_group, pbytes, block_bytes) -> tuple[CommCall, ...]:
    """Per-block ZeRO-3 parameter all-gathers: the dense part over dp, the experts over the expert-dp group;
    ``block_bytes`` a whole block's gather (:func:`gathered_block_bytes`) when the experts are not apart
    (the float8 all-gather is torchao's, refused with experts by :func:`simulator.strategy.precision.check_fp8`,
    so they never meet)."""
    dense, experts = expert_split(layout, cc)
    gathered = dense * pbytes if experts else block_bytes
    apart = layout.framework is Framework.FSDP2  # the root module's own gather first (comm_part.zero3_gathers)
    calls = comm_part.zero3_gathers(cache, dp_group, gathered, cc.edge_params * pbytes, cc.blocks, layout.tp, apart)
    if experts:
        root = calls[:1] if apart and cc.edge_params > 0 and cc.blocks > 0 else ()
        calls = root + ep_part.interleave(calls[len(root):], comm_part.zero3_gathers(
            cache, edp_group, experts * pbytes, 0.0, cc.blocks, layout.tp * layout.ep))
    return calls


def gathered_block_bytes(workload, layout: ParallelLayout, cc: ChunkCompute) -> float:
    """Bytes of one block's ZeRO-3 / FSDP2 all-gather: its parameters in the 16-bit format (fp32 under
    autocast, :func:`simulator.strategy.formats.sync_dtype`), or, with FSDP2's float8 all-gather, its FP8
    linear weights at 1 byte and the rest (norms) at 16 bits (:mod:`simulator.workload.fp8`)."""
    pbytes = sync_dtype(workload.dtype, layout.strategy).param_bytes
    if not layout.strategy.fp8_all_gather:
        return cc.layer_params * pbytes
    linear = fp8_linear_weights(workload, layout.tp)
    return linear * FP8_BYTES + (cc.layer_params - linear) * pbytes
