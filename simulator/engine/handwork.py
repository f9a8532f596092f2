"""A small, explicit StepWork builder for tests and the benchmark (until ``compile_step`` lands).

Per pipeline stage: the same forward/backward time per chunk, optional TP all-reduces per layer,
p2p of a given size, and DP gradient buckets all-reduced among the stage's dp group, with each
call's ``time_s`` from the collectives registry (the cost model the compiler uses) and
``concurrent_groups`` set as the compiler would (every other replica running the same call).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op
from simulator.collectives.registry import estimate
from simulator.strategy import Strategy, build_layout
from simulator.work import ChunkWork, CommCall, CommKind, StageWork, StepWork


@dataclass(frozen=True, kw_only=True)
class HandSpec:
    """Times and sizes of a hand-made step (all per micro-batch, per chunk)."""

    fwd_s: float
    bwd_s: float
    tp_calls_per_layer: int = 0
    """TP all-reduces per layer in forward and again in backward (Megatron: 2 each)."""
    tp_bytes: int = 0
    p2p_bytes: int = 0
    p2p_time_s: float | None = None
    """Override the p2p call's time (None: one flow alone, α + bytes/bw)."""
    bucket_bytes: tuple[int, ...] = ()
    ready_fraction: tuple[float, ...] | None = None
    dp_algorithm: str = "ring"
    optimizer_s: float = 0.0
    data_s: float = 0.0


def _call(cluster: Cluster, kind: CommKind, op: Op, group, nbytes: int, algorithm: str, groups: int) -> CommCall:
    t = estimate(cluster, group, op, nbytes, algorithm).time_s
    return CommCall(kind=kind, op=op, group=tuple(group), nbytes=nbytes, algorithm=algorithm, time_s=t,
                    concurrent_groups=groups)


def _p2p(cluster: Cluster, src: int, dst: int, spec: HandSpec, groups: int) -> CommCall | None:
    if spec.p2p_bytes <= 0:
        return None
    from simulator.cluster.topology import path
    p = path(cluster, src, dst)
    t = spec.p2p_time_s if spec.p2p_time_s is not None else p.latency_s + spec.p2p_bytes / p.bottleneck_Bps
    return CommCall(kind=CommKind.PP, op=Op.SEND_RECV, group=(src, dst), nbytes=spec.p2p_bytes, algorithm="p2p",
                    time_s=t, concurrent_groups=groups)


def hand_work(cluster: Cluster, strategy: Strategy, workload, spec: HandSpec) -> StepWork:
    """StepWork of ``strategy`` with the hand-given times (see :class:`HandSpec`)."""
    lay = build_layout(strategy, cluster, workload)
    p, v = lay.pp, lay.v
    stages = []
    for r in range(p):
        rank = lay.rank_of(dp=0, pp=r, tp=0)
        tp_group = next(g for g in lay.tp_groups if rank in g)
        dp_group = next(g for g in lay.dp_groups if rank in g)
        chunks = []
        for c in range(v):
            s = c * p + r
            layers = lay.layers_per_stage[s]
            tp = ()
            if lay.tp > 1 and spec.tp_calls_per_layer:
                one = _call(cluster, CommKind.TP, Op.ALL_REDUCE, tp_group, spec.tp_bytes, "ring", lay.dp)
                tp = (one,) * (layers * spec.tp_calls_per_layer)
            nxt = lay.rank_of(dp=0, pp=(s + 1) % p, tp=0)
            prv = lay.rank_of(dp=0, pp=(s - 1) % p, tp=0)
            chunks.append(ChunkWork(
                chunk=s, layers=layers, fwd_s=spec.fwd_s, bwd_s=spec.bwd_s, tp_fwd=tp, tp_bwd=tp,
                p2p_fwd=_p2p(cluster, rank, nxt, spec, lay.dp * lay.tp) if s < p * v - 1 and p > 1 else None,
                p2p_bwd=_p2p(cluster, rank, prv, spec, lay.dp * lay.tp) if s > 0 and p > 1 else None))
        buckets = tuple(_call(cluster, CommKind.DP, Op.ALL_REDUCE, dp_group, b, spec.dp_algorithm, lay.tp)
                        for b in spec.bucket_bytes) if lay.dp > 1 else ()
        n = len(buckets)
        fractions = spec.ready_fraction or tuple((i + 1) / n for i in range(n))
        stages.append(StageWork(stage=r, rank=rank, chunks=tuple(chunks), grad_sync=buckets,
                                grad_ready_fraction=fractions[:n], optimizer_s=spec.optimizer_s, data_s=spec.data_s))
    tokens = strategy.global_batch * 2048
    return StepWork(stages=tuple(stages), strategy=strategy, layout=lay, schedule=lay.schedule,
                    micro_batches=lay.micro_batches, tokens_per_step=tokens, model_flops_per_step=1e15,
                    hardware_flops_per_step=1e15, world_size=lay.world_size, peak_flops_per_gpu=312e12)
