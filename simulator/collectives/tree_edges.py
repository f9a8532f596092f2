"""The double binary tree's unit flows as arrays, built from the group's node partition (tree.py's shape).

Tree A is the heap over the nodes in order, tree B the heap over them reversed; a node's heap position
``j`` puts its chain head at depth ``⌊log2(j + 1)⌋`` under the head of node position ``⌊(j − 1)/2⌋``, and
the ``k``-th group index of a node's chain at the head's depth ``+ k`` under the ``(k − 1)``-th. Channel ``c``
runs tree ``c mod 2``; with ``H`` the deeper tree's height, the edge into a child at depth ``d`` goes up at
level ``H − d`` and down at level ``H + d − 1`` (tree.py ``tree_levels``), leaving a node by NIC
``(c // 2) mod`` its NIC count (``Group.nic``), inside a node by none (−1). The same flows as
``DoubleBinaryTree._unit_levels``, level by level, without a Python step per flow: a 1,024-rank group on
128 nodes of 8 NICs has 32,736 (``tests/test_tree_edges.py`` compares them and the times).
"""

from __future__ import annotations

import numpy as np

from simulator.collectives.group import Group


def tree_shape(group: Group, mirrored: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(child, parent, depth of the child, crosses nodes)`` of every edge of tree A (B when ``mirrored``), in
    group indices."""
    lens = np.array([len(x) for x in group.nodes], dtype=np.int64)
    n_nodes = len(lens)
    order = np.array(group.order, dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(lens)[:-1]])  # position in order of each node's head
    node_of = np.repeat(np.arange(n_nodes, dtype=np.int64), lens)
    k = np.arange(len(order), dtype=np.int64) - first[node_of]  # place in its node's chain
    heap = np.arange(n_nodes, dtype=np.int64)
    if mirrored:
        heap = n_nodes - 1 - heap
    head_depth = np.frexp((heap + 1).astype(float))[1].astype(np.int64) - 1  # ⌊log2(j + 1)⌋, exact
    up_heap = (heap - 1) // 2
    up_node = n_nodes - 1 - up_heap if mirrored else up_heap
    chain = k > 0
    heads = (k == 0) & (heap[node_of] > 0)
    child = np.concatenate([order[chain], order[heads]])
    parent = np.concatenate([order[np.flatnonzero(chain) - 1], order[first[up_node[node_of[heads]]]]])
    depth = np.concatenate([head_depth[node_of[chain]] + k[chain], head_depth[node_of[heads]]])
    cross = np.concatenate([np.zeros(int(chain.sum()), dtype=bool), np.ones(int(heads.sum()), dtype=bool)])
    return child, parent, depth, cross


def tree_unit_edges(group: Group) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """``(flows per level, src, dst, NIC or −1)`` of one unit flow per tree edge, direction and channel, level
    by level, ends as global ranks (:meth:`PipelineLayout.of_edges`'s input)."""
    channels = 2 * group.channels
    node_index = group.node_index
    node = np.array([node_index[i] for i in range(group.p)], dtype=np.int64)
    nic_of = np.array([[s[(c // 2) % len(s)] for c in range(channels)] for s in group.nic_sets], dtype=np.int64)
    shapes = [tree_shape(group, mirrored) for mirrored in (False, True)]
    height = max(int(depth.max(initial=0)) for _, _, depth, _ in shapes)
    levels, srcs, dsts, nics = [], [], [], []
    for t, (child, parent, depth, cross) in enumerate(shapes):
        cs = np.arange(t, channels, 2)
        for src, dst, level in ((child, parent, height - depth), (parent, child, height + depth - 1)):
            nic = np.where(cross[:, None], nic_of[node[src]][:, cs], -1)
            srcs.append(np.repeat(src, len(cs)))
            dsts.append(np.repeat(dst, len(cs)))
            levels.append(np.repeat(level, len(cs)))
            nics.append(nic.ravel())
    level = np.concatenate(levels)
    by_level = np.argsort(level, kind="stable")
    ranks = np.array(group.ranks, dtype=np.int64)
    sizes = np.bincount(level, minlength=2 * height).tolist()
    return (sizes, ranks[np.concatenate(srcs)[by_level]], ranks[np.concatenate(dsts)[by_level]],
            np.concatenate(nics)[by_level])


def most_children(group: Group) -> int:
    """Children the busiest rank reduces over all channels' trees: ``C ·`` (its children in A + in B), ``C`` trees
    of each."""
    counts = sum(np.bincount(parent, minlength=group.p) for _, parent, _, _ in
                 (tree_shape(group, mirrored) for mirrored in (False, True)))
    return group.channels * int(counts.max())
