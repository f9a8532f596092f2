"""The cost cache answers a collective on a group moved to other nodes (:meth:`CostCache._translated`) with
the cost of the group where it is: equal, to the bit, to the cost model asked about the group in place, on
networks with and without leaf groups, shared and per-NIC uplinks, oversubscribed or not, rail-optimised or
not."""

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from simulator.cluster.io import load_cluster
from simulator.cluster.spec import LeafUplinks
from simulator.collectives.base import Op
from simulator.compile import CostCache


def _clusters():
    h100 = load_cluster("dgx-h100", nodes=8)
    a100 = load_cluster("dgx-a100", nodes=6)
    return {
        "a100 preset, 48 nodes: leaves of 20, crossings free": load_cluster("dgx-a100", nodes=48),
        "h100, leaves of 32": h100,
        "h100, leaves of 2, shared uplinks": replace(h100, network=replace(
            h100.network, nodes_per_leaf=2, oversubscription=2.0, leaf_uplinks=LeafUplinks.SHARED)),
        "h100, leaves of 2, per-NIC uplinks oversubscribed": replace(h100, network=replace(
            h100.network, nodes_per_leaf=2, oversubscription=3.0)),
        "a100, leaves of 3, not rail-optimised": replace(a100, network=replace(
            a100.network, nodes_per_leaf=3, rail_optimized=False, oversubscription=4.0)),
        "pcie-a100, one leaf tier": load_cluster("pcie-a100", nodes=4),
    }


CLUSTERS = _clusters()
OPS = (Op.ALL_REDUCE, Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.BROADCAST, Op.SEND_RECV)


@st.composite
def _case(draw):
    name = draw(st.sampled_from(sorted(CLUSTERS)))
    cluster = CLUSTERS[name]
    gpn, nodes = cluster.node.gpus_per_node, cluster.nodes
    first = draw(st.integers(0, nodes - 1))
    span = draw(st.integers(1, nodes - first))
    node_set = sorted(draw(st.sets(st.integers(first + 1, first + span - 1), max_size=min(span - 1, 5))) | {first}) \
        if span > 1 else [first]
    locals_ = draw(st.lists(st.integers(0, gpn - 1), min_size=1, max_size=gpn if len(node_set) < 4 else 2,
                            unique=True))
    op = draw(st.sampled_from(OPS))
    ranks = [n * gpn + g for n in node_set for g in locals_]
    if op is Op.SEND_RECV or len(ranks) < 2:
        ranks = draw(st.lists(st.sampled_from(range(first * gpn, (first + span) * gpn)), min_size=2, max_size=2,
                              unique=True))
    ranks = draw(st.permutations(ranks))
    return name, tuple(ranks), op, draw(st.sampled_from((4096, 1 << 20, 3 << 27)))


@settings(max_examples=150, deadline=None)
@given(case=_case())
def test_a_moved_group_costs_what_it_costs_in_place(case):
    name, ranks, op, nbytes = case
    cluster = CLUSTERS[name]
    cache = CostCache(cluster)
    in_place = cache._collective(ranks, op, nbytes, "auto")  # the cost model, no move
    assert cache.collective(ranks, op, nbytes) == in_place


def test_moves_by_leaf_position():
    """Where leaf crossings cost something, a group under one leaf group (or inside one node) moves to
    node 0; across leaf groups only by whole leaf groups (which nodes share a leaf is kept). Where they
    are free, its nodes are renumbered 0, 1, ... in order."""
    free = CostCache(CLUSTERS["a100 preset, 48 nodes: leaves of 20, crossings free"])
    assert free._translated((8 * 19 + 1, 8 * 21 + 1, 8 * 45)) == (1, 9, 16)
    cluster = CLUSTERS["h100, leaves of 2, shared uplinks"]
    cache = CostCache(cluster)
    assert cache._translated((40, 41)) == (0, 1)            # node 5, inside the node
    assert cache._translated((32, 40)) == (0, 8)            # nodes 4 and 5: one leaf group
    assert cache._translated((40, 48)) == (8, 16)           # nodes 5 and 6: two leaf groups, moved by 4 nodes


def test_a_group_off_the_cluster_is_not_moved_onto_it():
    """A rank past the cluster is the cost model's error, not a cost of a moved group."""
    import pytest

    from simulator.errors import SpecError

    cache = CostCache(CLUSTERS["a100 preset, 48 nodes: leaves of 20, crossings free"])
    with pytest.raises(SpecError):
        cache.collective((0, 8 * 48), Op.ALL_REDUCE, 1 << 20)


def test_gpus_move_down_inside_their_nodes_on_a_switched_fabric():
    """On NVSwitch nodes with one NIC per GPU the group's GPUs move down by its lowest local GPU (the dp groups
    of pipeline stages 1, 2, ... share stage 0's answer); with one NIC per two GPUs only by whole NIC pairs (a
    GPU keeps its NIC partner); on a PCIe tree not at all (which GPUs share a switch changes the paths)."""
    free = CostCache(CLUSTERS["a100 preset, 48 nodes: leaves of 20, crossings free"])
    assert free._translated((8 * 19 + 3, 8 * 21 + 3, 8 * 45 + 3)) == (0, 8, 16)
    assert free._translated((8 * 5 + 2, 8 * 5 + 6, 8 * 6 + 2, 8 * 6 + 6)) == (0, 4, 8, 12)
    half = CostCache(replace(CLUSTERS["h100, leaves of 32"], node=replace(CLUSTERS["h100, leaves of 32"].node,
                                                                          nics_per_node=4)))
    assert half._translated((3, 11)) == (1, 9)        # GPUs 3 → 1: NIC 1 → 0, and GPU 3 still shares with GPU 2
    assert CostCache(CLUSTERS["pcie-a100, one leaf tier"])._translated((8 + 1, 8 + 2)) == (1, 2)


_SHIFTED = {**CLUSTERS, "dgx-v100, an NVLink mesh": load_cluster("dgx-v100", nodes=4)}


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(sorted(_SHIFTED)), nics=st.sampled_from((1, 2, 4, 8)),
       locals_=st.sets(st.integers(0, 7), min_size=1, max_size=8), nodes=st.sampled_from(((1,), (1, 2), (0, 1, 3))),
       nbytes=st.sampled_from((4096, 1 << 20, 3 << 27)), op=st.sampled_from(OPS[:4]))
def test_a_group_moved_down_its_nodes_costs_what_it_costs_in_place(name, nics, locals_, nodes, nbytes, op):
    """Groups on any GPUs of their nodes, under every NIC count that divides the node (one that shares NICs
    between GPUs included), an NVLink mesh's among the clusters (where a shift would change the cost): the moved
    answer is the cost model's in place, to the bit."""
    base = _SHIFTED[name]
    gpn = base.node.gpus_per_node
    cluster = replace(base, node=replace(base.node, nics_per_node=min(nics, gpn)))
    ranks = tuple(n * gpn + g for n in nodes for g in sorted(locals_) if g < gpn)
    if len(ranks) < 2:
        return
    cache = CostCache(cluster)
    assert cache.collective(ranks, op, nbytes) == cache._collective(ranks, op, nbytes, "auto")
