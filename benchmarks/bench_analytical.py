"""Time of the analytical estimate per candidate: GPT-3 175B on 1024 A100s (dgx-a100, 128 nodes).

Run by hand: ``python benchmarks/bench_analytical.py [--candidates 10000]``. Candidates: every
(tp, pp, micro-batch, schedule, recompute, SP, ZeRO, bucket size) that fits the model's shape,
with global batches 1536/2048/3072, in a fixed order, cut to the requested count. Reports:

- cold: ``estimate_many`` with an empty cost cache (compiles every distinct structure), wall and CPU
  seconds (CPU: the figure to compare on a shared machine);
- warm: the same call again with the filled cache (what a planner's later sweeps pay);
- scalar: ``estimate`` per candidate on a sample, for comparison.
"""

from __future__ import annotations

import argparse
import itertools
import time

from simulator.analytical import estimate
from simulator.analytical_vec import OnInvalid, estimate_many
from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.strategy import AllReduceSync, Recompute, ScheduleKind, Strategy, ZeroStage
from simulator.units import MiB
from simulator.workload import get_preset



def candidates(limit: int) -> list[Strategy]:
    out = []
    grid = itertools.product((1536, 2048, 3072), (1, 2, 4, 8), (1, 2, 4, 8, 16, 32), (1, 2, 4),
                             ((ScheduleKind.ONE_F_ONE_B, 1), (ScheduleKind.GPIPE, 1), (ScheduleKind.INTERLEAVED, 2)),
                             tuple(Recompute), (False, True), (ZeroStage.ZERO0, ZeroStage.ZERO1), (25, 100))
    for gbs, tp, pp, mbs, (sched, v), rc, sp, zero, bucket in grid:
        dp = 1024 // (tp * pp)
        m, rest = divmod(gbs, dp * mbs)
        if rest or m < 1 or (v > 1 and (pp == 1 or m % pp)) or (sp and tp == 1):
            continue
        out.append(Strategy(global_batch=gbs, micro_batch=mbs, dp=dp, tp=tp, pp=pp, schedule=sched, virtual_stages=v,
                            recompute=rc, sequence_parallel=sp, zero=zero,
                            dp_sync=AllReduceSync(bucket_bytes=bucket * MiB)))
        if len(out) == limit:
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=10_000)
    ap.add_argument("--scalar-sample", type=int, default=20)
    args = ap.parse_args()
    cluster, model = load_preset("dgx-a100", 128), get_preset("gpt3-175b").with_seq(2048)
    cands = candidates(args.candidates)
    cache = CostCache(cluster)
    t0, cpu0 = time.perf_counter(), time.process_time()
    frame = estimate_many(cluster, model, cands, cache=cache, on_invalid=OnInvalid.MARK)
    cold, cold_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    t0 = time.perf_counter()
    estimate_many(cluster, model, cands, cache=cache, on_invalid=OnInvalid.MARK)
    warm = time.perf_counter() - t0
    sample = cands[:: max(1, len(cands) // args.scalar_sample)][: args.scalar_sample]
    t0 = time.perf_counter()
    for s in sample:
        estimate(cluster, model, s, cache=cache)
    scalar = (time.perf_counter() - t0) / len(sample)
    n = len(cands)
    print(f"candidates: {n}  valid: {(frame['error'] == '').sum()}")
    print(f"cold (empty cache): {cold:.2f} s total, {cold / n * 1e6:.0f} us per candidate "
          f"({cold_cpu:.2f} s CPU, {cold_cpu / n * 1e6:.0f} us CPU per candidate)")
    print(f"warm (cache reused): {warm:.3f} s total, {warm / n * 1e6:.1f} us per candidate")
    print(f"scalar estimate (warm cache): {scalar * 1e3:.2f} ms per candidate")
    best = frame.sort_values("step_time_s").iloc[0]
    i = frame["step_time_s"].idxmin()
    s = cands[i]
    print(f"best: tp {s.tp} pp {s.pp} mbs {s.micro_batch} {s.schedule.value} v{s.virtual_stages} "
          f"{s.recompute.value} sp {s.sequence_parallel} zero {int(s.zero)} gbs {s.global_batch}: "
          f"{best['step_time_s']:.2f} s, MFU {best['mfu']:.3f}")


if __name__ == "__main__":
    main()
