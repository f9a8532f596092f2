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

Sampled settles (every ``SAMPLE_EVERY``-th big one) are copied out (their active flows' routes and the seeds) and,
after the step, walked twice on fresh copies: the engine's depth-first walk with its per-flow progress arithmetic in
Python, and :func:`frontier_walk` (numpy, level by level over the (flow, resource) pairs) with the same arithmetic
on arrays. Both are timed (CPU s, noisy on a shared machine: the copies are warm, the engine's flows are not) and the
frontier's levels counted: the depth a vectorised walk pays numpy's per-call cost for.

Run by hand: ``python benchmarks/bench_des_settles.py [--gpus 32768 65536]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from itertools import chain

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

SAMPLE_EVERY = 25
"""Every how many big settles one is copied out for the walk timings."""


def registry_counts(settles: list[tuple[frozenset, frozenset, int]]) -> dict:
    """Counts over ``settles``, each (walked flows, flows kept for re-rating after it, pairs it crossed), in order:
    settles, walked flows, big ones (at least ``VECTOR_MIN_HOPS`` pairs) and their walked flows, and of the big
    ones those whose walked flows were all last kept by one earlier settle (``one``) and those whose walked flows are
    exactly that settle's kept flows less the ones that ended since (``same``); flows counted in walked flows."""
    from simulator.engine.fairshare import VECTOR_MIN_HOPS

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


def frontier_walk(flow_of: np.ndarray, res_of: np.ndarray, n_flows: int, n_res: int,
                  seeds: np.ndarray) -> tuple[np.ndarray, int]:
    """The flows connected to the resources ``seeds`` through shared resources, given the (flow, resource) pairs as
    two arrays (``flow_of[i]`` crosses ``res_of[i]``, local numbers), found one level at a time with numpy: the
    flow indices in increasing order and the levels taken."""
    res_in = np.zeros(n_res, dtype=bool)
    res_in[seeds] = True
    levels = 0
    while True:
        levels += 1
        flows = np.zeros(n_flows, dtype=bool)
        flows[flow_of[res_in[res_of]]] = True
        grown = res_in.copy()
        grown[res_of[flows[flow_of]]] = True
        if (grown == res_in).all():
            return np.flatnonzero(flows), levels
        res_in = grown


class _Copy:
    __slots__ = ("res", "mark", "rate", "t_last", "remaining", "delivered_bytes", "due", "nbytes")

    def __init__(self, res: tuple, rate: float, t_last: float, remaining: float, nbytes: float):
        self.res, self.mark, self.due = res, 0, 0
        self.rate, self.t_last, self.remaining, self.nbytes, self.delivered_bytes = rate, t_last, remaining, nbytes, 0.0


def _python_walk(sample: dict) -> tuple[float, int]:
    """The engine's walk and progress arithmetic (``FlowNetwork._apply``'s loop) on fresh copies: CPU s, flows."""
    copies = [_Copy(*row) for row in sample["rows"]]
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


def _array_walk(sample: dict) -> tuple[float, int, int]:
    """:func:`frontier_walk` and the same arithmetic on arrays, the pairs numbered once per settle as a store would
    keep them: CPU s, flows, levels."""
    rows = sample["rows"]
    lengths = np.fromiter((len(r[0]) for r in rows), dtype=np.int64, count=len(rows))
    pairs = np.fromiter(chain.from_iterable(r[0] for r in rows), dtype=np.int64, count=int(lengths.sum()))
    used, res_of = np.unique(pairs, return_inverse=True)
    flow_of = np.repeat(np.arange(len(rows)), lengths)
    known = set(used.tolist())  # an arrival's resource with no active flow: nothing to walk from it
    seeds = np.searchsorted(used, np.array([s for s in sample["seeds"] if s in known], dtype=np.int64))
    rate, t_last, rem, nbytes = (np.array([r[k] for r in rows]) for k in (1, 2, 3, 4))
    now, c0 = sample["now"], time.process_time()
    idx, levels = frontier_walk(flow_of, res_of, len(rows), used.size, seeds)
    moved = rate[idx] * (now - t_last[idx])
    left = rem[idx] - moved
    keep = ~(left <= 1e-12 * nbytes[idx])
    rem[idx[keep]], t_last[idx[keep]] = left[keep], now
    return time.process_time() - c0, idx.size, levels


def measure(gpus: int) -> dict:
    """Simulate ``bench_des``'s step at ``gpus`` GPUs with the main network's settles counted and sampled."""
    from bench_des import MICRO_BATCHES, PP, TP
    from simulator.cluster.presets import load_preset
    from simulator.compile import compile_step
    from simulator.engine import network
    from simulator.engine.fairshare import VECTOR_MIN_HOPS
    from simulator.engine.step import simulate
    from simulator.strategy import Recompute, Strategy
    from simulator.workload.presets import get_preset

    dp = gpus // (TP * PP)
    cluster = load_preset("dgx-a100").with_nodes(gpus // 8)
    strategy = Strategy(global_batch=MICRO_BATCHES * dp, tp=TP, pp=PP, recompute=Recompute.FULL)
    work = compile_step(cluster, get_preset("gpt3-175b"), strategy)
    nets: list = []
    made, apply, rate = network.FlowNetwork.__init__, network.FlowNetwork._apply, network.FlowNetwork._rate
    network.FlowNetwork.__init__ = lambda self, env: (made(self, env), nets.append(self))[0]
    settles, samples, tally = [], [], {"active": 0, "big_active": 0, "rerated": 0, "changed": 0, "big_seen": 0}

    def counted_apply(self, now, slack, arrivals, due):
        if self is not nets[0]:
            return apply(self, now, slack, arrivals, due)
        walked = _walked(self, arrivals, due)
        pairs = sum(len(f.res) for f in chain(walked.values(), arrivals))
        tally["active"] += self._active
        if pairs >= VECTOR_MIN_HOPS:
            tally["big_active"] += self._active
            tally["big_seen"] += 1
            if tally["big_seen"] % SAMPLE_EVERY == 0:
                samples.append(_sample(self, now, arrivals, due))
        apply(self, now, slack, arrivals, due)
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
    walks = [(_python_walk(s), _array_walk(s)) for s in samples]
    return {"gpus": gpus, "step_s": res.step_time_s, **registry_counts(settles), **tally,
            "sampled": len(walks), "sampled_flows": sum(p[1] for p, _ in walks),
            "python_s": sum(p[0] for p, _ in walks), "array_s": sum(a[0] for _, a in walks),
            "same_flows": all(p[1] == a[1] for p, a in walks),
            "levels_median": int(np.median([a[2] for _, a in walks])) if walks else 0,
            "levels_max": max((a[2] for _, a in walks), default=0)}


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


def _sample(net, now: float, arrivals, due) -> dict:
    active = {fid: f for flows in net._res_flows for fid, f in flows.items()}
    rows = [(f.res, f.rate, f.t_last, f.remaining, f.nbytes) for f in active.values()]
    return {"now": now, "seeds": _seeds(arrivals, due), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[32768, 65536])
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    print("| GPUs | settles | walked | big (walked; active then) | one record (walked) | same (walked) | re-rated "
          "(rate changed) | sampled (flows) | Python walk s | array walk s | levels median (max) |")
    print("|---:|---:|---:|---|---|---|---|---|---:|---:|---|")
    for gpus in args.gpus:
        out = subprocess.run([sys.executable, __file__, "--child", str(gpus)], check=True, capture_output=True,
                             text=True).stdout
        r = json.loads(out)
        print(f"| {gpus:,} | {r['settles']:,} | {r['walked']:,} | {r['big']:,} ({r['big_walked']:,}; "
              f"{r['big_active']:,}) | {r['one']:,} ({r['one_walked']:,}) | {r['same']:,} ({r['same_walked']:,}) | "
              f"{r['rerated']:,} ({r['changed']:,}) | {r['sampled']} ({r['sampled_flows']:,}) | {r['python_s']:.3f} | "
              f"{r['array_s']:.3f} | {r['levels_median']} ({r['levels_max']}) |", flush=True)
        if not r["same_flows"]:
            print("  the two walks met different flows in some sample: the frontier walk is wrong", flush=True)


if __name__ == "__main__":
    main()
