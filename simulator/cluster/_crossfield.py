"""Cross-field rules of a cluster: values that are each valid alone but describe no machine the model
can stand for together (issue 15: ``nics_per_node: 64`` on an 8-GPU node was accepted). One home for
them; :class:`~simulator.cluster.interconnect.NodeSpec` and :class:`~simulator.cluster.spec.Cluster` call these
from their ``__post_init__``, so a file, a preset and a cluster built in Python meet the same rules.
Each error names the file field and the fix in one line.
"""

from __future__ import annotations

from math import ceil
from typing import TYPE_CHECKING

from simulator.cluster.kinds import Fabric, LinkKind
from simulator.errors import SpecError

if TYPE_CHECKING:
    from simulator.cluster.spec import Cluster, NodeSpec


def check_node(node: "NodeSpec") -> None:
    """NICs, PCIe tree and NVLink pairs against the node's GPU count and fabric."""
    gpus = node.gpus_per_node
    if node.nics_per_node > gpus:
        # The model sends each GPU's inter-node traffic through one NIC, GPU i → NIC ⌊i·nics/gpus⌋
        # (NodeSpec.nic_of), so NICs beyond one per GPU would carry nothing. Compute NICs per GPU
        # on the DGX line: A100 and H100 one each [src: nvidia-dgx-a100-ds, nvidia-dgx-h100-ds],
        # B200 one each [src: nvidia-dgx-b200-ds], DGX-1 one per two GPUs [src: nvidia-dgx1-ds];
        # AWS p5 has 32 EFA network cards for 8 H100, four per GPU [src: aws-p5-efa]: that is one
        # 400 Gb/s NIC per GPU here.
        raise SpecError("inter_node.nics_per_node",
                        f"{node.nics_per_node} NICs on a node of {gpus} GPUs: the model routes each GPU through one "
                        f"NIC, so give at most {gpus} (several NICs per GPU: count them as one, with bw_GBps their sum)")
    tree = node.pcie_tree
    if tree is not None:
        if tree.gpus_per_switch > gpus:
            raise SpecError("intra_node.pcie_tree.gpus_per_switch",
                            f"{tree.gpus_per_switch} GPUs under one PCIe switch on a node of {gpus} GPUs: give at most {gpus}")
        switches = ceil(gpus / tree.gpus_per_switch)
        if tree.switches_per_socket > switches:
            raise SpecError("intra_node.pcie_tree.switches_per_socket",
                            f"{tree.switches_per_socket} PCIe switches per socket, but {gpus} GPUs at "
                            f"{tree.gpus_per_switch} per switch fill only {switches}: give at most {switches}")
    if node.nvlink_pairs and node.fabric is not Fabric.NVLINK_MESH:
        raise SpecError("intra_node.nvlink_pairs",
                        f"only an nvlink_mesh fabric uses NVLink pairs, this node's fabric is {node.fabric.value}: "
                        "remove nvlink_pairs or set intra_node.fabric: nvlink_mesh")


def check_cluster(cluster: "Cluster") -> None:
    """In-switch reduction against the node fabric."""
    if cluster.in_switch_reduction and cluster.node.intra_link.kind is not LinkKind.NVSWITCH:
        # NVLS (NVLink SHARP) is in-network reduction in the NVLink Switch [src: nvidia-nvlink], measured
        # on 8 × H100 [src: nccl-1455]; the algorithms that use the flag (nvls, nvls_tree) need the switch.
        raise SpecError("in_switch_reduction",
                        f"in-switch reduction (NVLS) needs an NVSwitch node, this node's link is "
                        f"{cluster.node.intra_link.kind.value}: set in_switch_reduction: false")
