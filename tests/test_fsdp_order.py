"""torch FSDP's backward issue order on its one NCCL stream (simulator/compile/fsdp_order.py)
[src: torch-pg-nccl-stream, torch-fsdp-backward-order], hand-worked."""

from simulator.collectives.base import Op
from simulator.compile.fsdp_order import backward_issue_order
from simulator.work import CollectiveAlgorithm, CommCall, CommKind, Transport


def _call(nbytes: int, op: Op = Op.ALL_GATHER) -> CommCall:
    return CommCall(kind=CommKind.ZERO, op=op, group=(0, 1), nbytes=nbytes, transport=Transport.COLLECTIVE,
                    algorithm=CollectiveAlgorithm.RING, time_s=1e-3)


def test_fsdp_backward_issue_order_hand_worked():
    """G = (g0, g1, g2, g3), R = (r0, r1, r2, r3) → g0, g1, g2, r0, g3, r1, r2, r3: each reduce-scatter after the
    gather prefetched while its module ran; leftovers of either list keep their order."""
    g = tuple(_call(i) for i in (10, 11, 12, 13))
    r = tuple(_call(i, op=Op.REDUCE_SCATTER) for i in (20, 21, 22, 23))
    assert [c.nbytes for c in backward_issue_order(g, r)] == [10, 11, 12, 20, 13, 21, 22, 23]
    assert [c.nbytes for c in backward_issue_order(g, r[:1])] == [10, 11, 12, 20, 13]
    assert backward_issue_order(g, ()) == g and backward_issue_order((), r) == r
