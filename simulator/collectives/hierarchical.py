"""Two-level (hierarchical) all-reduce, as Horovod's hierarchical all-reduce and NCCL's CollNet chain it.

``g`` GPUs of the group on each of ``N`` nodes (every node must hold the same number):

1. intra-node ring reduce-scatter: local GPU ``l`` ends with the node's sum of slice ``l`` (n/g bytes);
2. inter-node ring all-reduce of slice ``l`` among the ``N`` GPUs with local position ``l`` (one ring
   per local position, all at once, each GPU on its own NIC);
3. intra-node ring all-gather of the ``g`` slices.

Closed form (Thakur et al.'s ring costs per level [src: thakur-2005], the three phases of Horovod's
hierarchical all-reduce [src: horovod-docs]; ``step_intra(b)`` and ``step_inter(b)``
are one ring step of every node's / every local position's ring at ``b`` bytes per message):

    T = 3·call + 2(g−1)·bw_intra(n/g) + 2(N−1)·bw_inter(n/(gN)) + L + γ·((g−1)/g·n + (N−1)/N·n/g)

with ``L`` the latency chain of those steps (cost.py ``steps_time_s``); every step is uniform and
every GPU receives in it, so ``L = 2(g−1)·α_intra + 2(N−1)·α_net``.

≈ ``2((g−1)/g)·n/B_intra + 2((N−1)/N)·(n/g)/B_nic_per_gpu``. It is three library calls, so it pays
the per-call overhead three times.
"""

from __future__ import annotations

from simulator.collectives.algorithm import Algorithm
from simulator.collectives.base import Op, Transfer, split
from simulator.collectives.cost import Env, Flow, Group


def ring_phase(members: list[int], off: int, length: int, first_step: int, reduce: bool) -> list[Transfer]:
    """Ring reduce-scatter (``reduce``) or all-gather of ``[off, off+length)`` among ``members``.

    The range is cut in ``q = len(members)`` slices; member ``i`` owns slice ``i``.
    """
    q = len(members)
    slices = [(off + o, n) for o, n in split(length, q)]
    out = []
    for s in range(q - 1):
        for i in range(q):
            o, n = slices[(i - s - (1 if reduce else 0)) % q]
            out.append(Transfer(step=first_step + s, src=members[i], dst=members[(i + 1) % q], offset=o,
                                nbytes=n, reduce=reduce))
    return out


class Hierarchical(Algorithm):
    """Intra-node reduce-scatter → inter-node all-reduce on 1/g → intra-node all-gather."""

    name = "hierarchical"
    family = "ring"
    pipelined = True
    calls = 3
    ops = frozenset({Op.ALL_REDUCE})

    def supports_group(self, group: Group, op: Op) -> bool:
        return len(group.nodes) > 1 and len({len(x) for x in group.nodes}) == 1

    def comm_time_s(self, env: Env, group: Group, op: Op, nbytes: int, root: int) -> float:
        nodes, ranks = group.nodes, group.ranks
        g, n_nodes = len(nodes[0]), len(nodes)
        intra = [Flow(ranks[x[i]], ranks[x[(i + 1) % g]], nbytes / g) for x in nodes for i in range(g)] if g > 1 else []
        inter = [Flow(ranks[nodes[k][l]], ranks[nodes[(k + 1) % n_nodes][l]], nbytes / (g * n_nodes))
                 for l in range(g) for k in range(n_nodes)]
        return env.steps_time_s([intra] * (g - 1) + [inter] * (2 * (n_nodes - 1)) + [intra] * (g - 1))

    def reduce_bytes(self, group: Group, op: Op, nbytes: int) -> float:
        g, n_nodes = len(group.nodes[0]), len(group.nodes)
        return (g - 1) / g * nbytes + (n_nodes - 1) / n_nodes * nbytes / g

    def transfers(self, group: Group, op: Op, nbytes: int, root: int) -> list[Transfer]:
        nodes = group.nodes
        g, n_nodes = len(nodes[0]), len(nodes)
        slices = split(nbytes, g)
        out = []
        for x in nodes:
            out += ring_phase(list(x), 0, nbytes, 0, reduce=True)
        mid = g - 1
        for l, (off, length) in enumerate(slices):
            column = [x[l] for x in nodes]
            out += ring_phase(column, off, length, mid, reduce=True)
            out += ring_phase(column, off, length, mid + n_nodes - 1, reduce=False)
        last = mid + 2 * (n_nodes - 1)
        for x in nodes:
            out += ring_phase(list(x), 0, nbytes, last, reduce=False)
        return out
