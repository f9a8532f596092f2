"""Cluster-level facts that make nodes differ: other GPU generations, degraded NICs, slow GPUs.

A cluster is ``nodes`` nodes of one :class:`~simulator.cluster.interconnect.NodeSpec`; these facts say where
it is not uniform, as a site would record them (not per run, like a straggler model):

- :class:`NodeGroup`: nodes that carry another device (8 nodes of H100, then 8 of A100). The node's
  links are the cluster's; only the accelerator differs. A rank's compute is timed on its own
  device (:mod:`simulator.compile.device_factors`).
- :class:`DegradedNic`: one NIC of one node runs at a fraction of its bandwidth (a port trained
  down to a lower rate, a flapping link); every path through it sees the reduced link.
- :class:`SlowGpu`: one GPU delivers a fraction of its device's throughput (thermal or power
  throttling); its compute takes ``1 / speed_fraction`` as long.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.errors import SpecError

if TYPE_CHECKING:
    from simulator.cluster.spec import Device


def _fraction(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SpecError(field, f"must be a number in (0, 1], got {value!r}")


def _index(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(field, f"must be a non-negative integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class NodeGroup:
    """Nodes ``first_node`` .. ``first_node + nodes − 1`` carry ``device`` instead of the cluster's."""

    first_node: int
    nodes: int
    device: "Device"

    def __post_init__(self) -> None:
        _index("node_groups.first_node", self.first_node)
        _index("node_groups.nodes", self.nodes)
        if self.nodes < 1:
            raise SpecError("node_groups.nodes", f"must be at least 1, got {self.nodes}")

    def holds(self, node: int) -> bool:
        return self.first_node <= node < self.first_node + self.nodes


@dataclass(frozen=True, kw_only=True)
class DegradedNic:
    """NIC ``nic`` of node ``node`` runs at ``bw_fraction`` of the network link's bandwidth."""

    node: int
    nic: int
    bw_fraction: float

    def __post_init__(self) -> None:
        _index("degraded.nics.node", self.node)
        _index("degraded.nics.nic", self.nic)
        _fraction("degraded.nics.bw_fraction", self.bw_fraction)


@dataclass(frozen=True, kw_only=True)
class SlowGpu:
    """GPU ``gpu`` of node ``node`` delivers ``speed_fraction`` of its device's throughput."""

    node: int
    gpu: int
    speed_fraction: float

    def __post_init__(self) -> None:
        _index("degraded.gpus.node", self.node)
        _index("degraded.gpus.gpu", self.gpu)
        _fraction("degraded.gpus.speed_fraction", self.speed_fraction)


def check_facts(groups, nics, gpus, nodes: int, gpus_per_node: int, nics_per_node: int) -> None:
    """Every fact names a node of the cluster (and a NIC / GPU of the node); groups do not overlap;
    a NIC or GPU is listed once."""
    taken: set[int] = set()
    for i, g in enumerate(groups):
        if g.first_node + g.nodes > nodes:
            raise SpecError(f"node_groups[{i}]", f"nodes {g.first_node}..{g.first_node + g.nodes - 1} go past the "
                                                 f"cluster's {nodes} nodes")
        span = set(range(g.first_node, g.first_node + g.nodes))
        if span & taken:
            raise SpecError(f"node_groups[{i}]", f"overlaps another group at node {min(span & taken)}")
        taken |= span
    for field, facts, attr, count in (("degraded.nics", nics, "nic", nics_per_node),
                                      ("degraded.gpus", gpus, "gpu", gpus_per_node)):
        seen = set()
        for i, f in enumerate(facts):
            if f.node >= nodes:
                raise SpecError(f"{field}[{i}].node", f"node {f.node} is not one of the cluster's {nodes}")
            if getattr(f, attr) >= count:
                raise SpecError(f"{field}[{i}].{attr}", f"{attr} {getattr(f, attr)} does not exist; a node has {count}")
            key = (f.node, getattr(f, attr))
            if key in seen:
                raise SpecError(f"{field}[{i}]", f"node {f.node} {attr} {key[1]} is listed twice")
            seen.add(key)


def clipped(groups, nics, gpus, nodes: int) -> tuple[tuple, tuple, tuple]:
    """The facts that concern nodes ``0 .. nodes − 1`` (a cluster cut to its first ``nodes``)."""
    kept = tuple(NodeGroup(first_node=g.first_node, nodes=min(g.nodes, nodes - g.first_node), device=g.device)
                 for g in groups if g.first_node < nodes)
    return kept, tuple(f for f in nics if f.node < nodes), tuple(f for f in gpus if f.node < nodes)
