"""The latency chain (simulator/collectives/chain.py): hand-worked rings, NCCL's tuner, properties.

A schedule costs Σ step bandwidth terms + L, L the longest chain of hop latencies through its steps.
Tolerances: rel 1e-9 (exact arithmetic) unless the test says why.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.collectives.chain import PipelineChain, chain_latency_s, ring_chain_s
from simulator.collectives.cost import Env, Group
from simulator.collectives.registry import build_schedule, get_algorithm
from simulator.collectives.replay import schedule_time_s
from simulator.collectives.group import ring_flows
from test_collectives_helpers import nccl_protocols, switched


def test_chain_of_hand_built_steps():
    # 0→1 (1), then 1→2 (5) and 0→2 (1): 2 waits for the longer chain, 6; rank 3 never receives.
    assert chain_latency_s([[(0, 1, 1.0)], [(1, 2, 5.0), (0, 2, 1.0)]]) == 6.0
    # A step reads the arrivals of the previous step only: 0→1 and 1→2 in one step do not chain.
    assert chain_latency_s([[(0, 1, 1.0), (1, 2, 5.0)]]) == 5.0
    assert chain_latency_s([]) == 0.0


def test_two_node_ring_hand_worked():
    """2 nodes × 2 GPUs, links' own numbers: NVSwitch α = 1 µs, network α = 5 µs (helpers).

    Ring order 0→1 (1 µs), 1→2 (5), 2→3 (1), 3→0 (5). All-reduce, p = 4: 6 steps; a chain of 6
    consecutive ring edges holds at most 3 network edges: L = 3·5 + 3·1 = 18 µs (per-step: 6·5 = 30).
    All-gather, 3 steps: 5 + 1 + 5 = 11 µs (per-step: 15).
    """
    cluster = switched(nodes=2, gpus=2)
    group, env, ring = Group(cluster, (0, 1, 2, 3)), Env(cluster, None), get_algorithm("ring")
    n = 4 * 1024
    flows = ring_flows(group, n / (4 * group.channels))
    assert env.chain_latency_s([flows] * 6) == pytest.approx(18e-6, rel=1e-9)
    assert env.chain_latency_s([flows] * 3) == pytest.approx(11e-6, rel=1e-9)
    bw = env.step_bw_s(flows)
    assert ring.comm_time_s(env, group, Op.ALL_REDUCE, n, 0) == pytest.approx(6 * bw + 18e-6, rel=1e-9)
    assert ring.comm_time_s(env, group, Op.ALL_GATHER, n, 0) == pytest.approx(3 * bw + 11e-6, rel=1e-9)
    schedule = build_schedule(cluster, [0, 1, 2, 3], Op.ALL_REDUCE, n, "ring")
    assert schedule_time_s(cluster, schedule) == pytest.approx(ring.time_s(group, Op.ALL_REDUCE, n, None), rel=1e-9)


def test_nccl_one_node_worked_example_unchanged():
    # NCCL tuning.cc [src: nccl-tuning]: 8 GPUs one NVLink node, ring LL: 6.6 + 14 × 0.6 = 15.0 µs (uniform α).
    cluster = switched(nodes=1, gpus=8, comm=nccl_protocols())
    ll = cluster.comm.protocols[0]
    got = get_algorithm("ring").time_s(Group(cluster, tuple(range(8))), Op.ALL_REDUCE, 32, ll)
    assert got == pytest.approx(15.0e-6, rel=1e-4)


def test_h100_four_nodes_ring_matches_nccl_tuner_latency():
    """32 H100 ranks (dgx-h100 preset, 4 nodes × 8), 1 KB all-reduce, ring LL.

    NCCL tuning.cc (v2.30.7) [src: nccl-tuning]: 6.6 + (62 − nInter)·0.6 + nInter·2.7 µs, nInter = 2(N−1) = 6:
    56.4 µs. The chain over 62 consecutive ring edges holds 8 network edges (the full ring's 4 plus 4
    in the next 30 edges): 6.6 + 54·0.6 + 8·2.7 = 60.6 µs, the older tuners' nInter = 2N count. The
    step-synchronous model gave 6.6 + 62·2.7 = 174 µs. Bandwidth adds (62/32)·1 KB at LL's cap on
    Intel hosts beyond two nodes, 20.4 GB/s [src: nccl-llmaxbw]: 0.097 µs. Tolerance: within 20 % of
    NCCL's 56.4 µs, and the exact chain to 0.1 %.
    """
    cluster = load_preset("dgx-h100", nodes=4)
    ll = next(p for p in cluster.comm.protocols if p.name == "LL")
    got = get_algorithm("ring").time_s(Group(cluster, tuple(range(32))), Op.ALL_REDUCE, 1024, ll)
    assert got == pytest.approx((6.6 + 54 * 0.6 + 8 * 2.7) * 1e-6 + (62 / 32) * 1024 / 20.4e9, rel=1e-3)
    assert abs(got - 56.4e-6) / 56.4e-6 < 0.2
    assert got < 0.5 * (6.6 + 62 * 2.7) * 1e-6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=2, max_size=9), st.integers(0, 30))
def test_ring_formula_is_the_generic_chain(alphas, steps):
    p = len(alphas)
    step = [(i, (i + 1) % p, a) for i, a in enumerate(alphas)]
    assert ring_chain_s(alphas, steps) == pytest.approx(chain_latency_s([step] * steps), rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.floats(0, 10)), max_size=4),
                min_size=1, max_size=5), st.integers(1, 12))
def test_pipeline_chain_is_the_generic_chain(levels, chunks):
    depth = len(levels)
    steps = [[e for lvl in levels[max(0, s - chunks + 1):min(depth - 1, s) + 1] for e in lvl if e[0] != e[1]]
             for s in range(chunks + depth - 1)]
    levels = [[e for e in lvl if e[0] != e[1]] for lvl in levels]
    assert PipelineChain(levels).of(chunks) == pytest.approx(chain_latency_s(steps), rel=1e-9, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 8), st.floats(0.1, 10), st.integers(1, 20))
def test_uniform_latency_every_rank_receiving_is_the_step_count(p, alpha, steps):
    step = [(i, (i + 1) % p, alpha) for i in range(p)]
    assert chain_latency_s([step] * steps) == pytest.approx(steps * alpha, rel=1e-9)
