"""NVLS-Tree all-reduce across nodes: NVLink SHARP inside each node, a tree over the nodes (NCCL 2.18+).

Mechanism (NCCL's ``NVLS_TREE`` algorithm): inside each node the GPUs reduce through the NVSwitch
(multimem load-reduce, as :mod:`simulator.collectives.nvls`), each GPU heading ``1/g`` of the
buffer; each head sends its slice through its own NIC into a tree over the nodes, and the result
comes back down and is multicast to the node's GPUs through the switch. The intra-node and the
network parts run at once, chunk by chunk, so the slower of the two sets the bandwidth, as
NCCL's tuner models it: ``bw = min(bwIntra, nNodes ≤ 2 ? bwInter : bwInter / 2)`` (``tuning.cc``,
``NCCL_ALGO_NVLS_TREE``) [src: nccl-tuning-2.20]:

    intra_s = n·(1 + 1/g) / (B_intra·NVLS_EFFICIENCY)                 (nvls.py: per GPU port)
    inter_s = f·(n/C) / B_nic,   f = 1 for N ≤ 2 nodes, 2 beyond        (C NICs per node, each 1/C)
    T = call(nvls_tree) + α_nvls + 2·⌊log2 N⌋·α_net + max(intra_s, inter_s)

``f = 2`` beyond two nodes: an interior node of a binary tree exchanges its slice with two children
and a parent (NCCL halves ``bwInter``). The latency is NCCL's ``intraLat + 2·log2(nNodes)·interLat``
with the NVLS-Tree row of ``hwLat`` (Simple only: NVLink 23 µs, network 14 µs, ``baseLat`` 0), the
2.20-era table the published measurements below ran under. γ: none (the switch reduces in the node;
the heads' additions across nodes are in the copy kernels, as for the tree).

Published (``tests/test_collectives_published.py``): 2 × 8 H100 over 8 × NDR, busbw 470 GB/s at
8 GiB [src: nccl-tests-309]; 2 × 8 H20 over NDR, NVLSTree forced, 46–48 µs from 4 B to 1 KB
[src: nccl-1244].

Available when ``cluster.in_switch_reduction``, the node fabric is switched, and the group spans
2+ nodes with the same number (2 or more) of its GPUs on each. Schedule: the data-equivalent
two-shot exchange of :mod:`simulator.collectives.nvls` (the switch's arithmetic is not a
point-to-point transfer), so engines charge the closed form.
"""

from __future__ import annotations

import math

from simulator.cluster.spec import Fabric
from simulator.collectives.algorithm import Algorithm
from simulator.collectives.base import Op, Transfer
from simulator.collectives.cost import Env, Group
from simulator.collectives.nvls import NVLS_EFFICIENCY, Nvls


class NvlsTree(Algorithm):
    """NVLink SHARP inside each node plus a tree over the nodes (all-reduce only)."""

    name = "nvls_tree"
    family = "nvls_tree"
    schedule_times_it = False  # the switch reduces; the schedule only reproduces the data
    ops = frozenset({Op.ALL_REDUCE})

    def supports_group(self, group: Group, op: Op) -> bool:
        cluster = group.cluster
        sizes = {len(node) for node in group.nodes}
        return (cluster.in_switch_reduction and cluster.node.fabric is Fabric.SWITCHED
                and len(group.nodes) >= 2 and len(sizes) == 1 and min(sizes) >= 2)

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        ranks, nodes = group.ranks, group.nodes
        g, n_nodes = len(nodes[0]), len(nodes)
        intra = env.path(ranks[nodes[0][0]], ranks[nodes[0][1]])
        inter = env.path(ranks[nodes[0][0]], ranks[nodes[1][0]], group.nic(nodes[0][0], 0))
        intra_bw = min(env.bw_Bps(h) for h in intra.hops)
        nic_bw = min(env.bw_Bps(h) for h in inter.hops)
        intra_s = nbytes * (1 + 1 / g) / (intra_bw * NVLS_EFFICIENCY)
        inter_s = (1 if n_nodes <= 2 else 2) * nbytes / group.channels / nic_bw
        latency = env.latency_s(intra) + 2 * int(math.log2(n_nodes)) * env.latency_s(inter)
        return latency + max(intra_s, inter_s)

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        return Nvls().transfers(group, op, nbytes, root)
