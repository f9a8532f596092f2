"""Placement orders as a search dimension: which rank orders differ in which groups cross nodes.

A :class:`~simulator.strategy.PlacementOrder` lists the parallel dimensions innermost first; ranks
fill a node before the next, so the order decides which groups (tp, pp, dp — with cp and ep inside
dp, :mod:`simulator.strategy.layout`) share a node and which span several. The compiled step
costs each call on its representative group (the one holding dp 0, tp 0 of a stage,
:mod:`simulator.compile.step`), so two orders that give those groups the same *shape* cost the
same. The shape of a group here is (nodes it spans, its ranks in its first node); on a node whose
GPUs are interchangeable — a switched fabric (NVSwitch), one NIC per GPU or one per node, no node
unlike the others — that is all that matters, otherwise also which local GPUs it holds.

The search (:mod:`planner.space`) tries, per candidate, one order per distinct signature (the
shapes of its tp, pp, dp, cp and ep groups), the first of :class:`PlacementOrder` in declaration
order (the default ``tp-pp-dp`` first). Orders that put a tp group across nodes while another
keeps it in one are left to the second phase (:mod:`planner.variants`), as tp degrees above a node
are to ``--allow-cross-node-tp``: tensor parallelism communicates in every layer, so such an order
rarely wins, but ``--explain`` can then say what it costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.strategy import PlacementOrder

GROUPS = ("tp", "pp", "dp", "cp", "ep")
"""The groups whose shapes make an order's signature."""


@dataclass(frozen=True)
class NodeShape:
    """What the placement signature needs of the cluster."""

    gpus_per_node: int
    uniform: bool = True
    """GPUs of a node are interchangeable (module docstring): a group's shape is its node count and
    ranks per node; otherwise also its local GPU indices."""

    @classmethod
    def of(cls, cluster) -> "NodeShape":
        from simulator.cluster.kinds import Fabric

        node = cluster.node
        uniform = (node.fabric is Fabric.SWITCHED and node.nics_per_node in (1, node.gpus_per_node)
                   and not cluster.varies)
        return cls(node.gpus_per_node, uniform)


def _rank(order: PlacementOrder, sizes: dict[str, int], coord: dict[str, int]) -> int:
    """``ParallelLayout.rank_of`` on bare sizes: Σ coord·stride, innermost first."""
    rank, stride = 0, 1
    for name in order.dims:
        rank += coord[name] * stride
        stride *= sizes[name]
    return rank


def group_ranks(order: PlacementOrder, dp: int, tp: int, pp: int, cp: int = 1, ep: int = 1) -> dict[str, tuple]:
    """The ranks of rank 0's tp, pp, dp (dp·cp ranks), cp and ep groups under ``order``."""
    sizes = {"dp": dp * cp, "pp": pp, "tp": tp}
    zero = {"dp": 0, "pp": 0, "tp": 0}
    along = lambda dim, n, step=1: tuple(_rank(order, sizes, zero | {dim: i * step}) for i in range(n))  # noqa: E731
    return {"tp": along("tp", tp), "pp": along("pp", pp), "dp": along("dp", dp * cp), "cp": along("dp", cp),
            "ep": along("dp", ep, cp)}  # ep consecutive replicas at one cp rank (ParallelLayout.ep_group)


def _shape(ranks: tuple[int, ...], node: NodeShape) -> tuple:
    g = node.gpus_per_node
    nodes = sorted({r // g for r in ranks})
    first = tuple(sorted(r % g for r in ranks if r // g == nodes[0]))
    return len(nodes), len(first) if node.uniform else first


def signature(order: PlacementOrder, node: NodeShape, dp: int, tp: int, pp: int, cp: int = 1, ep: int = 1) -> tuple:
    """The shapes of rank 0's groups under ``order``: orders with equal signatures cost the same."""
    groups = group_ranks(order, dp, tp, pp, cp, ep)
    return tuple(_shape(groups[name], node) for name in GROUPS)


def spans(order: PlacementOrder, gpus_per_node: int, dp: int, tp: int, pp: int, cp: int = 1,
          ep: int = 1) -> dict[str, int]:
    """Nodes each of rank 0's groups (of :data:`GROUPS`) spans under ``order``."""
    groups = group_ranks(order, dp, tp, pp, cp, ep)
    return {name: len({r // gpus_per_node for r in groups[name]}) for name in GROUPS}


def crossing(order: PlacementOrder, gpus_per_node: int, dp: int, tp: int, pp: int, cp: int = 1,
             ep: int = 1) -> tuple[str, ...]:
    """The groups (of :data:`GROUPS`) that span several nodes under ``order``."""
    return tuple(name for name, n in spans(order, gpus_per_node, dp, tp, pp, cp, ep).items() if n > 1)


def distinct_orders(node: NodeShape, dp: int, tp: int, pp: int, cp: int = 1, ep: int = 1) -> tuple[PlacementOrder, ...]:
    """One order per distinct signature, the first in declaration order (``tp-pp-dp`` first)."""
    seen: dict[tuple, PlacementOrder] = {}
    for order in PlacementOrder:
        seen.setdefault(signature(order, node, dp, tp, pp, cp, ep), order)
    return tuple(seen.values())


def split_orders(node: NodeShape, dp: int, tp: int, pp: int, cp: int = 1, ep: int = 1,
                 cross_node_tp: bool = False) -> tuple[tuple[PlacementOrder, ...], tuple[PlacementOrder, ...]]:
    """(orders the first phase searches, orders left to the second phase): the distinct orders, those
    that put tp across nodes while another keeps it in one apart unless ``cross_node_tp``."""
    orders = distinct_orders(node, dp, tp, pp, cp, ep)
    g = node.gpus_per_node
    in_node = tuple(o for o in orders if "tp" not in crossing(o, g, dp, tp, pp, cp, ep))
    if cross_node_tp or not in_node:
        return orders, ()
    return in_node, tuple(o for o in orders if o not in in_node)
