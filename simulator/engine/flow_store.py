"""A flow store: the flows of one network with their changing state in arrays, and their (flow, resource) pairs.

What :class:`~simulator.engine.network_store.StoredNetwork` (the main network of a step) keeps so that a settle of
many flows runs on arrays (:mod:`simulator.engine.settle_arrays`) instead of touching one Python object per flow:

- :class:`Store`: one *slot* per flow, in creation order and never reused, so slot order is flow-id order; per
  slot the rate (B/s), ``t_last`` (s), bytes left and delivered, size, bottleneck (B/s), version and whether active.
  These arrays are the truth: a :class:`StoredFlow` reads and writes them through properties, so every other part
  of the engine (the object settle, folding, callers reading a finished flow) sees one state.
- :class:`Pairs`: every active flow's (row, resource) pairs, a row per flow activation; rows of flows that have
  ended stay until they are more than half the rows, then the arrays are compacted (amortised O(1) per pair).
- :class:`Block`: finishes filed by value in numpy: the slots and versions of flows due at one instant.
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np

from simulator.engine.flows import Flow, _Group, _Route

_FIRST_SLOTS = 1024
"""Slots allocated at first; the arrays double when full."""


class Store:
    """Per-slot state arrays (module docstring), grown by doubling."""

    FLOATS = ("rate", "t_last", "remaining", "delivered", "nbytes", "bottleneck")

    def __init__(self):
        self.size = 0
        for name in self.FLOATS:
            setattr(self, name, np.zeros(_FIRST_SLOTS))
        self.version = np.zeros(_FIRST_SLOTS, dtype=np.int64)
        self.active = np.zeros(_FIRST_SLOTS, dtype=bool)
        self.is_due = np.zeros(_FIRST_SLOTS, dtype=bool)
        """Scratch: set for a settle's due flows while it reads them, all False between settles."""
        self.flows: list[StoredFlow | None] = []
        """Slot → its flow while it is unfinished (None after: the store does not keep finished flows alive)."""

    def reserve(self, n: int) -> int:
        """``n`` new slots (their flows appended to :attr:`flows` by the caller); the first of them."""
        first = self.size
        if first + n > self.rate.size:
            capacity = max(2 * self.rate.size, first + n)
            for name in (*self.FLOATS, "version", "active", "is_due"):
                old = getattr(self, name)
                grown = np.zeros(capacity, dtype=old.dtype)
                grown[:first] = old[:first]
                setattr(self, name, grown)
        self.size = first + n
        return first

    def started(self, first: int, nbytes: list[float], start_s: float, bottleneck_Bps: list[float]) -> None:
        """The state of new flows at slots ``first``, ``first + 1``, …: their sizes, start and bottlenecks."""
        end = first + len(nbytes)
        self.remaining[first:end] = self.nbytes[first:end] = nbytes
        self.t_last[first:end] = start_s
        self.bottleneck[first:end] = bottleneck_Bps


def _stored(name: str) -> property:
    def get(flow):
        return getattr(flow._st, name).item(flow._slot)

    def put(flow, value):
        getattr(flow._st, name)[flow._slot] = value
    return property(get, put, doc=f"The store's ``{name}`` at this flow's slot.")


class StoredFlow(Flow):
    """A :class:`~simulator.engine.flows.Flow` whose changing state lives in a :class:`Store` (same fields)."""

    __slots__ = ("_st", "_slot")

    rate = _stored("rate")
    t_last = _stored("t_last")
    remaining = _stored("remaining")
    delivered_bytes = _stored("delivered")
    version = _stored("version")
    active = _stored("active")

    def __init__(self, store: Store, slot: int, fid: int, route: _Route, nbytes: float, start_s: float,
                 group: _Group | None):
        """A flow at ``slot`` (reserved; its state written by :meth:`Store.started`)."""
        self._st, self._slot = store, slot
        self.fid, self.path, self.res, self.bottleneck_Bps = fid, route.path, route.res, route.bottleneck_Bps
        self.nbytes, self.start_s, self.group = nbytes, start_s, group
        self.mark = self.due = 0
        self.active_s = self.finish_s = math.nan


class Pairs:
    """The (row, resource) pairs of active flows (module docstring): ``row_slot[k]`` is row ``k``'s flow slot."""

    def __init__(self):
        self.row_slot = np.zeros(0, dtype=np.int64)
        self.pair_row = np.zeros(0, dtype=np.int64)
        self.pair_res = np.zeros(0, dtype=np.int64)

    def add(self, flows: list[StoredFlow]) -> np.ndarray:
        """Rows for ``flows`` (just activated), their pairs appended; returns the new rows."""
        routes = [f.res for f in flows]
        hops = sum(map(len, routes))
        start = self.row_slot.size
        rows = np.arange(start, start + len(flows))
        self.row_slot = np.concatenate((self.row_slot, np.fromiter([f._slot for f in flows], np.int64, len(flows))))
        lengths = np.fromiter(map(len, routes), np.int64, len(flows))
        self.pair_row = np.concatenate((self.pair_row, np.repeat(rows, lengths)))
        self.pair_res = np.concatenate((self.pair_res, np.fromiter(chain.from_iterable(routes), np.int64, hops)))
        return rows

    def live(self, active: np.ndarray) -> np.ndarray:
        """Which rows hold an active flow, compacting first when ended rows are the majority."""
        alive = active[self.row_slot]
        if 2 * int(alive.sum()) < alive.size:
            keep = alive[self.pair_row]
            renumber = np.cumsum(alive) - 1
            self.pair_row = renumber[self.pair_row[keep]]
            self.pair_res = self.pair_res[keep]
            self.row_slot = self.row_slot[alive]
            alive = np.ones(self.row_slot.size, dtype=bool)
        return alive


class Block:
    """Flows filed to finish at one instant by an array settle: their slots and the versions they were filed at."""

    __slots__ = ("slots", "versions")

    def __init__(self, slots: np.ndarray, versions: np.ndarray):
        self.slots, self.versions = slots, versions

    def live(self, store: Store) -> np.ndarray:
        """The slots still active at the version they were filed at, in increasing order (creation order)."""
        ok = (store.version[self.slots] == self.versions) & store.active[self.slots]
        return self.slots[ok]
