"""Compute/communication interference: an overlapped collective takes SMs from the compute it overlaps.

A collective kernel runs one CUDA block per channel, each on an SM the GEMMs and elementwise kernels
then do not have (NCCL: "reducing the number of channels also reduces the number of CUDA blocks
used for communication, hence the impact on GPU computing resources" [src: nccl-env]). While it
runs, compute progresses at ``1 − f`` of its rate, with the *fraction of SMs taken*

    f = min(1, comm.collective_sms / device.sm_count)             (0 without sm_count)

So compute of ``C`` seconds that a collective overlaps for ``D ≤ C`` seconds of it takes
``D + (C − (1 − f)·D) = C + f·D``: the stretch is ``f`` × the overlapped communication time. The
engines apply it, to first order (the stretch is not itself overlapped again), where a collective
runs under compute:

- gradient buckets under the last backward (:func:`simulator.analytical.summarize`, and the DES at
  the end of that backward): the backward ends ``f·H`` later, ``H`` the bucket time inside it; the
  buckets keep their ready times (they follow the backward's work, not its clock), so the step
  grows by ``max(0, f·H − tail)`` where ``tail`` is what the buckets ran past the backward;
- ZeRO-3 all-gathers prefetched under the previous block (:func:`simulator.analytical.exposed_gathers`
  and the DES's blocks): block i lasts ``t + f·o_i``, ``o_i`` the part of gather i+1 inside block i's
  ``t`` seconds.

Only calls played as collectives take SMs (host copies use the copy engines; pipeline sends and the
blocking tensor-parallel calls overlap no compute here). The memory bandwidth a collective's copies
take is not modelled separately: its SM share is the named term. The α-β times of the collectives
themselves do not change. Where the slowdown goes in the breakdown: to the category of the
collective that caused it (DP, ZeRO), as exposed communication cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.work import CommCall, Transport

if TYPE_CHECKING:
    from simulator.cluster.spec import Cluster


def sm_fraction(collective_sms: int, sm_count: int | None) -> float:
    """Fraction of the device's SMs an overlapped collective takes: ``min(1, collective_sms / sm_count)``,
    0 for a device without ``sm_count`` (a CPU) or a file without ``comm.collective_sms``."""
    if not sm_count or collective_sms <= 0:
        return 0.0
    return min(1.0, collective_sms / sm_count)


def cluster_sm_fraction(cluster: "Cluster") -> float:
    """:func:`sm_fraction` of a cluster's own ``comm.collective_sms`` and ``device.sm_count``: the one
    place both the compiled step and the closed form's structures read it from."""
    return sm_fraction(cluster.comm.collective_sms, cluster.device.sm_count)


def takes_sms(call: CommCall) -> bool:
    """Whether ``call`` runs a collective kernel on the SMs (not a host copy or host fetch, a p2p send, a timed remainder)."""
    return call.transport is Transport.COLLECTIVE


def overlap_s(a0: float, a1: float, b0: float, b1: float) -> float:
    """Length of the intersection of the intervals [a0, a1] and [b0, b1] (0 if they do not meet)."""
    return max(0.0, min(a1, b1) - max(a0, b0))
