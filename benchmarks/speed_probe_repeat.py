"""How repeatable is the suite's machine-speed probe (:func:`executor.speed_probe.probe`)? ABAB blocks.

Alternates ``--rounds`` times two blocks of ``--readings`` readings back to back:

- A: the probe alone (whatever else the machine runs: note the load);
- B: the probe while two processes busy-loop (one per core of the 2-core VM): other work inside the VM, which
  the suite measures as the foreign CPU share; the probe reads thread CPU time, so B should move it little.

Prints each block's readings and, per kind, the median, p10/p90, min/max, the largest |reading / median(A) − 1|,
the worst pair max/min − 1 and the wall seconds per reading (the probe's cost). ``SPEED_DRIFT_MAX``
(``simulator/suite_report.py``) must sit above A's spread. Results: docs/validation.md, ``### val20``.

Usage: ``PYTHONPATH=. python benchmarks/speed_probe_repeat.py --rounds 4 --readings 5`` (~20 s).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

from executor.speed_probe import probe


def _spin(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _block(n: int, busy: bool) -> tuple[list[float], list[float]]:
    stop, procs = mp.Event(), []
    if busy:
        procs = [mp.Process(target=_spin, args=(stop,)) for _ in range(2)]
        for p in procs:
            p.start()
        time.sleep(0.5)
    cpu, wall = [], []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            cpu.append(probe())
            wall.append(time.perf_counter() - t0)
    finally:
        stop.set()
        for p in procs:
            p.join()
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--readings", type=int, default=5)
    args = ap.parse_args()
    out = {"A": ([], []), "B": ([], [])}
    for rnd in range(args.rounds):
        for kind in "AB":
            cpu, wall = _block(args.readings, kind == "B")
            out[kind][0].extend(cpu)
            out[kind][1].extend(wall)
            print(f"round {rnd} {kind} load {os.getloadavg()[0]:.2f}: " + " ".join(f"{x * 1e3:.1f}" for x in cpu)
                  + " ms", flush=True)
    ref = statistics.median(out["A"][0])
    for kind, (cpu, wall) in out.items():
        q = statistics.quantiles(cpu, n=10)
        print(f"{kind}: n={len(cpu)} median {statistics.median(cpu) * 1e3:.2f} ms, p10 {q[0] * 1e3:.2f}, "
              f"p90 {q[-1] * 1e3:.2f}, min {min(cpu) * 1e3:.2f}, max {max(cpu) * 1e3:.2f}; max |r/median(A) - 1| "
              f"{max(abs(x / ref - 1) for x in cpu):.1%}; worst pair {max(cpu) / min(cpu) - 1:.1%}; wall per "
              f"reading median {statistics.median(wall):.2f} s, max {max(wall):.2f} s")


if __name__ == "__main__":
    main()
