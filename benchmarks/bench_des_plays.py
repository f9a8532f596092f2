"""What shortcut 10's steps played alone cost at 512 nodes and up, and how much of it repeats inside one step.

The step of ``bench_des.measure`` (GPT-3 175B, tp 8 × pp 8, 96 micro-batches, full recompute), each size in a fresh
process. Every play of :func:`~simulator.engine.step_ties.played_alone` (a step of a folded call on a fresh scratch
network, per step signature, binade and parity: :mod:`simulator.engine.callfold_shapes`) is counted and timed (CPU s,
noisy on a shared machine), with its scratch network's settles and re-rated flows. Each played step is split into
*components* (flows joined by a shared resource, transitively) and those into *kinds* (equal up to a renaming of the
resources, numbered by first appearance within the component: capacities, routes, bytes, latencies, as
``callfold_shapes._step_signature`` compares a whole step); *one of each kind* counts the flows a play of one
component per kind would start.

*Same ends* replays every kind's first component alone on a fresh scratch network from the step's start and compares
its end with the latest finish of that component's flows in the whole step's play, to the bit: the empirical side of
playing a step by its components (it is not a proof: components of one step still meet through the settle slack
``CLOCK_ULPS·ulp(now)``, the level filler's ``TIE_RTOL`` and the heap/level switch at ``VECTOR_MIN_HOPS``; see
docs/engine.md, des20). *Settle times of the kinds*: the distinct clock values at which those plays settle, per
step, summed; *times of two kinds or more*: those at which plays of two kinds or more settle (there a whole play walks
and rates them in one settle, where the couplings above can act). *One of each kind together, same*: the steps whose
first component of each kind, played together alone (:func:`reduced_play`: the filler chosen by the whole step's pair
count), gives every one of those flows the finish it has in the whole play, and the step's end, to the bit.

Run by hand: ``python benchmarks/bench_des_plays.py [--gpus 32768 65536]``.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))


def components(routes: list[tuple[int, ...]]) -> list[list[int]]:
    """Indices of ``routes`` grouped by connected component (routes sharing a resource, transitively), each group in
    index order, groups by their first index."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for route in routes:
        a = find(route[0])
        for q in route[1:]:
            b = find(q)
            if a != b:
                parent[b] = a
    groups: dict[int, list[int]] = defaultdict(list)
    for i, route in enumerate(routes):
        groups[find(route[0])].append(i)
    return list(groups.values())


def kind(main, step: list, routes: list, idx: list[int]) -> tuple:
    """A component's content up to a renaming of its resources (numbered by first appearance, flow by flow)."""
    local: dict[int, int] = {}
    flows = tuple((tuple(local.setdefault(q, len(local)) for q in routes[i]), step[i][1],
                   step[i][0].latency_s if step[i][2] is None else step[i][2]) for i in idx)
    return tuple(main._cap[q] for q in local), flows


def play_flows(main, step: list, start_s: float, copies: list[int] | None = None):
    """``step`` played alone from ``start_s`` as ``played_alone(..., None)`` plays it (``copies``: flow ``k`` stands
    for ``copies[k]`` components, the filler chosen by the weighted count): (its flows, the scratch network, the step's
    end, the clock values of its settles)."""
    import simpy

    from simulator.engine.callfold_replay import _Player, _Scratch
    from simulator.engine.step_ties import _OneStep, _WeightedScratch

    env = simpy.Environment(initial_time=start_s)
    net = _Scratch(env, main) if copies is None else _WeightedScratch(env, main)
    if copies is not None:
        net.copies = copies
    times: list[float] = []
    settle = net._settle

    def timed(event) -> None:
        times.append(env.now)
        settle(event)

    net._settle = timed  # what the network's settle events call
    player = _Player(env, net, _OneStep(step), simpy.Event(env))
    env.run()
    return player.flows.value, net, player.end_s, times


def one_of_each(main, step: list, routes: list, groups: list[list[int]]) -> tuple[dict, list[tuple[int, int]]]:
    """The first component of each kind among ``groups`` (kind → its flows' indices), and ``keep``: those indices in
    step order, each with the number of components of its kind."""
    kinds: dict[tuple, list[int]] = {}
    copies: dict[tuple, int] = defaultdict(int)
    for idx in groups:
        k = kind(main, step, routes, idx)
        kinds.setdefault(k, idx)
        copies[k] += 1
    return kinds, sorted((i, copies[k]) for k, idx in kinds.items() for i in idx)


def reduced_same(main, step: list, start_s: float, flows: list, keep: list[tuple[int, int]]) -> bool:
    """Whether :func:`reduced_play` of ``keep`` gives each of its flows the finish it has among ``flows`` (the whole
    step's play from ``start_s``) and the step's end, to the bit."""
    reduced, end = reduced_play(main, step, start_s, keep)
    return end == max(f.finish_s for f in flows) and all(g.finish_s == flows[i].finish_s
                                                         for g, (i, _) in zip(reduced, keep))


def reduced_play(main, step: list, start_s: float, keep: list[tuple[int, int]]):
    """The flows ``keep`` lists (``(index in step, copies of its kind)``, in step order) played together alone from
    ``start_s``, each settle's filler chosen by the pair count the whole step would have there (a flow's pairs times
    its copies: :class:`~simulator.engine.step_kinds.Weighted`): (its flows, end)."""
    flows, _, end, _ = play_flows(main, [step[i] for i, _ in keep], start_s, [c for _, c in keep])
    return flows, end


def measure(gpus: int) -> dict:
    import gc

    import bench_des
    import simulator.engine.callfold_shapes as shapes
    from simulator.compile import compile_step
    from simulator.engine.step import simulate

    played = shapes.played_alone
    seen: list[tuple] = []
    cpu = [0.0]

    def counted(main, step, start_s, *kinds):
        c0 = time.process_time()
        out = played(main, step, start_s, *kinds)
        cpu[0] += time.process_time() - c0
        seen.append((main, step, start_s))
        return out

    shapes.played_alone = counted
    work = compile_step(*bench_des.step_case(gpus))
    gc.collect()
    c0 = time.process_time()
    simulate(work, bench_des.step_case(gpus)[0], trace=False)
    total = time.process_time() - c0
    shapes.played_alone = played
    out = {"gpus": gpus, "simulate_cpu_s": total, "plays": len(seen), "plays_cpu_s": cpu[0]}
    for k in ("flows", "settles", "rerated", "components", "kinds", "one_each", "largest", "compared", "same",
              "settle_times", "shared_times", "reduced_same"):
        out[k] = 0
    for main, step, start_s in seen:
        flows, net, _, _ = play_flows(main, step, start_s)
        routes = [f.res for f in flows]
        groups = components(routes)
        kinds, keep = one_of_each(main, step, routes, groups)
        out["reduced_same"] += reduced_same(main, step, start_s, flows, keep)
        out["flows"] += len(flows)
        out["settles"] += net.stats.settles
        out["rerated"] += net.stats.rerated_flows
        out["components"] += len(groups)
        out["kinds"] += len(kinds)
        out["one_each"] += sum(map(len, kinds.values()))
        out["largest"] += max(map(len, groups))
        kinds_at: dict[float, int] = defaultdict(int)
        for idx in kinds.values():
            _, _, end, times = play_flows(main, [step[i] for i in idx], start_s)
            out["compared"] += 1
            out["same"] += end == max(flows[i].finish_s for i in idx)
            for t in set(times):
                kinds_at[t] += 1
        out["settle_times"] += len(kinds_at)
        out["shared_times"] += sum(n > 1 for n in kinds_at.values())
    return out


def main() -> None:
    import bench_des

    gpus = bench_des.sizes_or_child(measure, [32768, 65536])
    if gpus is None:
        return
    print("| GPUs | simulate CPU s | plays | plays CPU s | flows | settles | re-rated | components | kinds | "
          "one of each kind, flows | largest component, flows | kinds compared | same ends | "
          "settle times of the kinds | times of two kinds or more | one of each kind together, same |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for g in gpus:
        r = bench_des.child_measure(__file__, g)
        print(f"| {g:,} | {r['simulate_cpu_s']:.2f} | {r['plays']} | {r['plays_cpu_s']:.2f} | {r['flows']:,} | "
              f"{r['settles']:,} | {r['rerated']:,} | {r['components']:,} | {r['kinds']:,} | {r['one_each']:,} | "
              f"{r['largest']:,} | {r['compared']:,} | {r['same']:,} | {r['settle_times']:,} | {r['shared_times']:,} | "
              f"{r['reduced_same']:,} |",
              flush=True)


if __name__ == "__main__":
    main()
