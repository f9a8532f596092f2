"""The flow network with its flows in a store (:mod:`simulator.engine.flow_store`): big settles on arrays.

:class:`StoredNetwork` is :class:`~simulator.engine.network.FlowNetwork` (the same model, the same results to the
bit) whose flows keep their state in arrays. A settle whose re-rated flows cross at least ``VECTOR_MIN_HOPS``
(flow, resource) pairs, the size from which progressive filling is the level filler, is done on arrays
(:mod:`simulator.engine.settle_arrays`): the walk one level of the flow–resource graph per pass, the progress
element-wise, the level filling on the pairs, the changed finishes grouped by value and filed as :class:`Block` s.
Smaller settles run the object code (the heap filler's ties depend on the walk's order; the level filler reads the
flows' order only through counts per resource, so the array walk's order gives the same rates there).

Why the results are the same bits (tested by ``tests/test_engine_store.py``, both paths forced on every settle):
- the array walk meets the same flows (the active flows connected to the seeds' resources), the progress is the
  same IEEE operations element by element, and the filler is chosen by the same pair count;
- finishes filed in another order or grouping cannot matter: a settle takes its due flows in creation order
  (:meth:`FlowNetwork._apply`), and a bucket's validity is per flow (version and activity);
- the finished flows complete in creation order, as on the object path.

Whether a settle is big is known only after its walk and progress, so every settle that could be (the store holds
at least ``VECTOR_MIN_HOPS`` pairs, less the arrivals') is tried on arrays, and done on objects if it is small
(:meth:`StoredNetwork._apply_arrays` returns before writing anything). That choice changes time, not results. A
failed try costs a few numpy passes over the pairs (~0.1 ms at 65,536 GPUs); the bounded walk over the objects that
used to decide first cost ~0.3 ms when it said yes (``docs/engine.md``, the eighteenth session).
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import chain, repeat
from operator import attrgetter

import numpy as np
import simpy

from simulator.engine import fairshare
from simulator.engine.flow_store import Block, Pairs, Store, StoredFlow
from simulator.engine.flows import Flow, _Group, _Route
from simulator.engine.network import FlowNetwork, _fid
from simulator.engine.settle_arrays import finish_times, frontier_walk, level_rates, progress

class StoredNetwork(FlowNetwork):
    """A :class:`FlowNetwork` whose flows live in a :class:`Store`, big settles done on arrays (module docstring)."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        self._store = Store()
        self._pairs = Pairs()
        self._cap_np = np.zeros(0)
        self.array_settles = 0
        """Settles done on arrays (a count for benchmarks and tests)."""
        self.array_tries = 0
        """Settles tried on arrays, those found small then done on objects included (a count for tests)."""

    def _new_flow(self, fid: int, route: _Route, nbytes: float, start_s: float, group: _Group | None) -> Flow:
        return self._new_flows(fid, [route], [nbytes], start_s, group)[0]

    def _new_flows(self, fid: int, routes: list, nbytes: list, start_s: float, group: _Group | None) -> list[Flow]:
        store = self._store
        first = store.reserve(len(routes))
        n = len(routes)  # the same flows as one StoredFlow(...) per (route, bytes), without a Python loop around them
        flows = list(map(StoredFlow, repeat(store, n), range(first, first + n), range(fid, fid + n), routes, nbytes,
                         repeat(start_s, n), repeat(group, n)))
        store.flows.extend(flows)
        store.started(first, nbytes, start_s, list(map(_bottleneck, routes)))
        return flows

    def _activated(self, flows: list[Flow]) -> None:
        flows = [f for f in flows if f.nbytes > 0]  # the arrivals of no bytes end at once, never active
        if flows:
            self._pairs.add(flows)

    def _due_flows(self, limit: float) -> "_Due":
        """The due flows in creation order (slot order: no sort by key), with their slots."""
        blocks: list[np.ndarray] = []
        single: list[int] = []
        times, buckets, store = self._due_times, self._due, self._store
        while times and times[0] <= limit:
            for entry in buckets.pop(heappop(times)):
                if type(entry) is Block:
                    blocks.append(entry.live(store))
                elif entry[0].version == entry[1] and entry[0].active:
                    single.append(entry[0]._slot)
        if single:
            blocks.append(np.array(single, dtype=np.int64))
        slots = np.sort(np.concatenate(blocks)) if blocks else _NO_SLOTS  # a block is in row (activation) order
        due = _Due(map(store.flows.__getitem__, slots.tolist()))
        due.slots = slots
        return due

    def _live(self, bucket: list) -> bool:
        store = self._store
        return any(entry.live(store).size if type(entry) is Block else entry[0].version == entry[1] and entry[0].active
                   for entry in bucket)

    def _apply(self, now: float, slack: float, arrivals: list[Flow], due: list[Flow]) -> None:
        if len(due) > 1 and type(due) is not _Due:
            due.sort(key=_fid)
        arriving = [f for f in arrivals if f.nbytes > 0]  # the arrivals of no bytes end at once, never active
        arriving_hops = sum([len(f.res) for f in arriving])
        budget = fairshare.VECTOR_MIN_HOPS - arriving_hops
        if budget <= 0 or self._pairs.pair_res.size >= budget:  # the pairs: an upper bound on the active flows'
            self.array_tries += 1
            if self._apply_arrays(now, slack, arrivals, due, arriving, arriving_hops):
                self.array_settles += 1
                return
        super()._apply(now, slack, arrivals, due)

    def _finished(self, flows: list[Flow]) -> None:
        """The store lets go of finished flows (they live on as their group's value while callers hold them)."""
        slots = self._store.flows
        for f in flows:
            slots[f._slot] = None

    def _apply_arrays(self, now: float, slack: float, arrivals: list[Flow], due: list[Flow], arriving: list[Flow],
                      arriving_hops: int) -> bool:
        """:meth:`FlowNetwork._apply` on arrays, if its re-rated flows cross at least ``VECTOR_MIN_HOPS`` pairs;
        False (nothing changed) if not. ``arriving``: the arrivals of some bytes, crossing ``arriving_hops`` pairs."""
        st, pairs = self._store, self._pairs
        alive = pairs.live(st.active)
        seeds = np.fromiter(chain.from_iterable([f.res for f in arrivals]), dtype=np.int64)
        on = alive[pairs.pair_row]
        due_slots = due.slots if type(due) is _Due else np.fromiter([f._slot for f in due], np.int64, len(due))
        st.is_due[due_slots] = True
        if len(due) > 0:  # the due flows' resources read off their pairs (a due flow is active: its row alive)
            seeds = np.concatenate((pairs.pair_res[st.is_due[pairs.row_slot][pairs.pair_row]], seeds))
        walked_rows, _ = frontier_walk(pairs.pair_row[on], pairs.pair_res[on], alive.size, len(self._cap), seeds)
        walked = pairs.row_slot[walked_rows]
        is_due = st.is_due[walked]
        st.is_due[due_slots] = False
        moved, left, done = progress(st.rate[walked], st.t_last[walked], st.remaining[walked], st.nbytes[walked],
                                     is_due, now, slack)
        in_rerate = np.zeros(alive.size, dtype=bool)
        in_rerate[walked_rows[~done]] = True
        if int(in_rerate[pairs.pair_row].sum()) + arriving_hops < fairshare.VECTOR_MIN_HOPS:
            return False
        st.delivered[walked] += moved
        kept = walked[~done]
        st.remaining[kept] = left[~done]
        st.t_last[kept] = now
        ended = np.sort(walked[done])  # creation order, as the completions go
        st.active[ended] = False
        finished = list(map(st.flows.__getitem__, ended.tolist()))
        self._active -= len(finished)
        res_flows = self._res_flows
        for f in finished:
            fid = f.fid
            for r in f.res:
                del res_flows[r][fid]
        zero: list[Flow] = []
        for f in arrivals:
            f.active_s = now
            if f.nbytes <= 0:
                f.t_last = now
                zero.append(f)
                continue
            fid = f.fid
            for r in f.res:
                res_flows[r][fid] = f
        if arriving:
            slots = np.fromiter([f._slot for f in arriving], np.int64, len(arriving))
            st.t_last[slots], st.active[slots] = now, True
            self._active += len(arriving)
            in_rerate = np.concatenate((in_rerate, np.ones(len(arriving), dtype=bool)))
            pairs.add(arriving)
        if self._active > self.stats.max_active:
            self.stats.max_active = self._active
        self._rate_arrays(now, in_rerate)
        if zero:  # arrivals of no bytes end now too, merged into creation order
            finished += zero
            finished.sort(key=_fid)
            ended = np.fromiter([f._slot for f in finished], np.int64, len(finished))
        self._complete(now, finished, ended)
        return True

    def _rate_arrays(self, now: float, in_rerate: np.ndarray) -> None:
        """Max-min rates of the rows ``in_rerate`` (a union of components) and their changed finishes filed."""
        st, pairs = self._store, self._pairs
        rows = np.flatnonzero(in_rerate)
        if not rows.size:
            return
        self.stats.rerated_flows += rows.size
        slots = pairs.row_slot[rows]
        on = in_rerate[pairs.pair_row]
        local_row = (np.cumsum(in_rerate) - 1)[pairs.pair_row[on]]
        used, local_res = fairshare._numbered(pairs.pair_res[on], int(on.sum()))
        rates = level_rates(local_row, local_res, rows.size, self._capacities()[used], st.bottleneck[slots])
        before = st.rate[slots]
        st.rate[slots] = rates
        changed, instants, bucket = finish_times(before, rates, st.remaining[slots], now)
        filed = slots[changed]
        st.version[filed] += 1
        versions = st.version[filed]
        order = np.argsort(bucket, kind="stable")
        bounds = np.cumsum(np.bincount(bucket, minlength=instants.size)).tolist()
        buckets, times = self._due, self._due_times
        start = 0
        for t, end in zip(instants.tolist(), bounds):
            block = Block(filed[order[start:end]], versions[order[start:end]])
            start = end
            entry = buckets.get(t)
            if entry is None:
                buckets[t] = [block]
                heappush(times, t)
            else:
                entry.append(block)

    def _complete(self, now: float, finished: list[Flow], slots: np.ndarray) -> None:
        """The finished flows (in creation order, at ``slots``) done: their groups' events fire as on the object
        path."""
        st = self._store
        st.remaining[slots] = 0.0
        st.rate[slots] = 0.0
        for f in finished:
            st.flows[f._slot] = None  # as _finished
            f.finish_s = now
            group = f.group
            f.group = None
            group.left -= 1
            if group.left == 0:
                group.event.succeed(group.flows[0] if group.single else group.flows)

    def _capacities(self) -> np.ndarray:
        """The resources' capacities as an array (the same floats as ``_cap``), rebuilt when resources were added."""
        if self._cap_np.size != len(self._cap):
            self._cap_np = np.array(self._cap, dtype=float)
        return self._cap_np


_bottleneck = attrgetter("bottleneck_Bps")  # a route's, which its flow copies


class _Due(list):
    """A settle's due flows in creation order, with their slots (``slots``, increasing): what
    :meth:`StoredNetwork._due_flows` returns, so that a big settle reads the slots and seeds without a loop per flow."""

    __slots__ = ("slots",)


_NO_SLOTS = np.zeros(0, dtype=np.int64)

STORE_MIN_RANKS = 16_384
"""Ranks from which a step's main network keeps its flows in a store (:class:`StoredNetwork`); below, the object
network (:class:`~simulator.engine.network.FlowNetwork`). Both give the same bits (``tests/test_engine_store.py``);
only the CPU differs. Measured 2026-11-26, 2-core VM, load < 1, simulate CPU s store vs objects, alternated
(docs/engine.md, "Which network a step uses"): bench_des's step 0.13 vs 0.14 at 1,024 GPUs, 0.61 vs 0.60 at 8,192,
1.46–1.50 vs 1.49–1.50 at 16,384, 4.89–5.31 vs 5.51–5.57 at 32,768; the GPT-3 175B plan at 1,024 GPUs that
`trainplan plan` refines (dp 32, tp 4, pp 8, interleaved; many small settles read through the store's properties)
0.73–0.75 vs 0.56 s."""


def main_network(env, world_size: int) -> FlowNetwork:
    """The main network of a step of ``world_size`` ranks (:data:`STORE_MIN_RANKS`)."""
    return StoredNetwork(env) if world_size >= STORE_MIN_RANKS else FlowNetwork(env)
