"""How much a class fold of the main network's contended re-ratings could share, at most, per GPU count.

The step of ``bench_des.measure`` (GPT-3 175B, tp 8 × pp 8, 96 micro-batches, full recompute), each size in a fresh
process. From 512 nodes its dp buckets are NCCL trees, and the tree calls a pipeline send (or the tied all-reduce)
shares NIC 0 with are played flow by flow on the main network: each settle walks and re-rates their whole
component (``FlowNetwork._apply``, ``_rate``), the part of the step that grows fastest (``bench_des_parts.py``).

A class fold would move flows that share a bottleneck pattern as one class with a multiplicity. Exactly, such a
class can only hold flows that every later rating and completion treats alike: the partition of the rated flows
and their resources must be *equitable* (every resource of one cell crosses the same number of flows of each flow
cell, every flow of one cell crosses the same number of resources of each resource cell), since progressive
filling's loads and shares are then constant on cells (Bertsekas & Gallager, *Data Networks* §6.5.2, for the
filling [src: velho-2013]). The coarsest equitable partition refining given colours is what colour refinement
(1-dimensional Weisfeiler–Leman) reaches at its fixed point [src: grohe-2014-colour-refinement]; no exact quotient
of the rating is coarser. Two colourings are measured, at every ``--every``-th re-rating of at least
``--min-flows`` flows (deterministic):

- ``cells, state``: flows coloured by their float state after the walk (bytes, bytes left, rate before): the most
  that flows could share *moving* as one (a class must finish at one instant and be re-filed alike);
- ``cells, rating``: flows uncoloured: the most that a quotient progressive filling alone could share (the walk and
  the filing of finish times stay per flow).

Resources are coloured by capacity. A sampled re-rating is *shareable* when its state partition averages at least
``SHAREABLE_FLOWS_PER_CELL`` flows per cell (where a fold could pay for finding its classes).

Run by hand: ``python benchmarks/bench_des_classes.py [--gpus 32768 65536]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


SHAREABLE_FLOWS_PER_CELL = 4
"""A re-rating counts as *shareable* when its state partition has at least this many flows per cell on average."""


def coarsest_equitable(flow_colours: list, routes: list[tuple[int, ...]], res_colours: dict) -> tuple[int, int]:
    """``(flow cells, resource cells)`` of the coarsest equitable partition refining the given colours
    (:func:`stable_colours`)."""
    fcol, rcol = stable_colours(flow_colours, routes, res_colours)
    return len(set(fcol)), len(set(rcol.values()))


def stable_colours(flow_colours: list, routes: list[tuple[int, ...]], res_colours: dict) -> tuple[list[int], dict]:
    """The coarsest equitable partition of a bipartite flow–resource graph refining the given colours (flow ``i``
    crosses ``routes[i]``; ``res_colours[r]`` for every resource crossed): each flow's cell, each resource's cell.

    Colour refinement: each round gives a flow the new colour (its colour, the multiset of its resources'
    colours) and a resource (its colour, the multiset of its flows' colours), numbered by first appearance
    (no hashing, so no two colours merge by accident); a round that splits no cell on either side is the fixed
    point (refinement only splits, so counting cells decides it)."""
    members: dict[int, list[int]] = defaultdict(list)
    for i, route in enumerate(routes):
        for r in route:
            members[r].append(i)
    fcol = _numbered(flow_colours)
    rcol = dict(zip(members, _numbered([res_colours[r] for r in members])))
    n_f, n_r = len(set(fcol)), len(set(rcol.values()))
    while True:
        fcol = _numbered([(fcol[i], tuple(sorted(rcol[r] for r in route))) for i, route in enumerate(routes)])
        rcol = dict(zip(members, _numbered([(rcol[r], tuple(sorted(fcol[i] for i in flows)))
                                            for r, flows in members.items()])))
        m_f, m_r = len(set(fcol)), len(set(rcol.values()))
        if (m_f, m_r) == (n_f, n_r):
            return fcol, rcol
        n_f, n_r = m_f, m_r


def _numbered(colours: list) -> list[int]:
    """Each colour replaced by the order of its first appearance."""
    ids: dict = {}
    return [ids.setdefault(c, len(ids)) for c in colours]


def measure(gpus: int, every: int, min_flows: int) -> dict:
    """Simulate ``bench_des``'s step at ``gpus`` GPUs with the main network's large re-ratings sampled."""
    from bench_des import MICRO_BATCHES, PP, TP
    from simulator.cluster.presets import load_preset
    from simulator.compile import compile_step
    from simulator.engine import network
    from simulator.engine.step import simulate
    from simulator.strategy import Recompute, Strategy
    from simulator.workload.presets import get_preset

    dp = gpus // (TP * PP)
    cluster = load_preset("dgx-a100").with_nodes(gpus // 8)
    strategy = Strategy(global_batch=MICRO_BATCHES * dp, tp=TP, pp=PP, recompute=Recompute.FULL)
    work = compile_step(cluster, get_preset("gpt3-175b"), strategy)
    nets: list = []
    made, rate = network.FlowNetwork.__init__, network.FlowNetwork._rate
    network.FlowNetwork.__init__ = lambda self, env: (made(self, env), nets.append(self))[0]
    acc = defaultdict(float)

    def sampled_rate(self, now, flows):
        if self is nets[0] and len(flows) >= min_flows:
            acc["large"] += 1
            acc["large_flows"] += len(flows)
            if acc["large"] % every == 0:
                t0 = time.process_time()
                routes = [f.res for f in flows]
                caps = {r: self._cap[r] for route in routes for r in route}
                state = [(f.nbytes, f.remaining, f.rate) for f in flows]
                acc["sampled"] += 1
                acc["flows"] += len(flows)
                acc["resources"] += len(caps)
                cells = coarsest_equitable(state, routes, caps)[0]
                acc["cells_state"] += cells
                if len(flows) >= SHAREABLE_FLOWS_PER_CELL * cells:
                    acc["flows_shareable"] += len(flows)
                    acc["cells_shareable"] += cells
                acc["cells_rating"] += coarsest_equitable([0] * len(flows), routes, caps)[0]
                acc["refine_cpu_s"] += time.process_time() - t0
        rate(self, now, flows)

    network.FlowNetwork._rate = sampled_rate
    res = simulate(work, cluster, trace=False)
    main = nets[0].stats
    return {"gpus": gpus, "step_s": res.step_time_s, "main_flows": main.flows, "rerated": main.rerated_flows,
            **acc, "load_1m": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, nargs="+", default=[32768, 65536])
    ap.add_argument("--every", type=int, default=5, help="sample every N-th large re-rating")
    ap.add_argument("--min-flows", type=int, default=100, help="a large re-rating has at least this many flows")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.every, args.min_flows)))
        return
    print("| GPUs | re-rated (all) | large re-ratings | sampled | flows | cells, state | cells, rating | resources "
          "| flows per cell, state | flows in shareable re-ratings (their cells) | refinement CPU s | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for gpus in args.gpus:
        out = subprocess.run([sys.executable, __file__, "--child", str(gpus), "--every", str(args.every),
                              "--min-flows", str(args.min_flows)], check=True, capture_output=True, text=True).stdout
        r = json.loads(out)
        print(f"| {gpus:,} | {r['rerated']:,} | {int(r['large']):,} | {int(r['sampled']):,} | {int(r['flows']):,} "
              f"| {int(r['cells_state']):,} | {int(r['cells_rating']):,} | {int(r['resources']):,} "
              f"| {r['flows'] / r['cells_state']:.2f} | {int(r['flows_shareable']):,} ({int(r['cells_shareable']):,}) "
              f"| {r['refine_cpu_s']:.1f} | {r['load_1m']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
