"""DES wall time and events/s for a 3D-parallel GPT-3 175B step at 8, 64, 256 and 1024 GPUs.

Run by hand: ``python benchmarks/bench_des.py [--exact]``. The step is what
:func:`simulator.compile.compile_step` makes of the ``gpt3-175b`` preset on ``dgx-a100`` nodes
with the :class:`~simulator.strategy.Strategy` defaults for all but the degrees and the batch.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simulator.cluster.presets import load_preset  # noqa: E402
from simulator.compile import compile_step  # noqa: E402
from simulator.engine.step import simulate  # noqa: E402
from simulator.strategy import Strategy  # noqa: E402
from simulator.workload.presets import get_preset  # noqa: E402

CONFIGS = [(8, 1, 8, 1, 96), (64, 1, 8, 8, 96), (256, 4, 8, 8, 384), (1024, 16, 8, 8, 1536)]
"""(GPUs, dp, tp, pp, global batch): m = 96 micro-batches per pipeline in every case."""


def work_for(gpus: int, dp: int, tp: int, pp: int, gbs: int):
    cluster = load_preset("dgx-a100").with_nodes(gpus // 8)
    strategy = Strategy(global_batch=gbs, tp=tp, pp=pp)
    model = get_preset("gpt3-175b")
    return cluster, compile_step(cluster, model, strategy)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--exact", action="store_true", help="no shortcuts (slow)")
    ap.add_argument("--max-gpus", type=int, default=1024)
    args = ap.parse_args()
    print("| GPUs | dp×tp×pp | step s | wall s | CPU s | events | events/s | flows | isolated classes |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for gpus, dp, tp, pp, gbs in CONFIGS:
        if gpus > args.max_gpus:
            continue
        cluster, work = work_for(gpus, dp, tp, pp, gbs)
        gc.collect()
        gc.freeze()
        w0, c0 = time.perf_counter(), time.process_time()
        res = simulate(work, cluster, shortcuts=not args.exact)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        gc.unfreeze()
        ev = res.extras["events"]
        print(f"| {gpus} | {dp}×{tp}×{pp} | {res.step_time_s:.2f} | {wall:.2f} | {cpu:.2f} | {ev:,} | "
              f"{ev / cpu:,.0f} | {res.extras['flows']:,} | {res.extras['isolated_classes']} |", flush=True)


if __name__ == "__main__":
    main()
