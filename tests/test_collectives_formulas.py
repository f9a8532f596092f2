"""Closed forms against hand-worked numbers from the cited formulas.

Cluster unless said: one switched node, link bw B = 100 GB/s, α = 1 µs, HBM 2000 GB/s, so the
γ term is 3·bytes/2e12 s (cost.py). Tolerance rel 1e-9 (exact arithmetic) unless the test says why.
"""

import pytest

from simulator.collectives.base import Op
from simulator.collectives.cost import Group
from simulator.collectives.registry import estimate, get_algorithm, supporting
from simulator.collectives.ps import ps_time_s
from simulator.errors import SpecError
from test_collectives_helpers import Link, LinkKind, nccl_protocols, switched

N = 8_000_000
NODE = switched(nodes=1, gpus=8)
GAMMA = 3 / 2000e9


def t(name, op, nbytes=N, cluster=NODE, ranks=range(8), protocol=None, root=0):
    return get_algorithm(name).time_s(Group(cluster, tuple(ranks)), op, nbytes, protocol, root=root)


def test_ring_allreduce_thakur():
    # Thakur et al. 2005: 2(p−1)α + 2((p−1)/p)nβ, p = 8; the γ term overlaps the pipelined ring's
    # transfers (HBM 2000/3 GB/s of reduction > 100 GB/s of link, so none shows; see below).
    assert t("ring", Op.ALL_REDUCE) == pytest.approx(14 * (1e-6 + 1e6 / 100e9), rel=1e-9)


def test_recursive_doubling_allreduce_thakur():
    # lg p·α + n lg p·β + n lg p·γ
    assert t("recursive_doubling", Op.ALL_REDUCE) == pytest.approx(3 * (1e-6 + N / 100e9) + GAMMA * 3 * N, rel=1e-9)


def test_rabenseifner_allreduce_thakur():
    # 2 lg p·α + 2((p−1)/p)nβ + ((p−1)/p)nγ
    expected = 6e-6 + 2 * 7e6 / 100e9 + GAMMA * 7e6
    assert t("halving_doubling", Op.ALL_REDUCE) == pytest.approx(expected, rel=1e-9)


def test_non_power_of_two_allreduce_adds_the_fold_steps():
    # p = 6: m = 4 survivors; fold there and back add 2·nβ + nγ of bandwidth to the p = 4 algorithm.
    # Latency is the longest chain (cost.py): 1→0 (α), 0→2 (2α), 2→5 (3α), 0→1 (3α) … every chain
    # crosses at most 3 of the 4 steps, since ranks 4 and 5 do not fold: 3α, not 4α.
    expected = 4 * N / 100e9 + 3e-6 + GAMMA * 3 * N
    assert t("recursive_doubling", Op.ALL_REDUCE, ranks=range(6)) == pytest.approx(expected, rel=1e-9)


def test_binomial_broadcast_thakur():
    # ⌈lg p⌉·nβ, p = 5 → 3 steps, plus the longest latency chain: 0→1, 1→3 (2α); the last step is
    # only 0→4, so no chain crosses all three steps: 2α (Thakur's per-step count gives 3α).
    assert t("recursive_doubling", Op.BROADCAST, ranks=range(5)) == pytest.approx(3 * N / 100e9 + 2e-6, rel=1e-9)
    # p = 8 (power of two): every step extends the chain, ⌈lg p⌉(α + nβ) exactly.
    assert t("recursive_doubling", Op.BROADCAST) == pytest.approx(3 * (1e-6 + N / 100e9), rel=1e-9)


def test_all_to_all_direct_and_pairwise():
    # Direct: α + ((p−1)/p)nβ; pairwise (Thakur): (p−1)(α + (n/p)β).
    assert t("direct", Op.ALL_TO_ALL) == pytest.approx(1e-6 + 7e6 / 100e9, rel=1e-9)
    assert t("pairwise", Op.ALL_TO_ALL) == pytest.approx(7 * (1e-6 + 1e6 / 100e9), rel=1e-9)


def test_nccl_ring_ll_latency_worked_example():
    # NCCL tuning.cc [src: nccl-tuning]: 8 GPUs one NVLink node, ring LL: 6.6 + 14 × 0.6 = 15.0 µs;
    # Simple: 8.4 + 14 × 3.4 = 56 µs. 32 bytes add < 0.01% of bandwidth and γ terms.
    cluster = switched(nodes=1, gpus=8, comm=nccl_protocols())
    ll, _, simple = cluster.comm.protocols
    assert t("ring", Op.ALL_REDUCE, 32, cluster, protocol=ll) == pytest.approx(15.0e-6, rel=1e-4)
    assert t("ring", Op.ALL_REDUCE, 32, cluster, protocol=simple) == pytest.approx(56.0e-6, rel=1e-4)


def test_nccl_tree_latency_small_message():
    # tuning.cc tree: base + 2((g−1)·intra + ⌊log2 N⌋·inter) = 6.8 + 2(3·0.6 + 2·2.7) = 21.2 µs (LL),
    # g = 4 GPUs on N = 4 nodes. 64 bytes add < 0.1%.
    cluster = switched(nodes=4, gpus=4, comm=nccl_protocols())
    ll = cluster.comm.protocols[0]
    assert t("tree", Op.ALL_REDUCE, 64, cluster, range(16), protocol=ll) == pytest.approx(21.2e-6, rel=1e-3)


def test_hierarchical_two_level():
    # 2 nodes × 4 GPUs, NIC 25 GB/s, 5 µs: 2(g−1)(α_i + (n/g)/B_i) + 2(N−1)(α_n + (n/gN)/B_n)
    cluster = switched(nodes=2, gpus=4)
    expected = 6 * (1e-6 + 2e6 / 100e9) + 2 * (5e-6 + 1e6 / 25e9)  # pipelined rings: the γ overlaps
    assert t("hierarchical", Op.ALL_REDUCE, cluster=cluster) == pytest.approx(expected, rel=1e-9)


def test_parameter_server_byteps():
    # Colocated, k = p = 4 (BytePS: 2(n−1)M/(nB)) plus 2α and the γ of (p−1)·M/k at each shard.
    colocated = ps_time_s(NODE, range(4), N, servers=4, colocated=True)
    assert colocated == pytest.approx(2 * (1e-6 + 6e6 / 100e9) + GAMMA * 6e6, rel=1e-9)
    assert t("ps", Op.ALL_REDUCE, ranks=range(4)) == pytest.approx(colocated, rel=1e-9)
    # Separate: 8 workers (2 nodes × 4, one GPU per NIC), k = 2: 2(α + max(M, pM/k)/B_nic).
    cluster = switched(nodes=2, gpus=4)
    assert ps_time_s(cluster, range(8), N, servers=2, colocated=False) == pytest.approx(
        2 * (5e-6 + 4 * N / 25e9), rel=1e-9)
    with pytest.raises(SpecError, match="servers"):
        ps_time_s(NODE, range(4), N, servers=5, colocated=True)


def test_nvls_in_switch_reduction():
    # call(nvls) + α + n(1 + 1/p)/(B·0.85), Simple protocol: 25 + 3.4 µs (NCCL's tuner charges its
    # NVLS hop latency once per call on one node, tuning.cc ``latencies = intraLat``).
    cluster = switched(nodes=1, gpus=8, comm=nccl_protocols(), in_switch_reduction=True)
    simple = cluster.comm.protocols[2]
    expected = 25e-6 + 3.4e-6 + N * 9 / 8 / (100e9 * 0.85)
    assert t("nvls", Op.ALL_REDUCE, cluster=cluster, protocol=simple) == pytest.approx(expected, rel=1e-9)
    # On the links' own numbers (no protocol): two switch traversals, 2α = 2 × 1 µs.
    ideal = switched(nodes=1, gpus=8, in_switch_reduction=True)
    alpha = ideal.node.intra_link.latency_us * 1e-6
    bw = ideal.node.intra_link.bw_Bps
    assert t("nvls", Op.ALL_REDUCE, cluster=ideal) == pytest.approx(
        2 * alpha + ideal.comm.call_latency_us * 1e-6 + N * 9 / 8 / (bw * 0.85), rel=1e-9)
    assert estimate(cluster, range(8), Op.ALL_REDUCE, N, "nvls").protocol == "Simple"  # only Simple has nvls


def test_multi_channel_ring_reaches_nics_times_nic_bandwidth():
    # 4 nodes × 8 GPUs, NVSwitch 450 GB/s, 8 NICs × 50 GB/s, no latency, γ made negligible:
    # each of 62 steps moves n/(32·8) per NIC: busbw = 8 × 50 = 400 GB/s exactly.
    from dataclasses import replace
    cluster = switched(nodes=4, gpus=8, nvs=Link(kind=LinkKind.NVSWITCH, bw_GBps=450, latency_us=0),
                       nic=Link(kind=LinkKind.INFINIBAND, bw_GBps=50, latency_us=0))
    cluster = replace(cluster, device=replace(cluster.device, hbm_bw_GBps=1e12))
    e = estimate(cluster, range(32), Op.ALL_REDUCE, 2**30, "ring")
    assert e.busbw_GBps == pytest.approx(400.0, rel=1e-6)


def test_supporting_lists_the_algorithms_an_error_offers():
    # Recursive doubling gathers and halving-doubling scatters by powers of two (supports_group): on 3 ranks
    # all-gather is left to ring and direct, reduce-scatter too; all-to-all is only direct or pairwise.
    assert supporting(Op.ALL_GATHER, NODE, range(8)) == ["ring", "recursive_doubling", "direct"]
    assert supporting(Op.ALL_GATHER, NODE, range(3)) == ["ring", "direct"]
    assert supporting(Op.REDUCE_SCATTER, NODE, range(3)) == ["ring", "direct"]
    assert supporting(Op.ALL_TO_ALL, NODE, range(8)) == ["direct", "pairwise"]
    with pytest.raises(SpecError, match="halving_doubling does not implement reduce-scatter on this group of 3 "
                                        "ranks; algorithms that do: ring, direct"):
        estimate(NODE, range(3), Op.REDUCE_SCATTER, N, "halving_doubling")


def test_registry_errors_name_the_fix():
    with pytest.raises(SpecError, match="known: ring, tree"):
        estimate(NODE, range(8), Op.ALL_REDUCE, N, "rign")
    with pytest.raises(SpecError, match="algorithms that do: .*direct"):
        estimate(NODE, range(8), Op.ALL_TO_ALL, N, "ring")
    with pytest.raises(SpecError, match="ranks"):
        estimate(NODE, [0, 0, 1], Op.ALL_REDUCE, N)
    with pytest.raises(SpecError, match="ranks"):
        estimate(NODE, [0, 99], Op.ALL_REDUCE, N)
    with pytest.raises(SpecError, match="at least 2 ranks"):
        estimate(NODE, [3], Op.ALL_REDUCE, N)
    with pytest.raises(SpecError, match="bytes"):
        estimate(NODE, range(8), Op.ALL_REDUCE, 0)


def test_nccl_fuses_the_reduction_so_only_its_excess_over_the_link_shows():
    """γ under NCCL: reduce-copy kernels overlap the reduction with the transfer (CommLibrary.fuses_reduction).

    Hand-worked: 1 GB reduced. Unfused (IDEAL): 3e9 / 2000e9 = 1.5 ms. Fused with a 100 GB/s link:
    the link already takes 10 ms for those bytes, so nothing shows. Fused with a slow-HBM device
    (300 GB/s, 3e9/300e9 = 10 ms) behind a 1000 GB/s link (1 ms): 9 ms shows.
    """
    from dataclasses import replace

    from simulator.cluster.spec import CommLibrary, CommProfile
    from simulator.collectives.cost import Env
    from test_collectives_helpers import DEVICE

    ideal = switched()
    assert Env(ideal, None).gamma_s(1e9) == pytest.approx(1.5e-3)
    nccl = replace(ideal, comm=CommProfile(library=CommLibrary.NCCL))
    assert Env(nccl, None).gamma_s(1e9) == 0.0
    slow = replace(nccl, device=replace(DEVICE, hbm_bw_GBps=300),
                   node=replace(nccl.node, intra_link=Link(kind=LinkKind.NVSWITCH, bw_GBps=1000, latency_us=1.0)))
    assert Env(slow, None).gamma_s(1e9) == pytest.approx(9e-3)


MINIMAL_FILE = """name: issue-example
nodes: 1
gpus_per_node: 8
device: {name: my-gpu, peak_tflops: {bf16: 100}, memory_GB: 80, hbm_bw_GBps: 1000}
intra_node: {kind: nvswitch, bw_GBps: 100, latency_us: 10}
"""


def test_minimal_user_file_follows_the_alpha_beta_ring_exactly(tmp_path, capsys):
    """The issue's example: 8 GPUs, 100 GB/s, 10 µs, 100 MB ring all-reduce on a user's minimal file.

    Hand-worked (Thakur et al. 2005, ring without γ): 2(p−1)·(α + (n/p)/B) = 14·(10 + 125) µs =
    1890 µs. The ring reduces each chunk while the next crosses the link (Algorithm.pipelined) and
    this device reduces at 1000/3 = 333 GB/s > 100 GB/s of link, so no γ shows (it was 2152 µs:
    3·87.5 MB / 1000 GB/s = 262.5 µs added on top). Closed form, replay, DES and the CLI all agree.
    """
    import json

    from simulator.cluster.io import load_cluster
    from simulator.collectives.registry import build_schedule
    from simulator.collectives.replay import schedule_time_s
    from simulator.engine.collective import simulate_collective
    from trainplan.__main__ import main

    path = tmp_path / "mine.yaml"
    path.write_text(MINIMAL_FILE)
    cluster = load_cluster(str(path))
    n = 100_000_000
    expected = 14 * (10e-6 + n / 8 / 100e9)
    assert expected == pytest.approx(1890e-6, rel=1e-12)
    assert estimate(cluster, range(8), Op.ALL_REDUCE, n, "ring").time_s == pytest.approx(expected, rel=1e-12)
    schedule = build_schedule(cluster, range(8), Op.ALL_REDUCE, n, "ring")
    assert schedule_time_s(cluster, schedule) == pytest.approx(expected, rel=1e-12)
    assert simulate_collective(cluster, range(8), Op.ALL_REDUCE, n, "ring") == pytest.approx(expected, rel=1e-9)
    assert main(["collective", "--cluster", str(path), "--algorithm", "ring", "--bytes", "100000000",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["time_s"] == pytest.approx(expected, rel=1e-12)


def test_non_pipelined_algorithms_and_host_libraries_still_pay_gamma():
    """γ is exposed where the reduction cannot overlap: recursive doubling reduces a whole block
    before sending it on (Thakur's lg p·nγ, test above), and gloo reduces on the host after
    receiving, so a gloo ring pays Thakur's full ((p−1)/p)·nγ: 14·(1 + 10) µs + 7e6·3/2e12 s."""
    from dataclasses import replace

    from simulator.cluster.spec import CommLibrary, CommProfile

    gloo = replace(NODE, comm=CommProfile(library=CommLibrary.GLOO))
    expected = 14 * (1e-6 + 1e6 / 100e9) + GAMMA * 7e6
    assert t("ring", Op.ALL_REDUCE, cluster=gloo) == pytest.approx(expected, rel=1e-9)
    slow = replace(NODE, device=replace(NODE.device, hbm_bw_GBps=150))  # reduces at 50 GB/s < 100 GB/s link
    excess = 7e6 * (3 / 150e9 - 1 / 100e9)
    assert t("ring", Op.ALL_REDUCE, cluster=slow) == pytest.approx(14 * (1e-6 + 1e6 / 100e9) + excess, rel=1e-9)


def test_pipelined_chain_pays_one_latency_per_further_chunk():
    """Ring broadcast as a segmented chain (Pješivac-Grbović et al. 2007): ``(k + p − 2)`` steps of
    ``n/k`` bytes, one pass of α down the line and α per further chunk (cost.py Env.best_pipeline).

    Hand-worked, 8 GPUs, α = 1 µs, B = 100 GB/s, n = 8 MB (n/B = 80 µs):
    T(k) = 80·(k + 6)/k + 7 + (k − 1) µs = 86 + 480/k + k: k = 8: 154, 16: 132, 32: 133, so k = 16,
    132 µs (the optimum of the continuous form is sqrt(480) ≈ 22). Before, nothing charged a chunk
    and the chain always took 1024 chunks.
    """
    from simulator.collectives.registry import build_schedule
    from simulator.collectives.replay import schedule_time_s

    assert t("ring", Op.BROADCAST) == pytest.approx(132e-6, rel=1e-9)
    schedule = build_schedule(NODE, range(8), Op.BROADCAST, N, "ring")
    assert max(tr.step for tr in schedule.transfers) + 1 == 16 + 6
    assert schedule_time_s(NODE, schedule) == pytest.approx(132e-6, rel=1e-9)


def test_nccl_chunks_are_at_most_one_fifo_step():
    """Under an NCCL protocol a pipeline chunk is at most one FIFO step (nccl.py STEP_BYTES: Simple
    4 MiB / NCCL_STEPS 8 = 512 KiB): 64 MiB down a chain takes at least 128 chunks, however cheap
    fewer would look; with no protocol the per-chunk latency alone decides (fewer chunks here)."""
    from simulator.cluster.nccl import STEP_BYTES, nccl_protocols
    from simulator.collectives.cost import Env
    from simulator.collectives.ring import _chain_levels

    assert STEP_BYTES == (32768, 576000, 524288)
    simple = nccl_protocols()[2]
    group = Group(NODE, tuple(range(8)))
    levels = _chain_levels(group, Op.BROADCAST, 0)
    n = 64 * 2**20
    assert Env(NODE, simple, family="ring").best_pipeline(levels, n)[1] == 128
    assert Env(NODE, None, family="ring").best_pipeline(levels, n)[1] < 128


def test_estimate_protocols_lists_what_auto_chooses_among():
    # Ring all-reduce, 8 GPUs on one NVLink node, 32 bytes (bandwidth terms < 0.01%), NCCL tuning.cc
    # [src: nccl-tuning]: base + 14 hops: LL 6.6 + 14·0.6 = 15.0 µs, LL128 14 + 14·1.9 = 40.6 µs,
    # Simple 8.4 + 14·3.4 = 56.0 µs; the estimate keeps the fastest.
    from simulator.collectives.registry import estimate_protocols
    cluster = switched(nodes=1, gpus=8, comm=nccl_protocols(), in_switch_reduction=True)
    each = estimate_protocols(cluster, range(8), Op.ALL_REDUCE, 32, "ring")
    assert [e.protocol for e in each] == ["LL", "LL128", "Simple"]
    assert [e.time_s for e in each] == pytest.approx([15.0e-6, 40.6e-6, 56.0e-6], rel=1e-4)
    assert estimate(cluster, range(8), Op.ALL_REDUCE, 32, "ring") == min(each, key=lambda e: e.time_s)
    # At 1 GB LL's half bandwidth loses: Simple is the fastest, LL the slowest.
    big = {e.protocol: e.time_s for e in estimate_protocols(cluster, range(8), Op.ALL_REDUCE, 10**9, "ring")}
    assert big["Simple"] < big["LL128"] < big["LL"]
    assert [e.protocol for e in estimate_protocols(cluster, range(8), Op.ALL_REDUCE, N, "nvls")] == ["Simple"]
    assert [e.protocol for e in estimate_protocols(NODE, range(8), Op.ALL_REDUCE, N, "ring")] == [None]
    with pytest.raises(SpecError, match="nvls does not implement"):
        estimate_protocols(switched(nodes=2, gpus=4, comm=nccl_protocols()), range(8), Op.ALL_REDUCE, N, "nvls")
