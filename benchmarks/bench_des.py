"""DES wall time and events/s for a 3D-parallel GPT-3 175B step at 8, 64, 256 and 1024 GPUs.

Run by hand: ``python benchmarks/bench_des.py [--exact]``. Uses ``simulator.compile.compile_step``
when it exists, else a hand-made StepWork (:mod:`simulator.engine.handwork`) with these
assumptions (not measurements): mbs 1, seq 2048, hidden 12288; per layer and micro-batch a
forward of 6.1 ms and a backward of 12.2 ms on one A100 of a tp=8 group (24·s·h² FLOPs per layer,
Narayanan et al. SC'21 eq. 3, at ~50 % of 312 TFLOP/s); 2 TP all-reduces of b·s·h·2 = 50 MB per
layer in forward and 2 in backward (Megatron); p2p of 50 MB; DP ring all-reduce of the stage's
bf16 gradients in 25 MiB buckets (PyTorch DDP's default).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simulator.cluster.presets import load_preset  # noqa: E402
from simulator.engine.handwork import HandSpec, hand_work  # noqa: E402
from simulator.engine.step import simulate  # noqa: E402
from simulator.strategy import Strategy  # noqa: E402
from simulator.units import MiB  # noqa: E402
from simulator.workload.presets import get_preset  # noqa: E402

CONFIGS = [(8, 1, 8, 1, 96), (64, 1, 8, 8, 96), (256, 4, 8, 8, 384), (1024, 16, 8, 8, 1536)]
"""(GPUs, dp, tp, pp, global batch): m = 96 micro-batches per pipeline in every case."""
PARAMS = 175e9


def work_for(gpus: int, dp: int, tp: int, pp: int, gbs: int):
    cluster = load_preset("dgx-a100").with_nodes(gpus // 8)
    strategy = Strategy(global_batch=gbs, tp=tp, pp=pp)
    model = get_preset("gpt3-175b")
    try:
        from simulator.compile import compile_step  # type: ignore
        return cluster, compile_step(cluster, model, strategy)
    except ImportError:
        pass
    grad_bytes = int(PARAMS / (tp * pp) * 2)
    buckets = (25 * MiB,) * (grad_bytes // (25 * MiB)) if dp > 1 else ()
    layers = 96 // pp
    spec = HandSpec(fwd_s=0.0061 * layers, bwd_s=0.0122 * layers, tp_calls_per_layer=2, tp_bytes=2048 * 12288 * 2,
                    p2p_bytes=2048 * 12288 * 2, bucket_bytes=buckets)
    return cluster, hand_work(cluster, strategy, model, spec)


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
