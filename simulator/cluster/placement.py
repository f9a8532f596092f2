"""Jobs on a shared cluster: which of its nodes each job runs on, and the cluster as one job sees it.

A job's ranks fill its own nodes in order (torchrun's order), so a job of ``n`` nodes is the cluster
seen through a node map: :class:`PlacedCluster` is the shared cluster with ``nodes = n`` whose
:meth:`~PlacedCluster.place` sends the job's node ``i`` to the cluster's node ``host_nodes[i]``. Every
topology question (paths, link resources, leaf crossings) is then asked of the real nodes, so two jobs'
flows name the same links where they cross the same ones, and a job split over two leaf groups pays
for crossing the spine even when alone.

Placement policies (:class:`PlacementPolicy`), jobs taken in the order given:

- ``packed``: each job on the next consecutive nodes, moved to the next leaf-group boundary rather
  than straddle two groups when it fits in one (a topology-aware scheduler's choice): a job of at most
  a leaf group's nodes sits under one leaf, and jobs of whole leaf groups hold disjoint leaves.
- ``scattered``: the nodes ordered leaf by leaf within each slot (node ``slot`` of leaf 0, of leaf 1,
  ..., then the next slot), each job taking the next ones in that order: a job spans as many leaf
  groups as it can and a leaf group holds several jobs (a fragmented cluster).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.cluster.spec import Cluster
from simulator.enum_kind import Kind
from simulator.errors import SpecError


class PlacementPolicy(Kind):
    """How jobs that do not list their nodes are put on the cluster's nodes."""

    PACKED = "packed"
    """Consecutive nodes, never straddling a leaf group a job fits in: jobs under as few leaves as they can."""
    SCATTERED = "scattered"
    """Each job's nodes taken one per leaf group in turn: jobs spread over, and mixed under, the leaves."""


@dataclass(frozen=True, kw_only=True)
class PlacedCluster(Cluster):
    """One job's view of a shared cluster: ``nodes`` of its own, at the cluster's ``host_nodes``."""

    host_nodes: tuple[int, ...]
    """Cluster node index of each of the job's nodes."""
    cluster_nodes: int
    """Nodes of the shared cluster."""

    def __post_init__(self) -> None:
        super().__post_init__()  # the facts are checked against cluster_nodes (fabric_nodes)
        if len(self.host_nodes) != self.nodes:
            raise SpecError("nodes", f"a job of {self.nodes} nodes needs {self.nodes} host nodes, "
                                     f"got {len(self.host_nodes)}")
        check_nodes("nodes", self.host_nodes, self.cluster_nodes)

    @property
    def fabric_nodes(self) -> int:
        return self.cluster_nodes

    def place(self, rank: int) -> tuple[int, int]:
        """Rank → (cluster node, local GPU index)."""
        node, local = super().place(rank)
        return self.host_nodes[node], local


def check_nodes(field: str, nodes: tuple[int, ...], cluster_nodes: int) -> None:
    """``nodes`` must be distinct node indices of a cluster of ``cluster_nodes`` nodes."""
    for n in nodes:
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < cluster_nodes:
            raise SpecError(field, f"node {n!r} is not a node index of the cluster (0..{cluster_nodes - 1})")
    if len(set(nodes)) != len(nodes):
        raise SpecError(field, f"lists a node twice: {list(nodes)}")


def placed(cluster: Cluster, host_nodes: tuple[int, ...]) -> PlacedCluster:
    """``cluster`` as a job on ``host_nodes`` sees it."""
    fields = {f: getattr(cluster, f) for f in cluster.__dataclass_fields__ if f not in ("host_nodes", "cluster_nodes")}
    fields.update(nodes=len(host_nodes))
    return PlacedCluster(**fields, host_nodes=tuple(host_nodes), cluster_nodes=cluster.nodes)


def place_jobs(cluster: Cluster, node_counts: list[int], policy: PlacementPolicy) -> list[tuple[int, ...]]:
    """Host nodes of jobs of ``node_counts`` nodes under ``policy`` (see the module docstring)."""
    total = sum(node_counts)
    if total > cluster.nodes:
        raise SpecError("nodes", f"the jobs need {total} nodes, the cluster has {cluster.nodes}")
    per_leaf = _nodes_per_leaf(cluster)
    if policy is PlacementPolicy.PACKED:
        out, start = [], 0
        for n in node_counts:
            if n <= per_leaf and start % per_leaf and start % per_leaf + n > per_leaf:
                start += per_leaf - start % per_leaf  # it fits under one leaf: start at the next one
            if start + n > cluster.nodes:
                raise SpecError("job_placement", f"packed: a job of {n} nodes does not fit from node {start} "
                                f"(a job never straddles a leaf group of {per_leaf} nodes it fits in; the cluster "
                                f"has {cluster.nodes}); use scattered, fewer jobs or more nodes")
            out.append(tuple(range(start, start + n)))
            start += n
        return out
    leaves = -(-cluster.nodes // per_leaf)
    order = [leaf * per_leaf + slot for slot in range(per_leaf) for leaf in range(leaves)
             if leaf * per_leaf + slot < cluster.nodes]
    out, start = [], 0
    for n in node_counts:
        out.append(tuple(sorted(order[start:start + n])))
        start += n
    return out


def _nodes_per_leaf(cluster: Cluster) -> int:
    net = cluster.network
    per_leaf = net.nodes_per_leaf if net is not None else 0
    return int(per_leaf) if per_leaf else cluster.nodes
