"""``auto`` on a gloo cluster means the algorithm gloo runs [src: gloo-native-algorithms]; NCCL clusters unchanged."""

from dataclasses import replace

import pytest

from simulator.cluster.io import load_cluster
from simulator.cluster.nccl import tuner_choices
from simulator.collectives.base import Op
from simulator.collectives.cost import Env
from simulator.collectives.gloo import output_copy_s
from simulator.collectives.registry import GLOO_NATIVE, estimate, estimate_all

_CPU = load_cluster("localhost-cpu")
GLOO = replace(_CPU, node=replace(_CPU.node, gpus_per_node=4))  # 4 local processes, as the suite runs
NCCL = load_cluster("dgx-h100", nodes=2)


def test_mapping_per_op():
    assert GLOO_NATIVE == {Op.ALL_REDUCE: "ring", Op.ALL_GATHER: "ring", Op.BROADCAST: "recursive_doubling",
                           Op.ALL_TO_ALL: "direct"}


@pytest.mark.parametrize("op", list(GLOO_NATIVE))
@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("nbytes", [4096, 1 << 22])
def test_gloo_auto_is_the_native_algorithm(op, p, nbytes):
    ranks = list(range(p))
    auto = estimate(GLOO, ranks, op, nbytes, "auto")
    chosen = estimate(GLOO, ranks, op, nbytes, GLOO_NATIVE[op])
    assert auto.algorithm == GLOO_NATIVE[op]
    if op is Op.BROADCAST and p > 2:  # idle group ranks in its rounds: cheaper (tests/test_gloo_active_share.py)
        assert auto.time_s < chosen.time_s
    else:  # an all-gather also copies out of gloo's buffer (test_native_all_gather_pays_its_copy_out_of_gloos_buffer)
        assert auto.time_s == pytest.approx(chosen.time_s + output_copy_s(Env(GLOO, None), op, nbytes), rel=1e-12)


def test_gloo_auto_differs_from_fastest_somewhere():
    """The change matters: on 4 ranks at 4 KiB some registered all-reduce is faster than ring (fewer hops),
    and ``auto`` still answers ring, the algorithm gloo runs."""
    ranks = list(range(4))
    fastest = min(estimate_all(GLOO, ranks, Op.ALL_REDUCE, 4096), key=lambda e: e.time_s)
    assert fastest.algorithm != "ring"
    assert estimate(GLOO, ranks, Op.ALL_REDUCE, 4096).algorithm == "ring"


def test_gloo_ops_without_native_mapping_keep_the_fastest():
    ranks = list(range(4))
    fastest = min(estimate_all(GLOO, ranks, Op.REDUCE, 1 << 20), key=lambda e: e.time_s)
    assert estimate(GLOO, ranks, Op.REDUCE, 1 << 20).time_s == fastest.time_s


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("nbytes", [4096, 1 << 20])
def test_gloo_reduce_scatter_is_the_whole_all_reduce_plus_its_copies(p, nbytes):
    """ProcessGroupGloo all-reduces the whole input and copies the rank's chunk out [src: gloo-native-algorithms]:
    ring all-reduce of n plus 2·(n + n/p) bytes at hbm_bw × share (hand-worked below)."""
    cluster = replace(_CPU, node=replace(_CPU.node, gpus_per_node=p))
    ranks = list(range(p))
    whole = estimate(cluster, ranks, Op.ALL_REDUCE, nbytes, "ring").time_s
    share = max(1.0, p / cluster.node.host.cpu_cores)
    copies = 2 * (nbytes + nbytes / p) / (cluster.device.hbm_bw_GBps * 1e9) * share
    got = estimate(cluster, ranks, Op.REDUCE_SCATTER, nbytes)
    assert got.time_s == pytest.approx(whole + copies, rel=1e-12)
    assert got.op is Op.REDUCE_SCATTER and got.algorithm == "ring"
    assert got.time_s > estimate(cluster, ranks, Op.REDUCE_SCATTER, nbytes, "ring").time_s  # the old, cheaper price


def test_gloo_reduce_scatter_hand_worked():
    """localhost-cpu at 2 processes on its 2 cores (share 1): ring all-reduce of 1 MiB =
    call + 2 hops·α + 2·(n/2)/bw + γ·(n/2), then the copies 2·(n + n/2)/hbm_bw."""
    cluster = replace(_CPU, node=replace(_CPU.node, gpus_per_node=2))
    n = 1 << 20
    link, hbm = cluster.node.intra_link, cluster.device.hbm_bw_GBps * 1e9
    ring = (cluster.comm.call_latency_us * 1e-6 + 2 * link.latency_us * 1e-6 + 2 * (n / 2) / link.bw_Bps
            + 3 * (n / 2) / hbm)
    expected = ring + 2 * (n + n / 2) / hbm
    assert estimate(cluster, [0, 1], Op.REDUCE_SCATTER, n).time_s == pytest.approx(expected, rel=1e-9)


def test_nccl_reduce_scatter_unchanged():
    """The whole-all-reduce rule is gloo's: an NCCL cluster's reduce-scatter is NCCL's ring (its tuner's choice)."""
    ranks = list(range(16))
    assert estimate(NCCL, ranks, Op.REDUCE_SCATTER, 1 << 24).time_s < estimate(NCCL, ranks, Op.ALL_REDUCE,
                                                                               1 << 24).time_s


def test_the_compiled_steps_cost_cache_prices_gloos_reduce_scatter():
    from simulator.compile.costs import CostCache

    time_s, algorithm = CostCache(GLOO).collective((0, 1, 2, 3), Op.REDUCE_SCATTER, 1 << 20)
    assert time_s == estimate(GLOO, [0, 1, 2, 3], Op.REDUCE_SCATTER, 1 << 20).time_s
    assert algorithm.value == "ring"


@pytest.mark.parametrize("op", [Op.ALL_REDUCE, Op.ALL_GATHER, Op.BROADCAST])
def test_nccl_auto_unchanged(op):
    ranks = list(range(16))
    allowed = set(tuner_choices(op.value))
    candidates = [e for e in estimate_all(NCCL, ranks, op, 1 << 24) if e.algorithm in allowed]
    auto = estimate(NCCL, ranks, op, 1 << 24)
    assert auto.time_s == min(e.time_s for e in candidates)


@pytest.mark.parametrize("op", [Op.ALL_REDUCE, Op.ALL_GATHER, Op.BROADCAST])
def test_the_compiled_steps_cost_cache_prices_gloos_algorithm(op):
    """The step compiler's ``auto`` (CostCache) takes the same algorithm on a gloo cluster, where it otherwise
    picks the fastest of NCCL's choices (ring or tree)."""
    from simulator.compile.costs import CostCache

    time_s, algorithm = CostCache(GLOO).collective((0, 1, 2, 3), op, 4096)
    assert algorithm.value == GLOO_NATIVE[op]
    assert time_s == estimate(GLOO, [0, 1, 2, 3], op, 4096, "auto").time_s  # a broadcast at its active share
    assert time_s <= estimate(GLOO, [0, 1, 2, 3], op, 4096, GLOO_NATIVE[op]).time_s + output_copy_s(Env(GLOO, None),
                                                                                                    op, 4096)


def test_the_planner_ranks_fixed_all_reduce_algorithms_that_gloo_does_not_run():
    """On a gloo cluster ``auto`` is ring, so only ring is dominated by it; tree or recursive doubling may be faster
    and are ranked. On an NCCL cluster NCCL's choices stay dominated."""
    from planner.variants import dominated_algorithms
    from simulator.strategy.sync import AllReduceAlgorithm
    from simulator.strategy.kinds import ZeroStage

    assert dominated_algorithms(GLOO, ZeroStage.ZERO0) == frozenset({AllReduceAlgorithm.RING})
    assert AllReduceAlgorithm.TREE in dominated_algorithms(NCCL, ZeroStage.ZERO0)


def test_native_all_gather_pays_its_copy_out_of_gloos_buffer():
    """ProcessGroupGloo gathers into a buffer of its own and copies it into the output [src: torch-gloo-allgather-copy]:
    on localhost-cpu (hbm 9.7 GB/s) a 4 MiB all-gather at 2 processes on 2 cores costs the ring's estimate plus
    2 × 4,194,304 / 9.7e9 = 0.8648 ms; at 4 processes (share 2) twice that; an NCCL cluster's all-gather nothing more."""


    cpu = load_cluster("localhost-cpu")
    for p, share in ((2, 1.0), (4, 2.0)):
        node = replace(cpu, node=replace(cpu.node, gpus_per_node=p))
        ranks = list(range(p))
        ring = estimate(node, ranks, Op.ALL_GATHER, 4 << 20, "ring").time_s
        auto = estimate(node, ranks, Op.ALL_GATHER, 4 << 20, "auto").time_s
        assert auto - ring == pytest.approx(2 * (4 << 20) / 9.7e9 * share, rel=1e-9)
    gpu = load_cluster("dgx-h100")
    e = estimate(gpu, list(range(8)), Op.ALL_GATHER, 4 << 20, "auto")
    assert e.time_s == estimate(gpu, list(range(8)), Op.ALL_GATHER, 4 << 20, e.algorithm).time_s
