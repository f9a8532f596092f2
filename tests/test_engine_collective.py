"""Collective schedules on the discrete-event network against the analytical replay.

Where no two flows of a step share a link (or all that do are alike), the DES and
``replay.schedule_time_s`` compute the same sum of steps: they must agree to rel 1e-6 (float
rounding of different summation orders). Under contention the DES can only be slower than the
analytical time of each collective alone.
"""

import pytest
import simpy

from simulator.collectives.base import Op, Schedule, Transfer
from simulator.collectives.registry import algorithm_names, build_schedule, supports
from simulator.collectives.replay import schedule_time_s
from simulator.engine.collective import run_schedule, simulate_collective
from simulator.engine.network import FlowNetwork
from simulator.errors import SpecError
from test_collectives_helpers import NIC, NVSWITCH, nccl_protocols, pcie_tree, switched

NBYTES = 4 * 20160
CLUSTERS = {
    "node8": (switched(nodes=1, gpus=8), [list(range(8)), [6, 2, 4, 0, 1]]),
    "4x4": (switched(nodes=4, gpus=4), [list(range(16)), [0, 4, 8, 12], [0, 1, 4, 5, 8, 9]]),
    "4x4-2nics": (switched(nodes=4, gpus=4, nics=2), [list(range(16)), [1, 5, 9, 13, 2, 6]]),
    "pcie": (pcie_tree(), [[0, 1, 2, 3], [0, 2, 3]]),
}
# On the PCIe tree the root's direct broadcast / reduce sends share its port, and some also cross the
# socket link, so their latencies differ. Latency is the schedule's chain, one delay before the flows
# (cost.py), so the flows start together and share the port as the analytical step assumes: they
# agree. (When each flow carried its own α, the near flows finished first and the DES was faster.)


def des(cluster, schedule, protocol=None):
    env = simpy.Environment()
    net = FlowNetwork(env)
    proc = run_schedule(env, net, cluster, schedule, protocol)
    env.run()
    return proc.value


def _cases():
    for key, (cluster, groups) in CLUSTERS.items():
        for ranks in groups:
            for name in algorithm_names():
                for op in Op:
                    if supports(name, op, cluster, ranks):
                        yield pytest.param(key, cluster, ranks, name, op, id=f"{key}-{len(ranks)}r-{name}-{op.value}")


@pytest.mark.parametrize("key, cluster, ranks, name, op", list(_cases()))
def test_des_equals_analytical_replay(key, cluster, ranks, name, op):
    root = len(ranks) - 1 if op in (Op.BROADCAST, Op.REDUCE) else 0
    schedule = build_schedule(cluster, ranks, op, NBYTES, name, root=root)
    analytical = schedule_time_s(cluster, schedule)
    simulated = des(cluster, schedule)
    assert simulated == pytest.approx(analytical, rel=1e-6)


@pytest.mark.parametrize("name", ["ring", "tree", "recursive_doubling", "hierarchical", "direct"])
def test_des_equals_analytical_replay_under_every_nccl_protocol(name):
    """Protocol latencies per link class, base latency per call, bw_factor as wire bytes."""
    cluster = switched(nodes=2, gpus=4, comm=nccl_protocols())
    schedule = build_schedule(cluster, list(range(8)), Op.ALL_REDUCE, NBYTES, name)
    for protocol in cluster.comm.protocols:
        if "ring" in protocol.base_latency_us:
            assert des(cluster, schedule, protocol) == pytest.approx(
                schedule_time_s(cluster, schedule, protocol), rel=1e-6)


def test_hand_built_ring_step_by_step():
    """Two nodes × 1 GPU, NIC 25 GB/s, 5 µs: a 2-step exchange of 1 MB each way.

    Step 0: 0→1 and 1→0 (different directions, no sharing): 5e-6 + 1e6/25e9 = 45 µs.
    Step 1: 0→1 with 2 MB: 5e-6 + 2e6/25e9 = 85 µs. Total 130 µs; nothing to reduce, no call cost.
    """
    cluster = switched(nodes=2, gpus=1)
    schedule = Schedule(op=Op.ALL_GATHER, algorithm="ring", ranks=(0, 1), nbytes=2 * 10**6,
                        transfers=(Transfer(step=0, src=0, dst=1, offset=0, nbytes=10**6),
                                   Transfer(step=0, src=1, dst=0, offset=0, nbytes=10**6),
                                   Transfer(step=1, src=0, dst=1, offset=0, nbytes=2 * 10**6)))
    assert des(cluster, schedule) == pytest.approx(130e-6, rel=1e-12)
    assert NIC.bw_GBps == 25 and NIC.latency_us == 5.0  # the numbers the docstring uses


def test_two_collectives_sharing_nics_are_slower_than_either_alone():
    """Two all-reduces over disjoint GPU pairs on 2 nodes with one NIC each: both cross the same NICs.

    Hand-worked for ring, n = 4·20160 B, p = 2: 2 steps of α + (n/2)/bw alone; shared, each step's
    bytes run at half rate: 2·(5e-6 + (n/2)/12.5e9) = 16.45 µs vs 13.23 µs alone (the ring's γ overlaps).
    """
    cluster = switched(nodes=2, gpus=2, nics=1)
    first = build_schedule(cluster, [0, 2], Op.ALL_REDUCE, NBYTES, "ring")
    second = build_schedule(cluster, [1, 3], Op.ALL_REDUCE, NBYTES, "ring")
    alone = schedule_time_s(cluster, first)
    env = simpy.Environment()
    net = FlowNetwork(env)
    procs = [run_schedule(env, net, cluster, s) for s in (first, second)]
    env.run()
    gamma = 0.0  # a pipelined ring: its reduction overlaps the transfer (HBM/3 > link bw), Env.gamma_s
    assert 3 / cluster.device.hbm_bw_GBps < 1 / cluster.node.intra_link.bw_GBps
    assert alone == pytest.approx(2 * (5e-6 + NBYTES / 2 / 25e9) + gamma, rel=1e-9)
    for proc in procs:
        assert proc.value == pytest.approx(2 * (5e-6 + NBYTES / 2 / 12.5e9) + gamma, rel=1e-9)
        assert proc.value >= alone


@pytest.mark.parametrize("name", ["ring", "tree", "halving_doubling", "hierarchical", "direct"])
def test_concurrent_collectives_never_beat_the_analytical_time_alone(name):
    """Two groups interleaved over 4 nodes × 4 GPUs with 2 NICs: they share NICs and ports."""
    cluster = switched(nodes=4, gpus=4, nics=2)
    groups = [list(range(0, 16, 2)), list(range(1, 16, 2))]
    schedules = [build_schedule(cluster, g, Op.ALL_REDUCE, NBYTES, name) for g in groups
                 if supports(name, Op.ALL_REDUCE, cluster, g)]
    env = simpy.Environment()
    net = FlowNetwork(env)
    procs = [run_schedule(env, net, cluster, s) for s in schedules]
    env.run()
    for s, proc in zip(schedules, procs):
        assert proc.value >= schedule_time_s(cluster, s) * (1 - 1e-9)


def test_simulate_collective_is_the_replay_on_an_idle_network():
    cluster = switched(nodes=2, gpus=4, comm=nccl_protocols())
    ll = cluster.comm.protocols[0]
    schedule = build_schedule(cluster, list(range(8)), Op.ALL_REDUCE, NBYTES, "ring")
    assert simulate_collective(cluster, list(range(8)), "all-reduce", NBYTES, "ring", ll) == pytest.approx(
        schedule_time_s(cluster, schedule, ll), rel=1e-6)


def test_a_protocol_of_another_cluster_is_an_error():
    cluster = switched(nodes=2, gpus=4)
    other = nccl_protocols().protocols[0]
    with pytest.raises(SpecError, match="protocol"):
        simulate_collective(cluster, list(range(8)), Op.ALL_REDUCE, NBYTES, "ring", other)


def test_des_replay_is_deterministic():
    cluster = switched(nodes=4, gpus=4, nics=2, nvs=NVSWITCH)
    schedule = build_schedule(cluster, list(range(16)), Op.ALL_TO_ALL, NBYTES, "direct")
    assert des(cluster, schedule) == des(cluster, schedule)


@pytest.mark.parametrize("name", ["ring", "tree", "pairwise", "ps"])
def test_step_replay_of_a_mixed_class_call_alone_takes_its_compiled_time(name):
    """replay_work's rule: alone, a call takes exactly its ``time_s``; latency is the chain delay.

    2 nodes × 2 GPUs (NVSwitch α 1 µs, network α 5 µs): the ring's steps mix both classes, so the
    chain (18 µs for all-reduce) differs from the per-step sum (30 µs); the fused flows carry none.
    """
    from simulator.collectives.registry import estimate
    from simulator.engine.replay_work import CommRunner
    from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport

    cluster = switched(nodes=2, gpus=2)
    group = (0, 1, 2, 3)
    op = Op.ALL_TO_ALL if name == "pairwise" else Op.ALL_REDUCE
    compiled = estimate(cluster, list(group), op, NBYTES, name).time_s
    for time_s in (compiled, compiled + 10e-6):
        call = CommCall(kind=CommKind.DP, op=op, group=group, nbytes=NBYTES, transport=Transport.COLLECTIVE,
                        algorithm=CollectiveAlgorithm(name), time_s=time_s)
        runner = CommRunner(simpy.Environment(), None, cluster, None, replicas=False)
        assert runner.alone_s(call) == pytest.approx(time_s, rel=1e-9)
