"""Which op ProcessGroupGloo runs for another: the leaf of :mod:`simulator.collectives.gloo` that the cost machinery
(:mod:`simulator.collectives.cost`, which gloo.py builds on) reads too, so the rule has one home and no import cycle."""

from __future__ import annotations

from simulator.cluster.comm import CommLibrary, CommProfile
from simulator.collectives.base import Op

WHOLE_ALL_REDUCE: frozenset[Op] = frozenset({Op.REDUCE_SCATTER})
"""Ops ProcessGroupGloo runs as the all-reduce of the whole input, then keeps the rank's share
(:mod:`simulator.collectives.gloo`'s module docstring) [src: gloo-native-algorithms]."""


def waits_as(comm: CommProfile, op: Op | None) -> Op | None:
    """The op whose wait for a core (``comm.op_wait_us``) a call of ``op`` pays under ``comm``: on gloo a
    :data:`WHOLE_ALL_REDUCE` op is the all-reduce of its whole input, whatever algorithm a plan names
    (ProcessGroupGloo chooses none), so it waits as the all-reduce; else ``op``."""
    if op in WHOLE_ALL_REDUCE and comm.library is CommLibrary.GLOO:
        return Op.ALL_REDUCE
    return op
