"""Where :mod:`benchmarks.bench_des`'s simulate CPU time goes, per GPU count: its parts and the counts they scale with.

The step of ``bench_des.measure`` (GPT-3 175B, tp 8 × pp 8, 96 micro-batches, full recompute), each size in a fresh
process. Parts (CPU seconds, ``time.process_time`` around the outermost call of each, so none is counted twice):
``prepare`` (``CommRunner.prepare``: representative plans, replica link checks), ``folded`` (shortcut 10's scratch
replays and shapes: ``_Shape.durations`` and ``_Shape.__init__``), ``settle`` (the flow network's settles outside
those: the main network and put-backs), ``launch`` (flows made outside them) and ``other`` (the rest: the SimPy
run, rank processes, folding of compute); and, inside those, ``gc`` (the cyclic collector's passes, ``gc.callbacks``). Counts: the
main network's flows, settles and re-rated flows (``NetworkStats``) and the flows of every scratch network.
The wrappers add a little time per call (a few thousand calls); the parts are for finding what grows, not for the
headline numbers, which are ``bench_des.py``'s.

Run by hand: ``python benchmarks/bench_des_parts.py [--gpus 16384 32768 65536]``.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

PARTS = ("prepare", "folded", "settle", "launch", "other", "gc")
"""The first five add up to the CPU time; ``gc`` runs inside them (a pass starts at an allocation)."""


def _timed(acc: Counter, active: list, owner, name: str, part: str) -> None:
    """Wrap ``owner.name`` to add its CPU time to ``acc[part]`` unless a wrapped call is already running."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if active:
            return inner(*args, **kwargs)
        active.append(part)
        t0 = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            acc[part] += time.process_time() - t0
            active.pop()

    setattr(owner, name, wrapper)


def measure(gpus: int) -> dict:
    """Simulate ``bench_des``'s step at ``gpus`` GPUs in this process with its parts timed and counted."""
    from bench_des import MICRO_BATCHES, PP, TP
    from simulator.cluster.presets import load_preset
    from simulator.compile import compile_step
    from simulator.engine import callfold_shapes, network, replay_work
    from simulator.engine.step import simulate
    from simulator.strategy import Recompute, Strategy
    from simulator.workload.presets import get_preset

    acc, active, nets = Counter(), [], []
    _timed(acc, active, replay_work.CommRunner, "prepare", "prepare")
    _timed(acc, active, callfold_shapes._Shape, "durations", "folded")
    _timed(acc, active, callfold_shapes._Shape, "__init__", "folded")
    _timed(acc, active, network.FlowNetwork, "_settle", "settle")
    _timed(acc, active, network.FlowNetwork, "_launch", "launch")
    made = network.FlowNetwork.__init__
    network.FlowNetwork.__init__ = lambda self, env: (made(self, env), nets.append(self))[0]
    gc_start = []
    gc.callbacks.append(lambda phase, info: gc_start.append(time.process_time()) if phase == "start"
                        else acc.update(gc=time.process_time() - gc_start.pop()))
    dp = gpus // (TP * PP)
    cluster = load_preset("dgx-a100").with_nodes(gpus // 8)
    strategy = Strategy(global_batch=MICRO_BATCHES * dp, tp=TP, pp=PP, recompute=Recompute.FULL)
    work = compile_step(cluster, get_preset("gpt3-175b"), strategy)
    gc.collect()
    acc.clear()
    c0 = time.process_time()
    res = simulate(work, cluster, trace=False)
    cpu = time.process_time() - c0
    main = nets[0].stats
    row = {"gpus": gpus, "cpu_s": cpu, "step_s": res.step_time_s, "events": res.extras["events"],
           "main_flows": main.flows, "main_settles": main.settles, "main_rerated": main.rerated_flows,
           "scratch_flows": sum(n.stats.flows for n in nets[1:]), "load_1m": os.getloadavg()[0]}
    row.update({p: acc[p] for p in ("prepare", "folded", "settle", "launch", "gc")})
    row["other"] = cpu - sum(acc[p] for p in ("prepare", "folded", "settle", "launch"))
    return row


def main() -> None:
    from bench_des import child_measure, sizes_or_child

    sizes = sizes_or_child(measure, [16384, 32768, 65536])
    if sizes is None:
        return
    print("| GPUs | CPU s | " + " | ".join(PARTS) + " | main flows | settles | re-rated | scratch flows | load |")
    print("|---:|---:|" + "---:|" * (len(PARTS) + 5))
    for gpus in sizes:
        r = child_measure(__file__, gpus)
        print(f"| {gpus:,} | {r['cpu_s']:.2f} | " + " | ".join(f"{r[p]:.2f}" for p in PARTS)
              + f" | {r['main_flows']:,} | {r['main_settles']:,} | {r['main_rerated']:,} | {r['scratch_flows']:,}"
              f" | {r['load_1m']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
