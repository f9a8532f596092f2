"""Hand-built clusters and a pure-numpy schedule replayer shared by the collective tests.

The replayer applies base.py's semantics literally: steps in order; within a step every transfer
reads the sender's buffer as it stood at the end of the previous step, then the receiver adds
(``reduce``) or overwrites at ``recv_offset``. All-to-all reads the send buffer and writes the receive
buffer in equal blocks (direct.a2a_blocks), whose diagonal block is a local copy made first.
"""

import numpy as np

from simulator.cluster.spec import (Cluster, CommLibrary, CommProfile, Device, Dtype, Fabric, Link, LinkClass,
                                    LinkKind, NetworkSpec, NodeSpec, PcieTree, Protocol)
from simulator.collectives.base import Op, split
from simulator.collectives.direct import a2a_blocks

DEVICE = Device(name="X", peak_tflops={Dtype.BF16: 100.0}, memory_bytes=80 * 10**9, hbm_bw_GBps=2000)
NVSWITCH = Link(kind=LinkKind.NVSWITCH, bw_GBps=100, latency_us=1.0)
NIC = Link(kind=LinkKind.INFINIBAND, bw_GBps=25, latency_us=5.0)
PCIE = Link(kind=LinkKind.PCIE, bw_GBps=16, latency_us=2.0)
UPI = Link(kind=LinkKind.SOCKET, bw_GBps=40, latency_us=3.0)


def switched(nodes=1, gpus=8, nics=None, comm=None, nvs=NVSWITCH, nic=NIC, **cluster):
    node = NodeSpec(gpus_per_node=gpus, fabric=Fabric.SWITCHED, intra_link=nvs, nics_per_node=nics or gpus)
    net = NetworkSpec(link=nic) if nodes > 1 else None
    return Cluster(name="t", nodes=nodes, device=DEVICE, node=node, network=net, comm=comm or CommProfile(),
                   **cluster)


def pcie_tree():
    tree = PcieTree(gpus_per_switch=2, switches_per_socket=1, switch_uplink=PCIE, socket_link=UPI)
    node = NodeSpec(gpus_per_node=4, fabric=Fabric.PCIE_TREE, intra_link=PCIE, pcie_tree=tree)
    return Cluster(name="p", nodes=1, device=DEVICE, node=node)


def nccl_protocols():
    """NCCL tuning.cc (v2.30.7) ring latencies and bandwidth factors [src: nccl-tuning]."""
    def proto(name, ring, tree, nvl, pcie, net, factor, nvls=None):
        base = {"ring": ring, "tree": tree, **({"nvls": nvls} if nvls else {})}
        return Protocol(name=name, base_latency_us=base, bw_factor=factor,
                        hop_latency_us={LinkClass.NVLINK: nvl, LinkClass.PCIE: pcie, LinkClass.NET: net})
    return CommProfile(library=CommLibrary.NCCL, protocols=(
        proto("LL", 6.6, 6.8, 0.6, 1.0, 2.7, 0.5),
        proto("LL128", 14.0, 14.0, 1.9, 2.5, 4.0, 0.92),
        proto("Simple", 8.4, 8.4, 3.4, 5.7, 14.0, 1.0, nvls=25.0)))


def replay(schedule, inputs):
    """Apply ``schedule`` to per-rank int64 buffers (one element = 4 bytes); returns the final buffers."""
    elem = 4
    bufs = [x.copy() for x in inputs]
    a2a = schedule.op is Op.ALL_TO_ALL
    if a2a:
        recv = [np.full_like(x, -7) for x in inputs]
        for i, (off, n) in enumerate(a2a_blocks(schedule.nbytes, len(inputs))):
            recv[i][off // elem:(off + n) // elem] = inputs[i][off // elem:(off + n) // elem]
    for step in schedule.steps():
        before = [x.copy() for x in bufs]
        for t in step:
            assert t.offset % elem == 0 and t.nbytes % elem == 0 and t.recv_offset % elem == 0
            assert t.src != t.dst
            data = before[t.src][t.offset // elem:(t.offset + t.nbytes) // elem]
            target = recv[t.dst] if a2a else bufs[t.dst]
            lo, hi = t.recv_offset // elem, (t.recv_offset + t.nbytes) // elem
            if t.reduce:
                target[lo:hi] += data
            else:
                target[lo:hi] = data
    return recv if a2a else bufs


def check(schedule, seed=0):
    """Replay ``schedule`` on random buffers and assert the result is the op's definition."""
    p, n, root = len(schedule.ranks), schedule.nbytes // 4, schedule.root
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-1000, 1000, size=n) for _ in range(p)]
    slices = [(off // 4, (off + ln) // 4) for off, ln in split(schedule.nbytes, p)]
    op = schedule.op
    if op is Op.ALL_GATHER:  # rank i starts with only its own slice; the rest is garbage
        for i, (lo, hi) in enumerate(slices):
            inputs[i][:lo] = -99
            inputs[i][hi:] = -99
    out = replay(schedule, inputs)
    total = sum(inputs)
    if op is Op.ALL_REDUCE:
        for x in out:
            np.testing.assert_array_equal(x, total)
    elif op is Op.REDUCE_SCATTER:
        for i, (lo, hi) in enumerate(slices):
            np.testing.assert_array_equal(out[i][lo:hi], total[lo:hi])
    elif op is Op.ALL_GATHER:
        want = np.concatenate([inputs[i][lo:hi] for i, (lo, hi) in enumerate(slices)])
        for x in out:
            np.testing.assert_array_equal(x, want)
    elif op is Op.BROADCAST:
        for x in out:
            np.testing.assert_array_equal(x, inputs[root])
    elif op is Op.REDUCE:
        np.testing.assert_array_equal(out[root], total)
    elif op is Op.ALL_TO_ALL:
        blocks = [(off // 4, (off + ln) // 4) for off, ln in a2a_blocks(schedule.nbytes, p)]
        for j in range(p):
            for i, (lo, hi) in enumerate(blocks):
                np.testing.assert_array_equal(out[j][lo:hi], inputs[i][blocks[j][0]:blocks[j][1]])
    elif op is Op.SEND_RECV:
        np.testing.assert_array_equal(out[1], inputs[0])
    else:
        raise AssertionError(op)
