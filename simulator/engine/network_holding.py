"""The flow network's resources (:class:`~simulator.engine.network.FlowNetwork` mixes :class:`Holding` in): a path
as resource indices (one per directional link instance, numbered on first use; a transfer's items checked and
routed), and what folding (:mod:`simulator.engine.fold`, :mod:`simulator.engine.callfold`) asks of them: a path's
indices and bottleneck, whether resources are idle, and who holds them off the network (reservations) and is put
back when a flow arrives on them."""

from __future__ import annotations

import math
from typing import Collection, Iterable

from simulator.cluster.topology import Path
from simulator.engine.flows import Flow, _Route
from simulator.errors import SpecError


class Holding:
    """Resource part of :class:`~simulator.engine.network.FlowNetwork` (on its ``_routes``, ``_res_index``,
    ``_cap``, ``_res_flows``, ``_active`` and ``_reservations``)."""

    def _route(self, path: Path) -> _Route:
        """``path`` as resource indices, numbering its links on first use (cached per Path object); a link instance
        met again with another bandwidth is a :class:`SpecError`."""
        cached = self._routes.get(id(path))
        if cached is not None and cached.path is path:
            return cached
        res: list[int] = []
        for hop in path.hops:
            idx = self._res_index.get(hop.resource)
            bw = hop.link.bw_Bps
            if idx is None:
                idx = self._res_index[hop.resource] = len(self._cap)
                self._cap.append(bw)
                self._res_flows.append({})
            elif not math.isclose(self._cap[idx], bw, rel_tol=1e-12):
                raise SpecError("path", f"resource {hop.resource} has bandwidth {bw} B/s here and "
                                f"{self._cap[idx]} B/s elsewhere; one link instance has one bandwidth")
            if idx not in res:
                res.append(idx)
        if not res:
            raise SpecError("path", "a path needs at least one hop")
        route = _Route(path, tuple(res), min(self._cap[r] for r in res))
        self._routes[id(path)] = route  # keeps the path alive, so its id stays unique
        return route

    def _checked(self, items: Iterable[tuple[Path, float, float | None]]) -> tuple[list, list, list]:
        """The items' routes, bytes (float) and latencies, checked (finite, non-negative)."""
        routes_out, bytes_out, latencies = [], [], []
        route_of, routes = self._route, self._routes
        for path, nbytes, latency_s in items:
            latency = path.latency_s if latency_s is None else latency_s
            nbytes = float(nbytes)
            if not (0.0 <= nbytes < math.inf and 0.0 <= latency < math.inf):  # NaN fails both
                _reject(nbytes, latency)
            route = routes.get(id(path))  # _route's cache, looked up here: one call less per flow
            routes_out.append(route if route is not None and route.path is path else route_of(path))
            bytes_out.append(nbytes)
            latencies.append(latency)
        return routes_out, bytes_out, latencies

    def resources(self, path: Path) -> tuple[int, ...]:
        """Resource indices ``path`` crosses (the indices :attr:`Flow.res` holds)."""
        return self._route(path).res

    def bottleneck_Bps(self, path: Path) -> float:
        """Least capacity on ``path``: the rate of a flow that shares none of its resources."""
        return self._route(path).bottleneck_Bps

    def idle(self, res: Collection[int]) -> bool:
        """No active flow on any of ``res`` and none of them reserved."""
        rs = self._reservations
        if rs.reserved and rs.reserved & rs.mask(res):
            return False
        return not (self._active and any(map(self._res_flows.__getitem__, res)))  # none active: all idle

    def mask(self, res: Collection[int]) -> int:
        """The bit mask of ``res`` (remembered per collection object: pass ones that are kept)."""
        return self._reservations.mask(res)

    def reserve(self, holder, res: Collection[int], mask: int | None = None) -> None:
        """``holder`` owns ``res`` until it releases them or a later reservation takes them
        (:mod:`simulator.engine.reservations`; ``mask``: their bit mask, when the caller has it)."""
        self._reservations.reserve(holder, res, mask)

    def release(self, holder, res: Collection[int] = ()) -> None:
        """Free the resources ``holder`` still owns (``res``, what it reserved, is not needed)."""
        self._reservations.release(holder)

    def holders(self, res: Collection[int]) -> list:
        """The holders owning a resource of ``res`` (reservation order)."""
        return self._reservations.holders(res)

    def _unfold(self, arrivals: list[Flow]) -> None:
        """Holders of resources that arriving flows cross put their state back (they may add arrivals), in the
        order of the first such resource over the arrivals."""
        for holder in self._reservations.holders_met(arrivals):
            holder.unfold(arrivals)


def _reject(nbytes: float, latency: float) -> None:
    if not 0.0 <= nbytes < math.inf:
        raise SpecError("nbytes", f"a transfer needs a finite, non-negative byte count, got {nbytes!r}")
    raise SpecError("latency_s", f"must be finite and non-negative, got {latency!r}")
