"""What the main network's settles walk at 512 nodes and up, and what a flow store in arrays could save there.

The step of ``bench_des.measure`` (GPT-3 175B, tp 8 × pp 8, 96 micro-batches, full recompute), each size in a fresh
process. Every settle of the main network (the first :class:`~simulator.engine.network.FlowNetwork` made) that
applies a start or an end walks the active flows connected to the resources of its due and arriving flows
(``FlowNetwork._apply``), brings each to now and hands the kept ones and the arrivals to progress filling. Counted
per settle (counts, not times, so the same at any load):

- *walked*: the active flows the walk meets; *active*: every active flow then; *big*: settles whose walked flows and
  arrivals cross at least ``VECTOR_MIN_HOPS`` (flow, resource) pairs, where progressive filling is numpy's
  level-by-level filler (:func:`~simulator.engine.fairshare._max_min_levels`, which gives the same rates in any order
  of the flows, so only there could a walk in another order give the same bits).
- *one record* / *same*: the walked flows were all kept by one earlier settle (its *record*: the flows it handed to
  the filler), and of those, the walked set is exactly that record's flows still active. A registry of components
  kept between settles could know *same* settles' flows without walking (it would still have to prove the record
  one component); the other settles merge records or walk part of one.
- *changed*: re-rated flows whose rate changed (an unchanged rate keeps its finish entry).

Sampled settles (every ``SAMPLE_EVERY``-th big one) are copied out (every active flow's route and state, the
arrivals, the seeds, the capacities), the engine's CPU time for each is taken (``_apply`` with its re-rating and
filing, on its own, cold flows), and after the step each is settled again: by the engine's depth-first walk with its
per-flow progress in Python on fresh copies (walk only), and on arrays (:mod:`settle_arrays`: frontier walk,
progress, level filling, the refiled flows' finish times grouped by value; the pairs numbered beforehand, as a store
would keep them; not the groups' completions). The array settle is
compared with what the engine did: the flows walked, those ended and their bytes left, and, where the union is large
enough for the level filler, the rates, to the bit. Times are CPU s, noisy on a shared machine; the frontier's levels
(passes, each a few numpy calls) are counted.

Run by hand: ``python benchmarks/bench_des_settles.py [--gpus 32768 65536]``.
"""

from __future__ import annotations

import math
import os
import sys
import time
from itertools import chain

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from simulator.engine import settle_arrays  # noqa: E402
from simulator.engine.fairshare import VECTOR_MIN_HOPS  # noqa: E402

SAMPLE_EVERY = 25
"""Every how many big settles one is copied out for the walk timings."""


def registry_counts(settles: list[tuple[frozenset, frozenset, int]]) -> dict:
    """Counts over ``settles``, each (walked flows, flows kept for re-rating after it, pairs it crossed), in order:
    settles, walked flows, big ones (at least ``VECTOR_MIN_HOPS`` pairs) and their walked flows, and of the big
    ones those whose walked flows were all last kept by one earlier settle (``one``) and those whose walked flows are
    exactly that settle's kept flows less the ones that ended since (``same``); flows counted in walked flows."""
    owner: dict = {}
    records: list[frozenset] = []
    ended: set = set()
    out = dict.fromkeys(("settles", "walked", "big", "big_walked", "one", "one_walked", "same", "same_walked"), 0)
    for walked, kept, pairs in settles:
        n = len(walked)
        out["settles"] += 1
        out["walked"] += n
        if pairs >= VECTOR_MIN_HOPS:
            out["big"] += 1
            out["big_walked"] += n
            owners = {owner.get(f) for f in walked}
            if len(owners) == 1 and None not in owners:
                out["one"] += 1
                out["one_walked"] += n
                if records[owners.pop()] - ended == walked:
                    out["same"] += 1
                    out["same_walked"] += n
        ended |= walked - kept
        for f in kept:
            owner[f] = len(records)
        records.append(kept)
    return out


class _Copy:
    __slots__ = ("res", "mark", "rate", "t_last", "remaining", "delivered_bytes", "due", "nbytes")

    def __init__(self, row: tuple):
        self.res, self.rate, self.t_last, self.remaining, self.nbytes = row[1:6]
        self.mark, self.due, self.delivered_bytes = 0, 0, 0.0


def _python_walk(sample: dict) -> tuple[float, int]:
    """The engine's walk and progress arithmetic (``FlowNetwork._apply``'s loop) on fresh copies: CPU s, flows."""
    copies = [_Copy(row) for row in sample["rows"]]
    res_flows: dict = {}
    for k, f in enumerate(copies):
        for r in f.res:
            res_flows.setdefault(r, {})[k] = f
    now, c0 = sample["now"], time.process_time()
    seen, stack, met = set(sample["seeds"]), list(sample["seeds"]), 0
    while stack:
        for f in res_flows.get(stack.pop(), {}).values():
            if f.mark != 1:
                f.mark, met = 1, met + 1
                for q in f.res:
                    if q not in seen:
                        seen.add(q)
                        stack.append(q)
                moved = f.rate * (now - f.t_last)
                rem = f.remaining - moved
                f.delivered_bytes += moved
                if not (rem <= 1e-12 * f.nbytes):
                    f.remaining, f.t_last = rem, now
    return time.process_time() - c0, met


def _array_settle(sample: dict) -> dict:
    """The sampled settle on arrays (:mod:`settle_arrays`), the pairs of the active flows and the arrivals numbered as
    a store would keep them (not timed), compared with what the engine did: CPU s of the walk, progress, filling and
    finish times, flows, levels, and whether the walked flows, the ended ones, the bytes left and (where the level
    filler rates them) the rates and which of them were refiled are the engine's to the bit."""
    rows, cap, after = sample["rows"], sample["cap"], sample["after"]
    arr = [a for a in sample["arrivals"] if a[2] > 0]  # a zero-byte arrival ends at once, unrated
    routes = [r[1] for r in rows] + [a[1] for a in arr]
    lengths = np.fromiter(map(len, routes), dtype=np.int64, count=len(routes))
    used, res_of = np.unique(np.fromiter(chain.from_iterable(routes), dtype=np.int64, count=int(lengths.sum())),
                             return_inverse=True)
    flow_of = np.repeat(np.arange(len(routes)), lengths)
    on_active = flow_of < len(rows)  # arrivals are not yet on the network while the engine walks
    seeds = np.searchsorted(used, np.array(sample["seeds"], dtype=np.int64))
    capacity = np.array([cap[q] for q in used.tolist()])
    bottleneck = np.array([r[7] for r in rows] + [a[3] for a in arr])
    rate, t_last, rem, nbytes = (np.array([r[k] for r in rows], dtype=float) for k in (2, 3, 4, 5))
    due = np.array([r[6] for r in rows], dtype=bool)
    c0 = time.process_time()
    idx, levels = settle_arrays.frontier_walk(flow_of[on_active], res_of[on_active], len(rows), used.size, seeds)
    _, left, done = settle_arrays.progress(rate[idx], t_last[idx], rem[idx], nbytes[idx], due[idx],
                                          sample["now"], sample["slack"])
    member = np.zeros(len(routes), dtype=bool)
    member[idx[~done]] = True
    member[len(rows):] = True
    in_union = member[flow_of]
    rates = settle_arrays.level_rates(flow_of[in_union], res_of[in_union], len(routes), capacity, bottleneck)
    union = np.flatnonzero(member)
    before = np.concatenate([rate, np.zeros(len(arr))])[union]  # an arrival's rate is 0 until rated
    bytes_left = np.concatenate([rem, [a[2] for a in arr]])
    bytes_left[idx] = left
    changed, instants, _ = settle_arrays.finish_times(before, rates[union], bytes_left[union], sample["now"])
    cpu_s = time.process_time() - c0
    fids = [rows[k][0] for k in idx.tolist()]
    same = (set(fids) == set(after) - {a[0] for a in sample["arrivals"]}
            and all(after[f][0] != d for f, d in zip(fids, done.tolist()))
            and all(after[f][1] == x for f, x in zip(fids, left.tolist()) if after[f][0]))
    fid_of = [r[0] for r in rows] + [a[0] for a in arr]
    version = [r[8] for r in rows] + [a[4] for a in arr]
    same_rates = all(after[fid_of[k]][2] == rates[k] and (after[fid_of[k]][3] != version[k]) == c
                     for k, c in zip(union.tolist(), changed.tolist()))
    return {"cpu_s": cpu_s, "flows": idx.size, "levels": levels, "same": same,
            "big": int(in_union.sum()) >= VECTOR_MIN_HOPS, "same_rates": same_rates}


def measure(gpus: int) -> dict:
    """Simulate ``bench_des``'s step at ``gpus`` GPUs with the main network's settles counted and sampled (the main
    network the object one, :class:`~simulator.engine.network.FlowNetwork`, not the store: its settles are what
    is counted and what the array settles are checked against)."""
    from bench_des import step_case
    from simulator.compile import compile_step
    from simulator.engine import network, network_store
    from simulator.engine.step import simulate

    network_store.STORE_MIN_RANKS = math.inf  # the object network at every size; this process only (a child per size)

    cluster, model, strategy = step_case(gpus)
    work = compile_step(cluster, model, strategy)
    nets: list = []
    made, apply, rate = network.FlowNetwork.__init__, network.FlowNetwork._apply, network.FlowNetwork._rate
    network.FlowNetwork.__init__ = lambda self, env: (made(self, env), nets.append(self))[0]
    settles, samples = [], []
    tally = {"active": 0, "big_active": 0, "rerated": 0, "changed": 0, "big_seen": 0, "engine_s": 0.0}

    def counted_apply(self, now, slack, arrivals, due):
        if self is not nets[0]:
            return apply(self, now, slack, arrivals, due)
        walked = _walked(self, arrivals, due)
        pairs = sum(len(f.res) for f in chain(walked.values(), arrivals))
        tally["active"] += self._active
        sample = None
        if pairs >= VECTOR_MIN_HOPS:
            tally["big_active"] += self._active
            tally["big_seen"] += 1
            if tally["big_seen"] % SAMPLE_EVERY == 0:
                sample = _sample(self, now, slack, arrivals, due)
        c0 = time.process_time()
        apply(self, now, slack, arrivals, due)
        if sample is not None:
            tally["engine_s"] += time.process_time() - c0
            sample["after"] = {f.fid: (f.active, f.remaining, f.rate, f.version) for f in chain(walked.values(), arrivals)}
            samples.append(sample)
        kept = frozenset(f.fid for f in chain(walked.values(), arrivals) if f.active)
        settles.append((frozenset(walked), kept, pairs))

    def counted_rate(self, now, flows):
        before = [f.rate for f in flows] if self is nets[0] else None
        rate(self, now, flows)
        if before is not None:
            tally["rerated"] += len(flows)
            tally["changed"] += sum(f.rate != b for f, b in zip(flows, before))

    network.FlowNetwork._apply, network.FlowNetwork._rate = counted_apply, counted_rate
    res = simulate(work, cluster, trace=False)
    network.FlowNetwork._apply, network.FlowNetwork._rate, network.FlowNetwork.__init__ = apply, rate, made
    walks = [(_python_walk(s), _array_settle(s)) for s in samples]
    return {"gpus": gpus, "step_s": res.step_time_s, **registry_counts(settles), **tally,
            "sampled": len(walks), "sampled_flows": sum(p[1] for p, _ in walks),
            "python_s": sum(p[0] for p, _ in walks), "array_s": sum(a["cpu_s"] for _, a in walks),
            "same_flows": all(p[1] == a["flows"] for p, a in walks), "exact": all(a["same"] for _, a in walks),
            "level_rated": sum(a["big"] for _, a in walks),
            "rates_exact": all(a["same_rates"] for _, a in walks if a["big"]),
            "levels_median": int(np.median([a["levels"] for _, a in walks])) if walks else 0,
            "levels_max": max((a["levels"] for _, a in walks), default=0)}


def _seeds(arrivals, due) -> list:
    return list(dict.fromkeys(chain(chain.from_iterable(f.res for f in due), chain.from_iterable(f.res for f in arrivals))))


def _walked(net, arrivals, due) -> dict:
    """The active flows the settle's walk will meet (fid → flow), found without touching their state."""
    seeds = _seeds(arrivals, due)
    seen, stack, met = set(seeds), list(seeds), {}
    while stack:
        for fid, f in net._res_flows[stack.pop()].items():
            if fid not in met:
                met[fid] = f
                for q in f.res:
                    if q not in seen:
                        seen.add(q)
                        stack.append(q)
    return met


def _sample(net, now: float, slack: float, arrivals, due) -> dict:
    """The settle's input: every active flow (fid, route, rate, t_last, bytes left, bytes, due, bottleneck), the
    arrivals (fid, route, bytes, bottleneck), the seeds and the capacities of the resources crossed."""
    active = {fid: f for flows in net._res_flows for fid, f in flows.items()}
    due_ids = {f.fid for f in due}
    rows = [(f.fid, f.res, f.rate, f.t_last, f.remaining, f.nbytes, f.fid in due_ids, f.bottleneck_Bps, f.version)
            for f in active.values()]
    arr = [(f.fid, f.res, f.nbytes, f.bottleneck_Bps, f.version) for f in arrivals]
    cap = {q: net._cap[q] for f in chain(active.values(), arrivals) for q in f.res}
    return {"now": now, "slack": slack, "seeds": _seeds(arrivals, due), "rows": rows, "arrivals": arr, "cap": cap}


def main() -> None:
    from bench_des import child_measure, sizes_or_child

    sizes = sizes_or_child(measure, [32768, 65536])
    if sizes is None:
        return
    print("| GPUs | settles | walked | big (walked; active then) | one record (walked) | same (walked) | re-rated "
          "(rate changed) | sampled (flows; level-rated) | engine s | Python walk s | array settle s | levels |")
    print("|---:|---:|---:|---|---|---|---|---|---:|---:|---:|---|")
    for gpus in sizes:
        r = child_measure(__file__, gpus)
        print(f"| {gpus:,} | {r['settles']:,} | {r['walked']:,} | {r['big']:,} ({r['big_walked']:,}; "
              f"{r['big_active']:,}) | {r['one']:,} ({r['one_walked']:,}) | {r['same']:,} ({r['same_walked']:,}) | "
              f"{r['rerated']:,} ({r['changed']:,}) | {r['sampled']} ({r['sampled_flows']:,}; {r['level_rated']}) | "
              f"{r['engine_s']:.3f} | {r['python_s']:.3f} | {r['array_s']:.3f} | {r['levels_median']} "
              f"({r['levels_max']}) |", flush=True)
        print(f"  step {r['step_s']!r} s; array settles: walked flows, ends and bytes left the engine's to the bit: "
              f"{r['exact'] and r['same_flows']}; level-filled rates and the flows refiled the engine's to the bit: "
              f"{r['rates_exact']}",
              flush=True)


if __name__ == "__main__":
    main()
