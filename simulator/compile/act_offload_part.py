"""Activation offload (``offload_activations``): the host copies of the full-recomputation checkpoints.

Under full recomputation a block keeps only its input until backward (Korthikanti et al. 2022
§4.1: 2·s·b·h bytes in 16 bits, ÷ t with sequence parallelism; the memory model's
``LayerActivation.input_bytes``); with activation offload that checkpoint lives in host memory
(:func:`simulator.memory.stage_acts.stage_activations`). Each block then costs, per micro-batch,

- forward: one device→host copy of its checkpoint, ``c_s = α_h2d + bytes / B_h2d``;
- backward: one host→device copy of the same bytes before the block is recomputed,

with ``B_h2d`` the GPU's host link (``host.h2d_bw_GBps``, PCIe x16 per GPU in the presets) and
``α_h2d`` its per-copy latency (``host.h2d_latency_us``), as the ZeRO-Offload copies
(:func:`simulator.compile.offload_part.pcie_s`). The copies block the compute: DeepSpeed's CPU
checkpointing copies the checkpoint to the CPU with ``copy_to_device`` before running the block in
forward, and back with ``move_to_device`` before recomputing it, both on the current stream (its
``transport_stream`` is created but the code that would use it is commented out)
[src: deepspeed-act-ckpt]. So both engines play them as blocking calls of kind OFFLOAD next to
the chunk's tensor-parallel calls, and book them as offload time.
"""

from __future__ import annotations

from simulator.cluster.spec import Cluster
from simulator.collectives.base import Op
from simulator.compile import offload_part
from simulator.work import CommCall, CommKind, Transport


def checkpoint_bytes(boundary_bytes: float, tp: int, sequence_parallel: bool) -> float:
    """Bytes of one block's checkpoint on one rank: its input, b·(s/cp)·h·e (the chunk boundary's
    activation), split over tp under sequence parallelism."""
    return boundary_bytes / (tp if sequence_parallel else 1)


def copy_calls(cluster: Cluster, rank: int, nbytes: float, blocks: int) -> tuple[CommCall, ...]:
    """One host copy of ``nbytes`` per block (``blocks`` of them), each ``α_h2d + nbytes / B_h2d``."""
    if nbytes <= 0 or blocks <= 0:
        return ()
    call = CommCall(kind=CommKind.OFFLOAD, op=Op.SEND_RECV, group=(rank,), nbytes=int(round(nbytes)),
                    transport=Transport.HOST, time_s=offload_part.pcie_s(cluster, nbytes))
    return (call,) * blocks
