"""DES cost of one step of a plan file (default: the Llama-2-70B plan of issue 8 on 64 H100s).

Issue 8's planner re-simulates its top ``--refine`` candidates with the DES; this times one of them:
compile once, then ``simulate`` (no timeline, as the planner runs it) ``--repeat`` times, printing wall
and CPU seconds of the fastest, the step time (every repeat must give the same float), events and flows.
``--exact`` runs with ``shortcuts=False`` (every call on the flow network) for comparison.

Run by hand: ``python benchmarks/bench_des_plan.py PLAN.json [--repeat 3] [--exact] [--profile]``; make the
plan with ``trainplan plan --model llama2-70b --cluster dgx-h100 --nodes 8 --gpus 64 --gbs 512 --seq 4096
--out PLAN.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", help="plan file (trainplan plan --out)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--exact", action="store_true", help="shortcuts=False")
    ap.add_argument("--profile", action="store_true", help="cProfile one run, top 25 by cumulative time")
    args = ap.parse_args(argv)
    from simulator.compile import compile_step
    from simulator.engine.step import simulate
    from simulator.plan_file import load_plan

    plan = load_plan(args.plan)
    work = compile_step(plan.cluster, plan.model, plan.strategy, layout=plan.layout())
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(simulate, work, plan.cluster, trace=False, shortcuts=not args.exact)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return
    best, steps = None, set()
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        res = simulate(work, plan.cluster, trace=False, shortcuts=not args.exact)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        steps.add(res.step_time_s)
        if best is None or cpu < best[1]:
            best = (wall, cpu, res)
    wall, cpu, res = best
    print(f"step {res.step_time_s!r} s  wall {wall:.3f} s  cpu {cpu:.3f} s  events {res.extras['events']}  "
          f"flows {res.extras['flows']}  isolated classes {res.extras['isolated_classes']}  "
          f"load {os.getloadavg()[0]:.1f}")
    if len(steps) > 1:
        raise SystemExit(f"repeats differ: {sorted(steps)}")


if __name__ == "__main__":
    main()
