"""Which folded holder reserves which resources of a flow network, kept per holder as bit masks.

The network's folded runs and calls (:mod:`simulator.engine.fold_run`, :mod:`simulator.engine.callfold`)
reserve the resources their flows would cross while they play them as delays. The rule is the one a map
``resource → holder`` gives (and gave, before this module):

- ``reserve(holder, res)`` makes ``holder`` the owner of every resource of ``res`` (a later reservation
  takes a resource from an earlier holder for good);
- ``release(holder)`` frees the resources ``holder`` still owns;
- a resource is reserved while some holder owns it.

Kept per holder rather than per resource: a holder's resources are one integer bit mask (bit ``r`` for
resource ``r``), its *owned* mask that mask less what later reservations took, and the network's reserved
mask the union of the owned masks (disjoint by construction). A reservation, a release and the check that
a collection is free are then a few big-integer operations, not one dictionary update per resource (a
folded dp call at 1,024 GPUs reserves ~150–700 resources, ~125,000 times in GPT-3 175B's refinement of
issue 8). The masks of the collections the folders pass again and again (a call shape's resources, a
call's, a plan's suffix) are computed once per collection object and kept with it (:meth:`mask`).
Which holders an arriving flow meets, in the order the map gave them (first appearance over the flows and
their resources), is :meth:`holders_met`.
"""

from __future__ import annotations

from itertools import chain
from typing import Collection


def bits(res: Collection[int]) -> int:
    """The mask with bit ``r`` set for every ``r`` in ``res`` (0 for none)."""
    if not res:
        return 0
    buf = bytearray((max(res) >> 3) + 1)
    for r in res:
        buf[r >> 3] |= 1 << (r & 7)
    return int.from_bytes(buf, "little")


class _Held:
    """One holder's reservation: its resources (as passed), their mask and the part it still owns."""

    __slots__ = ("holder", "res", "full", "owned", "_set")

    def __init__(self, holder, res: Collection[int], full: int):
        self.holder, self.res, self.full, self.owned, self._set = holder, res, full, full, None

    def owns(self, r: int) -> bool:
        return (self.owned >> r) & 1 == 1

    def as_set(self) -> frozenset:
        if self._set is None:
            self._set = self.res if isinstance(self.res, frozenset) else frozenset(self.res)
        return self._set


class Reservations:
    """The reservations of one network (module docstring); ``masks`` may be shared by networks that number
    resources alike (a scratch network shares its main network's)."""

    def __init__(self, masks: dict[int, tuple] | None = None):
        self.reserved = 0
        """The union of every holder's owned mask: nonzero while anything is reserved."""
        self._held: dict[int, _Held] = {}  # id(holder) → its reservation, in reservation order
        self._masks = {} if masks is None else masks

    def mask(self, res: Collection[int]) -> int:
        """:func:`bits` of ``res``, remembered per collection object (kept alive with it: its id stays its own)."""
        entry = self._masks.get(id(res))
        if entry is not None and entry[0] is res:
            return entry[1]
        m = bits(res)
        self._masks[id(res)] = (res, m)
        return m

    def free(self, res: Collection[int]) -> bool:
        """No resource of ``res`` reserved."""
        return not (self.reserved and self.reserved & self.mask(res))

    def reserve(self, holder, res: Collection[int], mask: int | None = None) -> None:
        """``holder`` owns every resource of ``res`` (``mask``: their mask, when the caller has it)."""
        m = self.mask(res) if mask is None else mask
        if not m:
            return
        if self.reserved & m:  # taken from earlier holders for good, as a map's entries are overwritten
            keep = ~m
            for key, held in list(self._held.items()):
                if held.owned & m:
                    held.owned &= keep
                    if not held.owned:
                        del self._held[key]
        held = self._held.get(id(holder))
        if held is not None and held.holder is holder:  # a second reservation adds to the first
            held.res = tuple(dict.fromkeys(chain(held.res, res)))
            held.full |= m
            held.owned |= m
            held._set = None
        else:
            self._held[id(holder)] = _Held(holder, res, m)
        self.reserved |= m

    def release(self, holder) -> None:
        """Free what ``holder`` still owns (nothing, if it owns nothing)."""
        held = self._held.get(id(holder))
        if held is not None and held.holder is holder:
            del self._held[id(holder)]
            self.reserved &= ~held.owned

    def holders(self, res: Collection[int]) -> list:
        """The holders that own a resource of ``res``, in reservation order."""
        if not self.reserved:
            return []
        m = self.mask(res)
        return [held.holder for held in self._held.values() if held.owned & m]

    def holders_met(self, flows: list) -> list:
        """The holders owning a resource that ``flows`` cross, each once, in the order of the first such
        resource over ``flows`` and each flow's resources (``flow.res``)."""
        if not self.reserved or not flows:
            return []
        crossed = set(chain.from_iterable([f.res for f in flows]))
        met = [held for held in self._held.values() if not held.as_set().isdisjoint(crossed)
               and (held.owned == held.full or any(held.owns(r) for r in crossed.intersection(held.as_set())))]
        if len(met) <= 1:
            return [held.holder for held in met]
        order: dict[int, object] = {}
        for f in flows:
            for r in f.res:
                for held in met:
                    if r in held.as_set() and held.owns(r):
                        order.setdefault(id(held), held.holder)
                        break
            if len(order) == len(met):
                break
        return list(order.values())
