"""In-switch reduction all-reduce (NVLink SHARP, "NVLS"), on one NVSwitch node.

Mechanism (NVIDIA, NCCL 2.17 NVLS): GPU ``i`` issues multimem load-reduce for its slice ``n/p``:
the switch reads slice ``i`` from all ``p`` GPUs and returns the sum; GPU ``i`` then multicast-stores
the summed slice, which the switch writes to every GPU. Per GPU port: out ``n`` (its share of every
slice) + ``n/p`` (the multicast), in ``n/p`` + ``n``. So

    T = call(nvls) + h·α + n·(1 + 1/p) / (B·NVLS_EFFICIENCY)          (no γ: the switch adds)

with ``h`` = 2 switch traversals (load-reduce, multicast store) on the links' own α, and ``h`` = 1
under an NCCL protocol: NCCL's tuner charges its NVLS ``hwLat`` row once per call on one node
(``ncclTopoTuneModel``: ``latencies[coll][NVLS][p] = intraLat``, plus ``interLat`` only across
nodes), so the row is the whole in-node operation's latency, not a per-traversal one
[src: nccl-tuning-2.20]. 2 H100s, 128 B: 25 µs (was 2 × 25 = 50 µs, twice what NCCL's own model says);
measured with CUDA graphs about 6 µs [src: nccl-1259]: the tuner's figure is not a measurement
(``tests/test_collectives_published.py`` keeps that row as a strict expected failure).

against the ring's ``2(p−1)/p·n/B``: 1.56× less time for 8 GPUs. Against measurements, with ``B`` the
dgx-h100 preset's port bandwidth (450 GB/s × link efficiency 0.82 = 369 GB/s) and NVLS_EFFICIENCY:
busbw = ``2(p−1)/p · B·0.85 / (1 + 1/p)`` = 488 GB/s for 8 GPUs (486 at 4 GiB, with its 2α), against
480 measured with NVLS on 8 H100 [src: nccl-1455, nccl-tests-212, nccl-tests-309]: +1 %. Across
nodes (NVLS-Tree, :mod:`simulator.collectives.nvls_tree`), model at 4 GiB vs nccl-tests on H100 with
8 × NDR per node [src: nccl-tests-309]: 2 nodes 521 vs 470 GB/s (+11 %), 4 nodes 371 vs 365.8 (+1 %);
``notebooks/collective_algorithms.ipynb`` recomputes these. (Earlier text here said "optimistic by
~25 %": that was for raw 450 GB/s ports, 595 GB/s, before the preset's 0.82 link efficiency.)

Available only when ``cluster.in_switch_reduction``, the node's fabric is switched, and the group
sits on one node (across nodes: NVLS-Tree).

Schedule: point-to-point transfers cannot express the switch's arithmetic, so :meth:`transfers`
gives the data-equivalent two-shot exchange (direct reduce-scatter, then direct all-gather).
Replaying it times that two-shot exchange, not NVLS: the one algorithm whose replay differs from
its closed form by design.
"""

from __future__ import annotations

from simulator.cluster.spec import Fabric
from simulator.collectives.algorithm import Algorithm
from simulator.collectives.base import Op, Transfer
from simulator.collectives.cost import Env, Group
from simulator.collectives.direct import Direct

NVLS_EFFICIENCY = 0.85
"""Fraction of the port bandwidth NVLS achieves on Hopper (NCCL ``src/graph/tuning.cc`` nvlsEfficiency)
[src: nccl-tuning]."""


class Nvls(Algorithm):
    """NVLink SHARP all-reduce inside one switched node."""

    name = "nvls"
    family = "nvls"
    schedule_times_it = False  # the switch reduces; the schedule only reproduces the data
    ops = frozenset({Op.ALL_REDUCE})

    def supports_group(self, group: Group, op: Op) -> bool:
        cluster = group.cluster
        return (cluster.in_switch_reduction and cluster.node.fabric is Fabric.SWITCHED
                and len(group.nodes) == 1)

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        paths = [env.path(group.ranks[0], r) for r in group.ranks[1:]]
        alpha = max(env.latency_s(p) for p in paths)
        bw = min(env.bw_Bps(h) for p in paths for h in p.hops)
        p = group.p
        return self.latency_hops(env) * alpha + nbytes * (1 + 1 / p) / (bw * NVLS_EFFICIENCY)

    @staticmethod
    def latency_hops(env: Env) -> int:
        """Latencies a call pays: 2 switch traversals on the links' own α; 1 under a protocol, whose
        NVLS hop latency is NCCL's whole-operation figure (``tuning.cc``: ``latency = intraLat``)."""
        return 2 if env.protocol is None else 1

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        direct = Direct()
        scatter = direct.transfers(group, Op.REDUCE_SCATTER, nbytes, root)
        gather = direct.transfers(group, Op.ALL_GATHER, nbytes, root)
        return scatter + [Transfer(step=1, src=t.src, dst=t.dst, offset=t.offset, nbytes=t.nbytes) for t in gather]
