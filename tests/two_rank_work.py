"""Hand-made StepWork on two ranks of a hand-built cluster, for hand-worked engine tests.

The cluster is ``switched(nodes=2, gpus=1)`` of :mod:`test_collectives_helpers`: one GPU per node,
one 25 GB/s NIC per node with 5 µs latency, HBM 2000 GB/s. A pipeline p2p or a two-rank ring
between the nodes therefore crosses one NIC each way, and its time can be worked out by hand:

- p2p of ``n`` bytes (one flow, :mod:`simulator.engine.replay_work`): ``α + n / bw``;
- ring all-reduce of ``n`` bytes on 2 ranks (Patarasuk & Yuan 2009, ``2(p−1)`` steps of ``n/p``):
  ``2·(α + (n/2)/bw)``; the reduction (3·(n/2) bytes of HBM traffic at 2000 GB/s) overlaps the
  pipelined ring's transfer on this IDEAL profile, and HBM/3 outruns the link, so no γ shows.
"""

from __future__ import annotations

from simulator.collectives.base import Op
from simulator.strategy import Strategy, build_layout
from simulator.work import ChunkWork, CollectiveAlgorithm, CommCall, CommKind, StageWork, StepWork, Transport
from simulator.workload.presets import get_preset
from test_collectives_helpers import switched

ALPHA_S = 5e-6
"""NIC latency of ``switched`` (its ``NIC`` link: latency_us=5.0)."""
BW_BPS = 25e9
"""NIC bandwidth of ``switched`` (its ``NIC`` link: bw_GBps=25)."""
HBM_BPS = 2000e9
"""HBM bandwidth of ``switched``'s device (``DEVICE``: hbm_bw_GBps=2000)."""


def cluster():
    return switched(nodes=2, gpus=1)


def p2p_s(nbytes: int) -> float:
    """One flow across the NIC: α + n/bw."""
    return ALPHA_S + nbytes / BW_BPS


def ring2_all_reduce_s(nbytes: int) -> float:
    """Ring all-reduce on 2 ranks: 2 steps of α + (n/2)/bw; the γ overlaps (module docstring)."""
    assert 3 / HBM_BPS < 1 / BW_BPS  # the reduction outruns the link: Env.gamma_s exposes nothing
    return 2 * (ALPHA_S + nbytes / 2 / BW_BPS)


def p2p_call(src: int, dst: int, nbytes: int, time_s: float | None = None) -> CommCall:
    return CommCall(kind=CommKind.PP, op=Op.SEND_RECV, group=(src, dst), nbytes=nbytes, transport=Transport.P2P,
                    time_s=p2p_s(nbytes) if time_s is None else time_s)


def bucket_call(nbytes: int, time_s: float | None = None) -> CommCall:
    return CommCall(kind=CommKind.DP, op=Op.ALL_REDUCE, group=(0, 1), nbytes=nbytes, transport=Transport.COLLECTIVE,
                    algorithm=CollectiveAlgorithm.RING, time_s=ring2_all_reduce_s(nbytes) if time_s is None else time_s)


def pipeline_work(strategy: Strategy, fwd_s: float, bwd_s: float, p2p_bytes: int, schedule=None,
                  p2p_time_s: float | None = None) -> StepWork:
    """pp = 2 over the two nodes, one chunk per rank with the given times; ``schedule`` replaces the layout's."""
    cl = cluster()
    lay = build_layout(strategy, cl, get_preset("gpt3-125m"))
    assert (lay.pp, lay.dp, lay.tp, lay.v) == (2, 1, 1, 1)
    fwd = p2p_call(0, 1, p2p_bytes, p2p_time_s)
    bwd = p2p_call(1, 0, p2p_bytes, p2p_time_s)
    stages = (StageWork(stage=0, rank=0, chunks=(ChunkWork(chunk=0, layers=6, fwd_s=fwd_s, bwd_s=bwd_s,
                                                           p2p_fwd=fwd),)),
              StageWork(stage=1, rank=1, chunks=(ChunkWork(chunk=1, layers=6, fwd_s=fwd_s, bwd_s=bwd_s,
                                                           p2p_bwd=bwd),)))
    return _step(strategy, lay, stages, schedule)


def data_parallel_work(strategy: Strategy, fwd_s: float, bwd_s: float, buckets: tuple[CommCall, ...],
                       fractions: tuple[float, ...], optimizer_s: float = 0.0) -> StepWork:
    """dp = 2 over the two nodes, one chunk, gradient buckets ready at ``fractions`` of the backward."""
    cl = cluster()
    lay = build_layout(strategy, cl, get_preset("gpt3-125m"))
    assert (lay.pp, lay.dp, lay.tp) == (1, 2, 1)
    stage = StageWork(stage=0, rank=0, chunks=(ChunkWork(chunk=0, layers=12, fwd_s=fwd_s, bwd_s=bwd_s),),
                      grad_sync=buckets, grad_ready_fraction=fractions, optimizer_s=optimizer_s)
    return _step(strategy, lay, (stage,), None)


def _step(strategy, lay, stages, schedule) -> StepWork:
    return StepWork(stages=stages, strategy=strategy, layout=lay, schedule=schedule or lay.schedule,
                    micro_batches=lay.micro_batches, tokens_per_step=strategy.global_batch * 2048,
                    model_flops_per_step=1.0, hardware_flops_per_step=1.0, world_size=lay.world_size,
                    peak_flops_per_gpu=100e12)
