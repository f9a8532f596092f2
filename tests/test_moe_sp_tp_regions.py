"""Sequence parallelism in MoE blocks with ep > 1: Megatron-Core's alltoall dispatcher works on the sequence
shard and gathers / scatters the dispatched copies over tp itself (permute, all-to-all over ep, all-gather over
tp, experts, reduce-scatter over tp, all-to-all back [src: megatron-core]), so such a block has the attention's
tp region only; shared experts keep a dense MLP region of their own, and ep 1 runs the MoE layer as one."""

from __future__ import annotations

import pytest

from simulator.cluster.io import load_cluster
from simulator.collectives.base import Op
from simulator.compile import compile_step
from simulator.strategy.flat import strategy_from_flat
from simulator.work import CommKind
from simulator.workload import get_preset

H100 = load_cluster("dgx-h100")


def _tp_gathers(model, **keys) -> tuple[int, int, int]:
    """(tp all-gathers in forward, in backward, the ep kind's tp all-gathers in forward) of stage 0's chunk."""
    s = strategy_from_flat(dict(global_batch=8, tp=2, sequence_parallel=True, framework="megatron", **keys))
    (chunk,) = compile_step(H100, model, s, memory=False).stages[0].chunks
    count = lambda calls, kind: sum(c.kind is kind and c.op is Op.ALL_GATHER for c in calls)  # noqa: E731
    return count(chunk.tp_fwd, CommKind.TP), count(chunk.tp_bwd, CommKind.TP), count(chunk.tp_fwd, CommKind.EP)


@pytest.mark.parametrize("name, shared", [("mixtral-8x7b", False), ("qwen1.5-moe-a2.7b", True)])
def test_the_dispatcher_replaces_the_mlp_region(name, shared):
    model = get_preset(name).with_seq(1024)
    blocks = model.layer_count
    fwd1, bwd1, ep1 = _tp_gathers(model, ep=1)
    fwd2, bwd2, ep2 = _tp_gathers(model, ep=2)
    assert (fwd1, ep1) == (2 * blocks + 1, 0)          # attention + MoE layer per block, + the head's gather
    assert ep2 == blocks                               # the dispatched copies' gather, once per block
    assert fwd2 == (2 * blocks + 1 if shared else blocks + 1)  # the shared experts keep their own region
    assert bwd2 == (2 * blocks if shared else blocks) and bwd1 == 2 * blocks
