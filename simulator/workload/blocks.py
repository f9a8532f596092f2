"""One transformer block's operations on one rank, whatever its kind: the dense block of
:func:`simulator.workload.ops.layer_work`, with Multi-head Latent Attention in place of its attention
projections (:mod:`simulator.workload.mla_ops`) and, in a mixture-of-experts layer, the router and
experts in place of its MLP (:mod:`simulator.workload.moe_ops`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.attention_efficiency import AttentionBackend
from simulator.workload.context import NO_CONTEXT_SPLIT, ContextSplit
from simulator.workload.kinds import KernelFusion
from simulator.workload.mla_ops import mla_layer_work
from simulator.workload.moe_ops import with_experts
from simulator.workload.ops import OpWork, layer_work

if TYPE_CHECKING:
    from simulator.workload.transformer import TransformerSpec

__all__ = ["block_work"]


def block_work(spec: TransformerSpec, micro_batch: int, seq: int | None = None, tp: int = 1, *,
               moe_layer: bool = False, ep: int = 1, routing_skew: float = 1.0, flash_attention: bool = True,
               sequence_parallel: bool = False, fusion: KernelFusion = KernelFusion.EAGER,
               context: ContextSplit = NO_CONTEXT_SPLIT,
               attention_backend: AttentionBackend = AttentionBackend.FLASH_ATTENTION_2) -> list[OpWork]:
    """The operations of one block (a MoE block when ``moe_layer`` and the spec has experts). Under
    context parallelism a rank routes its own ``b·s/cp`` tokens; latent attention with cp > 1 is
    refused before this (:func:`simulator.strategy.rules.context_problem`)."""
    s = spec.seq_len if seq is None else seq
    work = layer_work(spec, micro_batch, s, tp, flash_attention=flash_attention,
                      sequence_parallel=sequence_parallel, fusion=fusion, context=context,
                      attention_backend=attention_backend)
    if spec.mla is not None:
        work = mla_layer_work(spec, work, micro_batch, s, tp)
    if moe_layer and spec.moe is not None:
        work = with_experts(spec, work, micro_batch * s // context.degree, tp, ep, routing_skew)
    return work
