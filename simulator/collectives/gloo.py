"""What torch's ProcessGroupGloo runs for each collective on dense CPU tensors, the home of the rules that price it.

- :data:`GLOO_NATIVE`: the registered algorithm gloo runs for an op (what ``auto`` means on a gloo cluster).
- :data:`WHOLE_ALL_REDUCE`: ops ProcessGroupGloo runs as an all-reduce of the WHOLE input, then a copy of the
  rank's share out (:func:`whole_all_reduce_copy_s`): reduce-scatter.

Reduce-scatter. torch 2.13's ``ProcessGroupGloo::_reduce_scatter_base`` calls
``reduce_scatter_tensor_coalesced``, which copies each input into one buffer, all-reduces the whole buffer
(``gloo::allreduce``: the ring of :data:`GLOO_NATIVE`) and copies the rank's ``chunk(worldSize)[rank]`` out
[src: gloo-native-algorithms] (both symbols are in the installed ``torch/lib/libtorch_cpu.so``, whose wheel
ships no C++ sources), and a timing probe agrees: a native 16 MiB reduce-scatter took as long as the all-reduce
of the same input or longer, never near the all-gather's half [src: own-gloo-reduce-scatter-probe]. So on a gloo
cluster a reduce-scatter of ``n`` bytes costs

    T_rs(n) = T_ring_all_reduce(n) + 2·(n + n/p) / hbm_bw · share

the all-reduce gloo runs on the whole ``n`` (call overhead, hops, bytes, reduction: :mod:`.ring`) plus the
copies in and out (each byte read and written once: ``2·(n + n/p)`` bytes of device memory, at the node's
time-sharing ``share``, :attr:`simulator.collectives.cost.Env.time_share`): on localhost-cpu's preset numbers at
4 processes, 1.9× the ring reduce-scatter's closed form at 1 MiB and 1.6× at 4 KiB.
"""

from __future__ import annotations

from simulator.collectives.base import Op
from simulator.collectives.cost import Env

GLOO_NATIVE: dict[Op, str] = {
    Op.ALL_REDUCE: "ring",
    Op.ALL_GATHER: "ring",
    Op.BROADCAST: "recursive_doubling",
    Op.ALL_TO_ALL: "direct",
}
"""The registered algorithm torch's ProcessGroupGloo runs for each op on dense CPU tensors (what ``auto`` means
on a gloo cluster):

- all-reduce: ``AsyncAllreduceWork`` calls ``gloo::allreduce`` without choosing an algorithm, and gloo's
  ``allreduce.cc`` runs a ring reduce-scatter then a ring all-gather, each chunk cut into >= 2 segments so one
  is in flight while the other is reduced [src: gloo-native-algorithms] (``ring``);
- all-gather (``all_gather_into_tensor`` is ``_allgather_base`` → ``allgather``): ``gloo::allgather``, a ring of
  ``p − 1`` steps, each rank's block sent in two halves [src: gloo-native-algorithms] (``ring``);
- broadcast: ``gloo::broadcast``, a binomial tree of ``⌈lg p⌉`` rounds from the root
  [src: gloo-native-algorithms] (``recursive_doubling``'s broadcast is that tree);
- all-to-all: ``gloo::alltoall`` posts every rank's ``p − 1`` sends and receives at once, then waits
  [src: gloo-native-algorithms] (``direct``).

Reduce-scatter is :data:`WHOLE_ALL_REDUCE` (module docstring); reduce and send-recv are not read, so ``auto``
keeps choosing the fastest registered algorithm for them."""

WHOLE_ALL_REDUCE: frozenset[Op] = frozenset({Op.REDUCE_SCATTER})
"""Ops ProcessGroupGloo runs as the all-reduce of the whole input, then keeps the rank's share (module
docstring) [src: gloo-native-algorithms]."""

COPY_PASSES = 2
"""Bytes of device memory per byte copied: read once, written once."""


def runs_own(op: Op) -> bool:
    """Whether ``auto`` on a gloo cluster prices ``op`` as what gloo runs (:data:`GLOO_NATIVE` or
    :data:`WHOLE_ALL_REDUCE`) rather than the fastest registered algorithm."""
    return op in GLOO_NATIVE or op in WHOLE_ALL_REDUCE


def whole_all_reduce_copy_s(env: Env, nbytes: int, p: int) -> float:
    """The copies around a :data:`WHOLE_ALL_REDUCE` op: ``2·(n + n/p) / hbm_bw · share`` seconds (the input
    into the all-reduce's buffer, the rank's share out; module docstring)."""
    copied = nbytes + nbytes / p
    return COPY_PASSES * copied / (env.cluster.device.hbm_bw_GBps * 1e9) * env.time_share
