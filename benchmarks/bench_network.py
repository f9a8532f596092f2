"""Throughput of the flow-level engine: ring all-reduce schedules replayed on DGX H100 clusters.

Run by hand (not a test): ``python benchmarks/bench_network.py [ranks ...]`` from the repository root.
Prints, per size, the schedule's transfers, the engine's work counters, wall and CPU time of the
replay (schedule building excluded), and flows/s and settle events/s per CPU second. ``docs/engine.md`` records the numbers. The message size (1 GiB) does not change the
work: a ring step's transfers are disjoint, so the engine's cost is per flow.
"""

from __future__ import annotations

import gc
import sys
import time

import simpy

from simulator.cluster.io import load_cluster
from simulator.collectives.base import Op
from simulator.collectives.registry import build_schedule
from simulator.collectives.replay import schedule_time_s
from simulator.engine.collective import run_schedule
from simulator.engine.network import FlowNetwork

GPUS_PER_NODE = 8
"""DGX H100: 8 GPUs per node (the preset)."""
NBYTES = 2**30


def bench(ranks: int, algorithm: str = "ring", concurrent: int = 1) -> dict:
    """Replay ``concurrent`` copies of an all-reduce over ``ranks`` GPUs at once; time the engine only."""
    cluster = load_cluster("dgx-h100", nodes=max(1, ranks // GPUS_PER_NODE))
    t0 = time.perf_counter()
    schedule = build_schedule(cluster, list(range(ranks)), Op.ALL_REDUCE, NBYTES, algorithm)
    build_s = time.perf_counter() - t0
    gc.collect()
    gc.freeze()  # the schedule is long-lived: keep the collector from re-walking its million objects
    env = simpy.Environment()
    net = FlowNetwork(env)
    paths: dict = {}
    t0, c0 = time.perf_counter(), time.process_time()
    procs = [run_schedule(env, net, cluster, schedule, paths=paths) for _ in range(concurrent)]
    env.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    gc.unfreeze()
    analytical = schedule_time_s(cluster, schedule)
    return {"ranks": ranks, "algorithm": algorithm, "concurrent": concurrent, "steps": schedule.num_steps,
            "flows": net.stats.flows, "settles": net.stats.settles, "rerated": net.stats.rerated_flows,
            "build_s": build_s, "wall_s": wall, "cpu_s": cpu, "flows_per_s": net.stats.flows / cpu,
            "settles_per_s": net.stats.settles / cpu, "sim_s": max(p.value for p in procs),
            "analytical_s": analytical}


CASES = {64: [("ring", 1), ("ring", 2)], 256: [("ring", 1), ("ring", 2)],
         1024: [("hierarchical", 1), ("hierarchical", 2), ("halving_doubling", 1)]}
"""Ring at 1024 ranks is 16.7M transfers (8 channels × 1024 × 2046 steps): its schedule alone needs
~3 GB, so the 1024-rank rows use the hierarchical and halving-doubling schedules."""


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or list(CASES)
    print(f"{'ranks':>6} {'alg':>16} {'conc':>4} {'steps':>6} {'flows':>9} {'settles':>8} {'build s':>8} "
          f"{'wall s':>7} {'cpu s':>7} {'flows/s':>9} {'settles/s':>9} {'sim ms':>9} {'replay ms':>9}")
    for ranks in sizes:
        for algorithm, concurrent in CASES.get(ranks, [("ring", 1)]):
            r = bench(ranks, algorithm, concurrent)
            print(f"{r['ranks']:>6} {r['algorithm']:>16} {r['concurrent']:>4} {r['steps']:>6} {r['flows']:>9} "
                  f"{r['settles']:>8} {r['build_s']:>8.2f} {r['wall_s']:>7.2f} {r['cpu_s']:>7.2f} {r['flows_per_s']:>9.0f} "
                  f"{r['settles_per_s']:>9.0f} {r['sim_s'] * 1e3:>9.3f} {r['analytical_s'] * 1e3:>9.3f}",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
