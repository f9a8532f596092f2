"""A group's ring step read once (group.py ``Group.ring_pairs``): the ring flows are its connections in order, and the
ring bus bandwidth counted per distinct connection (:attr:`Group.ring_bus_bw_Bps`) is, to the bit, the one step's
per-flow load over its links (cost.py ``Env.step_bw_s`` of the unit flows) that it replaced."""

import pytest

from simulator.cluster.presets import load_preset
from simulator.collectives.cost import Env, Group, ring_flows

CASES = [("dgx-a100", 4, tuple(range(32))), ("dgx-a100", 4, tuple(range(0, 32, 2))), ("dgx-h100", 2, (0, 3, 5, 8, 9, 14)),
         ("dgx-v100", 2, tuple(range(16))), ("pcie-l40s", 2, (0, 1, 8, 9, 10, 11)), ("h100-roce", 2, (2, 7, 11)),
         ("dgx-a100", 128, tuple(range(1024)))]


@pytest.mark.parametrize("name, nodes, ranks", CASES)
def test_ring_bus_bw_is_the_per_flow_step(name, nodes, ranks):
    cluster = load_preset(name, nodes=nodes)
    group = Group(cluster, ranks)
    flows = ring_flows(group, 1.0)
    assert [(f.src, f.dst, f.nic) for f in flows] == list(group.ring_pairs)
    assert len(flows) == group.channels * group.p
    step_s = Env(cluster, None).step_bw_s(flows)  # no protocol, no time-sharing on these presets: links as given
    assert group.ring_bus_bw_Bps == group.channels / step_s
