""":func:`~simulator.cluster.topology.renaming` on long lists of links, with numpy arrays.

A data-parallel tree or ring at 1,024 nodes has ~4–8k links, and its replicas on the other GPUs of the same
nodes (other NICs) each ask whether they are the representative's links renamed: the loop in
:func:`~simulator.cluster.topology.renaming` costs a few µs per link there. :func:`renaming_arrays` checks the same
conditions on whole arrays and returns the same :class:`~simulator.cluster.topology.Renaming` (equal dicts of
Python ints), or None in exactly the same cases; ``tests/test_renaming_arrays.py`` compares the two.

The conditions, per link ``(a, b, nic)`` and its moved ``(a2, b2, nic2)``: inside a node on both sides or across
nodes on both; inside: the same local GPUs, each node sent to one node; across: the NICs (a GPU's own where
``nic`` is None) with leaf crossings alike and none crossing under shared leaf links, each (node, NIC) sent to one
(node, NIC); no degraded NIC in the cluster.
"""

from __future__ import annotations

import numpy as np

from simulator.cluster.spec import Cluster, LeafUplinks
from simulator.cluster.topology import Renaming, renaming

VECTOR_MIN_LINKS = 64
"""Below this many links the loop is as fast (building the arrays costs about as much as it saves)."""


def renaming_arrays(cluster: Cluster, links, moved) -> Renaming | None:
    """:func:`~simulator.cluster.topology.renaming` of ``links`` onto ``moved``: the same answer, on arrays where
    the lists are long, the cluster places ranks node by node (no job's view) and it has a network."""
    if (len(links) < VECTOR_MIN_LINKS or len(links) != len(moved) or type(cluster).place is not Cluster.place
            or cluster.network is None or cluster.degraded_nics):
        return renaming(cluster, links, moved)
    a, b = _arrays(links), _arrays(moved)
    if a is None or b is None:
        return renaming(cluster, links, moved)
    gpn = cluster.node.gpus_per_node
    (sn, sl), (dn, dl) = np.divmod(a[0], gpn), np.divmod(a[1], gpn)
    (sn2, sl2), (dn2, dl2) = np.divmod(b[0], gpn), np.divmod(b[1], gpn)
    inside, inside2 = sn == dn, sn2 == dn2
    if not np.array_equal(inside, inside2):
        return None
    if np.any(inside & ((sl != sl2) | (dl != dl2))):
        return None
    nodes = _function(sn[inside], sn2[inside])
    if nodes is None:
        return None
    across = ~inside
    nic_of = np.array([cluster.node.nic_of(g) for g in range(gpn)], dtype=np.int64)
    nics = (_nics(a[2], sl, dl, nic_of, across), _nics(b[2], sl2, dl2, nic_of, across))
    (nic_s, nic_d), (nic_s2, nic_d2) = nics
    crosses = _crosses(cluster, sn[across], dn[across], nic_s, nic_d)
    if not np.array_equal(crosses, _crosses(cluster, sn2[across], dn2[across], nic_s2, nic_d2)):
        return None
    if cluster.network.leaf_uplinks is LeafUplinks.SHARED and np.any(crosses):
        return None
    ports = _ports(np.concatenate((sn[across], dn[across])), np.concatenate((nic_s, nic_d)),
                   np.concatenate((sn2[across], dn2[across])), np.concatenate((nic_s2, nic_d2)))
    return None if ports is None else Renaming(nodes, ports)


_NONE = -(2 ** 62)
"""A NIC given as None (the GPU's own) in the arrays; an explicit negative NIC goes to the loop."""


def _arrays(links) -> np.ndarray | None:
    """``(src, dst, nic)`` rows as a 3 × n int64 array, nic :data:`_NONE` for None; None where a field is not an
    int or a NIC is negative."""
    try:
        flat = [_NONE if x is None else x for link in links for x in link]
        arr = np.array(flat, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return None
    if arr.ndim != 1 or arr.size != 3 * len(links):
        return None
    arr = arr.reshape(-1, 3).T
    if np.any((arr[2] < 0) & (arr[2] != _NONE)) or np.any(arr[:2] == _NONE):
        return None
    return arr


def _nics(nic: np.ndarray, sl: np.ndarray, dl: np.ndarray, nic_of: np.ndarray, across: np.ndarray):
    """The (source, destination) NICs of the links across nodes: each GPU's own where ``nic`` is −1 (None)."""
    nic, sl, dl = nic[across], sl[across], dl[across]
    own = nic == _NONE
    return np.where(own, nic_of[sl], nic), np.where(own, nic_of[dl], nic)


def _crosses(cluster: Cluster, sn, dn, nic_s, nic_d) -> np.ndarray:
    """:func:`~simulator.cluster.fabric_links.crosses_leaf` of each link."""
    net = cluster.network
    out = (nic_s != nic_d) if net.rail_optimized else np.zeros(len(sn), dtype=bool)
    if net.nodes_per_leaf:
        out = out | (sn // net.nodes_per_leaf != dn // net.nodes_per_leaf)
    return out


def _function(keys: np.ndarray, values: np.ndarray) -> dict | None:
    """``{key: value}`` (Python ints) where every key has one value, else None (the loop's ``setdefault`` check)."""
    if keys.size == 0:
        return {}
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    same = k[1:] == k[:-1]
    if np.any(v[1:][same] != v[:-1][same]):
        return None
    first = np.concatenate(([True], ~same))
    return dict(zip(k[first].tolist(), v[first].tolist()))


def _ports(nodes, nics, nodes2, nics2) -> dict | None:
    """``{(node, nic): (node2, nic2)}`` where every (node, NIC) goes to one place, else None."""
    if nodes.size == 0:
        return {}
    width = int(max(nics.max(), nics2.max())) + 1
    moved = _function(nodes * width + nics, nodes2 * width + nics2)
    if moved is None:
        return None
    return {divmod(k, width): divmod(v, width) for k, v in moved.items()}


class LinkRenaming:
    """``renaming(cluster, (link,), (moved,))`` with the cluster's constants read once: a pipeline send's replicas
    (~10⁵ at 65,536 GPUs) each ask it of one link. The same conditions in the same order as the loop; a job's
    view, a cluster without a network or with a degraded NIC go to the loop."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.direct = type(cluster).place is Cluster.place and cluster.network is not None and not cluster.degraded_nics
        if self.direct:
            spec, net = cluster.node, cluster.network
            self.gpn = spec.gpus_per_node
            self.nic_of = tuple(spec.nic_of(g) for g in range(self.gpn))
            self.rail, self.per_leaf = net.rail_optimized, net.nodes_per_leaf
            self.shared = net.leaf_uplinks is LeafUplinks.SHARED

    def __call__(self, link, moved) -> Renaming | None:
        if not self.direct:
            return renaming(self.cluster, (link,), (moved,))
        (a, b, nic), (a2, b2, nic2) = link, moved
        gpn = self.gpn
        (sn, sl), (dn, dl), (sn2, sl2), (dn2, dl2) = divmod(a, gpn), divmod(b, gpn), divmod(a2, gpn), divmod(b2, gpn)
        if (sn == dn) != (sn2 == dn2):
            return None
        if sn == dn:
            return Renaming({sn: sn2}, {}) if sl == sl2 and dl == dl2 else None
        nic_of = self.nic_of
        nic_s, nic_d = (nic_of[sl], nic_of[dl]) if nic is None else (nic, nic)
        nic_s2, nic_d2 = (nic_of[sl2], nic_of[dl2]) if nic2 is None else (nic2, nic2)
        crosses = self._crosses(sn, dn, nic_s, nic_d)
        if crosses != self._crosses(sn2, dn2, nic_s2, nic_d2) or (crosses and self.shared):
            return None
        ports = {(sn, nic_s): (sn2, nic_s2)}
        if ports.setdefault((dn, nic_d), (dn2, nic_d2)) != (dn2, nic_d2):
            return None
        return Renaming({}, ports)

    def _crosses(self, sn: int, dn: int, nic_s: int, nic_d: int) -> bool:
        """:func:`~simulator.cluster.fabric_links.crosses_leaf`."""
        if self.rail and nic_s != nic_d:
            return True
        per_leaf = self.per_leaf
        return bool(per_leaf) and sn // per_leaf != dn // per_leaf
