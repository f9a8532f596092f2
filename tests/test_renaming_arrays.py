"""The array form of the renaming rule (:func:`simulator.cluster.renaming_arrays.renaming_arrays`) gives the loop's
answer (:func:`simulator.cluster.topology.renaming`): the same :class:`Renaming` (dicts of Python ints) or None, on
long link lists moved as the engine's replicas are (nodes shifted, GPUs shifted on their nodes) and now and then
broken at one link, on every cluster of ``test_topology_translate`` (leaf groups, shared uplinks, rails, PCIe,
NVLink mesh, a job's view), and with a degraded NIC; and :class:`LinkRenaming` (one link) gives the loop's answer too."""

import random
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from simulator.cluster.facts import DegradedNic
from simulator.cluster.renaming_arrays import VECTOR_MIN_LINKS, LinkRenaming, renaming_arrays
from simulator.cluster.topology import renaming
from test_topology_translate import A100_48, CLUSTERS, _move


SICK = {name: replace(c, degraded_nics=(DegradedNic(node=0, nic=0, bw_fraction=0.5),))
        for name, c in CLUSTERS.items() if c.node.nics_per_node and type(c).__name__ == "Cluster"}
"""The clusters with a degraded NIC: the rule refuses every renaming there."""


@st.composite
def _moved_lists(draw):
    name = draw(st.sampled_from(sorted(CLUSTERS)))
    cluster = CLUSTERS[name]
    gpn, nodes, nics = cluster.node.gpus_per_node, cluster.nodes, cluster.node.nics_per_node
    n = draw(st.integers(VECTOR_MIN_LINKS, 2 * VECTOR_MIN_LINKS))
    rnd = random.Random(draw(st.integers(0, 2**32)))  # a plain generator: hypothesis's draws per link are slow
    inside = draw(st.sampled_from([0.0, draw(st.floats(0.0, 1.0))]))  # links inside a node: their GPUs must stay
    explicit = draw(st.booleans()) and nics  # every link's NIC given, or none (each GPU's own)
    span = draw(st.integers(1, nodes))  # the links' nodes: a few (many repeats) or all
    links = []
    for _ in range(n):
        a = rnd.randrange(span) * gpn + rnd.randrange(gpn)
        b = ((a // gpn) * gpn + rnd.randrange(gpn) if rnd.random() < inside
             else rnd.randrange(span) * gpn + rnd.randrange(gpn))
        if a == b:
            b = a // gpn * gpn + (a % gpn + 1) % gpn if gpn > 1 else (a + gpn) % cluster.world_size
        nic = rnd.randrange(nics) if explicit else None
        links.append((a, b, nic))
    leaf = cluster.network.nodes_per_leaf or 1 if cluster.network else 1
    # 0: a replica on other GPUs of the same nodes; a whole number of leaves: crossings alike; any
    dn = draw(st.sampled_from([0, leaf * draw(st.integers(0, nodes // leaf)) % nodes, draw(st.integers(0, nodes - 1))]))
    dl = 0 if inside and draw(st.booleans()) else draw(st.sampled_from([0, draw(st.integers(0, gpn - 1))]))
    dnic = draw(st.integers(0, max(nics - 1, 0)))
    def move(r):
        return ((r // gpn + dn) % nodes) * gpn + (r % gpn + dl) % gpn

    moved = [(move(a), move(b), None if nic is None else (nic + dnic) % nics) for a, b, nic in links]
    if draw(st.integers(0, 3)) == 0:  # one link elsewhere: the rule may refuse
        i = rnd.randrange(n)
        a, b = rnd.randrange(cluster.world_size), rnd.randrange(cluster.world_size)
        moved[i] = (a, b if b != a else (a + 1) % cluster.world_size, moved[i][2])
    return name, links, moved


@settings(max_examples=200, deadline=None)
@given(case=_moved_lists())
def test_the_arrays_give_the_loops_renaming(case):
    name, links, moved = case
    cluster = CLUSTERS[name]
    assert renaming_arrays(cluster, links, moved) == renaming(cluster, links, moved)
    if name in SICK:
        assert renaming_arrays(SICK[name], links, moved) is None is renaming(SICK[name], links, moved)


def test_the_arrays_refuse_and_accept_where_the_loop_does():
    gpn = 8
    across = [(d * gpn, (d + 1) * gpn, None) for d in range(VECTOR_MIN_LINKS)]  # nodes 0 → 1 → … on rail 0
    across = [(s % (48 * gpn), t % (48 * gpn), n) for s, t, n in across]
    rails = [(s + 5, t + 5, n) for s, t, n in across]  # the tp replica: rail 5
    ok = renaming_arrays(A100_48, across, rails)
    assert ok is not None and ok == renaming(A100_48, across, rails)
    assert all(type(k) is int for key in ok.ports for k in key)
    shifted = [(s + 3 * gpn, t + 3 * gpn, n) for s, t, n in across]  # leaf crossings at other places
    shifted = [(s % (48 * gpn), t % (48 * gpn), n) for s, t, n in shifted]
    assert renaming_arrays(A100_48, across, shifted) is None is renaming(A100_48, across, shifted)
    inside = [(3, 5, None)] * VECTOR_MIN_LINKS
    assert renaming_arrays(A100_48, inside, [(8 * 7 + 3, 8 * 7 + 5, None)] * VECTOR_MIN_LINKS).nodes == {0: 7}
    assert renaming_arrays(A100_48, inside, [(8 * 7 + 4, 8 * 7 + 5, None)] * VECTOR_MIN_LINKS) is None


@settings(max_examples=300, deadline=None)
@given(case=_move())
def test_one_link_gives_the_loops_renaming(case):
    """:class:`LinkRenaming` (a pipeline send's replicas) against the loop on one link moved, on every cluster and
    with a degraded NIC."""
    name, link, moved = case
    cluster = CLUSTERS[name]
    assert LinkRenaming(cluster)(link, moved) == renaming(cluster, (link,), (moved,))
    if name in SICK:
        assert LinkRenaming(SICK[name])(link, moved) is None is renaming(SICK[name], (link,), (moved,))
