"""The size-independent caches (shape.py's per-group schedule structure, the registry's kept groups)
give the times a fresh, uncached computation gives: every algorithm, op and protocol, small groups."""

import pytest

from simulator.cluster.presets import load_preset
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.collectives.cost import Env, Flow, Group
from simulator.collectives.pipeline_choice import PIPELINE_CHUNKS
from simulator.collectives.direct import Direct, Pairwise, _pairs, a2a_blocks
from simulator.collectives.chain import PipelineChain, ring_chain_s
from simulator.collectives.group import ring_flows
from simulator.collectives.ring import Ring, _chain_levels, ring_edge_alphas
from simulator.collectives.tree import DoubleBinaryTree
from simulator.collectives.shape import UniformSchedule

CLUSTERS = {name: load_preset(name, nodes=2) for name in ("dgx-h100", "dgx-v100", "pcie-l40s", "h100-roce")}
GROUPS = [tuple(range(16)), (0, 3, 5, 8, 9, 14), (2, 7, 11), (0, 1, 8, 9, 10, 11)]
SIZES = [4 * 16 * 3 + 3, 1_000_003, 2**20, 2**30 + 12]


def _direct_flows_s(env: Env, group: Group, algorithm, op: Op, nbytes: int, root: int = 0) -> float:
    """Before the cache: the flows written out and timed by ``Env.steps_time_s`` (cost.py)."""
    p, ranks, order = group.p, group.ranks, group.order
    if isinstance(algorithm, Pairwise):
        block = a2a_blocks(nbytes, p)[0][1]
        return env.steps_time_s([[Flow(ranks[order[v]], ranks[order[(v + s) % p]], block) for v in range(p)]
                                 for s in range(1, p)])
    per = nbytes / p if op in (Op.REDUCE_SCATTER, Op.ALL_GATHER) else nbytes
    if op is Op.ALL_TO_ALL:
        per = a2a_blocks(nbytes, p)[0][1]
    return env.steps_time_s([[Flow(ranks[a], ranks[b], per) for a, b in _pairs(p, op, root)]])


def _fresh_s(algorithm, cluster, ranks, op: Op, nbytes: int, protocol) -> float:
    """The algorithm's time on a new group (no kept paths or structures)."""
    group = Group(cluster, ranks)
    env = Env(cluster, protocol, family=algorithm.family, group=group)
    if isinstance(algorithm, (Direct, Pairwise)):
        comm = _direct_flows_s(env, group, algorithm, op, nbytes)
    elif isinstance(algorithm, Ring) and op in (Op.ALL_REDUCE, Op.REDUCE_SCATTER, Op.ALL_GATHER):
        comm = _ring_flows_s(env, group, op, nbytes)
    else:  # pipelines (ring broadcast/reduce, tree) and the rest: nothing kept yet on a new group
        return algorithm.time_s(group, op, nbytes, protocol)
    return (env.overhead_s(algorithm.family, algorithm.calls) + comm
            + algorithm.gamma_s(env, algorithm.reduce_bytes(group, op, nbytes)))


def _ring_flows_s(env: Env, group: Group, op: Op, nbytes: int) -> float:
    """Before the cache: one ring step's flows timed by ``Env.step_bw_s``, the chain from their α."""
    p = group.p
    steps = 2 * (p - 1) if op is Op.ALL_REDUCE else p - 1
    flows = ring_flows(group, nbytes / (p * group.channels))
    return steps * env.step_bw_s(flows) + ring_chain_s(ring_edge_alphas(env, flows, p), steps)


@pytest.mark.parametrize("name", list(CLUSTERS))
@pytest.mark.parametrize("ranks", GROUPS)
@pytest.mark.parametrize("op", list(Op))
def test_cached_times_equal_fresh(name, ranks, op):
    cluster = CLUSTERS[name]
    group = registry._group(cluster, ranks)
    for algo_name in registry.supporting(op, cluster, ranks):
        algorithm = registry.get_algorithm(algo_name)
        for nbytes in SIZES:  # one table: later sizes reuse what the first one built
            for protocol in registry._protocols(cluster, algorithm):
                cached = algorithm.time_s(group, op, nbytes, protocol)
                fresh = _fresh_s(algorithm, cluster, ranks, op, nbytes, protocol)
                assert cached == pytest.approx(fresh, rel=1e-12, abs=0), (algo_name, nbytes, protocol)
    assert registry._group(cluster, ranks) is group  # kept between calls


def test_whole_bytes_are_bit_identical():
    """A whole number of bytes per flow: the link load ``c·b`` is the exact sum, so nothing rounds differently."""
    cluster = CLUSTERS["dgx-h100"]
    group = Group(cluster, tuple(range(16)))
    for protocol in [None, *cluster.comm.protocols]:
        env = Env(cluster, protocol, family="ring")
        for algorithm, op in ((Direct(), Op.ALL_TO_ALL), (Pairwise(), Op.ALL_TO_ALL), (Direct(), Op.ALL_REDUCE)):
            for nbytes in SIZES:
                assert (algorithm.comm_time_s(env, group, op, nbytes, 0)
                        == _direct_flows_s(env, group, algorithm, op, nbytes))


def test_hand_worked_loads():
    """Direct all-to-all on 2 × 8 H100: a GPU port carries its 15 flows, a NIC the 8 flows that leave
    through it; with 1 MB blocks the port's 15 MB at 450 GB/s (× the protocol's ratio) is the step."""
    cluster = CLUSTERS["dgx-h100"]
    group = Group(cluster, tuple(range(16)))
    shape = UniformSchedule(group, [[(a, b, None) for a, b in _pairs(16, Op.ALL_TO_ALL, 0)]])
    env = Env(cluster, None, family="ring")
    port = cluster.node.intra_link.bw_Bps
    nic = cluster.network.link.bw_Bps
    expected = max(15e6 / port, 8e6 / nic)
    assert shape.bw_s(env, 1e6) == pytest.approx(expected, rel=1e-15)
    assert shape.time_s(env, 0) == 0.0


def test_kept_group_is_per_cluster_object():
    """Two clusters with the same ranks never share a group; a bool rank is refused, not served from the cache."""
    a, b = CLUSTERS["dgx-h100"], CLUSTERS["h100-roce"]
    assert registry._group(a, (0, 1)).cluster is a
    assert registry._group(b, (0, 1)).cluster is b
    with pytest.raises(Exception, match="ranks must be integers"):
        registry._group(a, (True, 0))


def _pipeline_by_steps(env: Env, levels, bytes_per_channel: float) -> tuple[float, int]:
    """``Env.best_pipeline`` written out: each step's flows at ``n/k`` bytes per unit timed by
    ``Env.step_bw_s``, one chunk's chain, ``(k − 1)·α_max`` per further chunk (no arrays, no cache)."""
    depth = len(levels)
    alpha_max = max(a for lvl in levels for _, _, a in env.edges(lvl))
    latency = PipelineChain([env.edges(lvl) for lvl in levels]).of(1)
    step = None if env.protocol is None else env.protocol.step_bytes
    counts = [k for k in PIPELINE_CHUNKS if step is None or bytes_per_channel / k <= step] or [PIPELINE_CHUNKS[-1]]
    best = None
    for k in counts:
        b, memo, bw = bytes_per_channel / k, {}, 0.0
        for s in range(k + depth - 1):
            lo, hi = max(0, s - k + 1), min(depth - 1, s)
            if (lo, hi) not in memo:
                memo[(lo, hi)] = env.step_bw_s([Flow(f.src, f.dst, f.nbytes * b, f.nic)
                                               for lvl in levels[lo:hi + 1] for f in lvl])
            bw += memo[(lo, hi)]
        t = (bw + latency + (k - 1) * alpha_max * env.chunk_latency_share, k)
        best = t if best is None or t < best else best
    return best


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-v100"])
@pytest.mark.parametrize("case", ["tree", "ring-broadcast", "ring-reduce"])
def test_kept_pipelines_equal_steps_written_out(name, case):
    """The kept pipeline arrays (pipeline_cost.py ``PipelineLayout``/``PipelineCost``) against the steps written out, every protocol."""
    cluster = CLUSTERS[name]
    group = registry._group(cluster, (0, 1, 2, 5, 8, 9, 12, 15))
    if case == "tree":
        algorithm, levels, key, per = DoubleBinaryTree(), DoubleBinaryTree()._unit_levels(group), ("tree", Op.ALL_REDUCE), 2
    else:
        op = Op.BROADCAST if case == "ring-broadcast" else Op.REDUCE
        algorithm, levels, key, per = Ring(), _chain_levels(group, op, 3), ("ring", op, 3), 1
    for protocol in [None, *cluster.comm.protocols]:
        env = Env(cluster, protocol, group.paths, family=algorithm.family)
        for nbytes in (4096, 3 * 2**20 + 4, 2**30):
            n = nbytes / (per * group.channels)
            kept = env.best_pipeline(levels, n, group, key)
            assert kept[1] == _pipeline_by_steps(env, levels, n)[1]
            assert kept[0] == pytest.approx(_pipeline_by_steps(env, levels, n)[0], rel=1e-12, abs=0)
