"""Wall time of a whole planner search, per phase, on the issue's reference problems.

Run by hand: ``python benchmarks/bench_planner.py [--case NAME ...] [--refine K] [--jobs J]``.
Prints, per case, the candidate counts, the wall and CPU seconds of the whole search (CPU: this
process's, so the DES workers of ``--jobs`` > 1 are not in it) and the wall seconds and candidates
per second of each phase (enumerate, memory, rank, variants — the gradient-sync and offload variants
of the best bases, their memory and rank — and refine). Results are recorded in docs/planner.md with the machine.
"""

from __future__ import annotations

import argparse
import time

import planner
from simulator.cluster.io import load_cluster
from simulator.workload import get_preset

CASES = {
    "llama2-7b-8xh100": ("llama2-7b", 4096, "dgx-h100", 1, 8, 64),
    "llama2-70b-64xh100": ("llama2-70b", 4096, "dgx-h100", 8, 64, 512),
    "gpt3-175b-1024xa100": ("gpt3-175b", 2048, "dgx-a100", 128, 1024, 1536),
}


def run(name: str, refine: int, jobs: int) -> None:
    model, seq, cluster, nodes, gpus, gbs = CASES[name]
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = planner.plan(get_preset(model).with_seq(seq), load_cluster(cluster, nodes=nodes), gpus=gpus,
                          global_batch=gbs, refine=refine, jobs=jobs)
    total, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    c = result.counts.to_dict()
    print(f"{name}: {total:.1f} s total ({cpu:.2f} s CPU in this process); {c['enumerated']} enumerated, {c['invalid']} invalid, {c['infeasible']} "
          f"do not fit, {c['ranked']} ranked, {c['refined']} refined")
    n = {"enumerate": c["enumerated"] - c["variants"], "memory": c["enumerated"] - c["invalid"],
         "rank": c["ranked"], "variants": c["variants"], "refine": c["refined"]}
    for phase, seconds in c["seconds"].items():
        rate = f"{n[phase] / seconds:,.1f} candidates/s" if seconds > 0 else "-"
        print(f"  {phase:<10}{seconds:8.2f} s  {rate}")
    if result.best is not None:
        from planner.explain import describe

        print(f"  best: {describe(result.best.strategy)}: {result.best.estimates[0].step_time_s:.4g} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", choices=list(CASES), help="default: the first two")
    ap.add_argument("--refine", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    for name in args.case or list(CASES)[:2]:
        run(name, args.refine, args.jobs)


if __name__ == "__main__":
    main()
