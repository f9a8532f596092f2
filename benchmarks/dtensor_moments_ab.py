"""The DTensor wait's rule A/B at 2 processes (executor/calibrate_dtensor.py): one take of 10 timed iterations (the
rule before tp22) against the median of three takes of 4 (tp22's), in the same session.

Each round launches A B A B A B: A = :func:`~executor.calibrate_dtensor.dtensor_calls` with 10 iterations, its
``W_dt(2)``; B = :func:`~executor.calibrate_dtensor.dtensor_moment`; after the round the median of its three B takes
(:func:`~executor.calibrate_dtensor.dtensor_moments`), so B's takes are separated by A launches as a calibration's are
by its other probes. All against the ``localhost-cpu`` preset on 2 processes (the fast estimate only shifts every
value alike). Prints each launch (UTC, load average, wall s, the ranks' CPU s, ``W_dt`` and its SP twin) and each
round's median; ``--out`` keeps every rank's per-iteration seconds and calls as JSON.

Usage: ``PYTHONPATH=. python benchmarks/dtensor_moments_ab.py --rounds 4 --out ab.json``. Results:
docs/validation.md, tp22.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace


def _launch(kind: str, take, fitted, log: list, out: str | None):
    from executor.calibrate_dtensor import dtensor_waits_us

    from executor.own_cpu import children_cpu_s

    cpu0, load0, t0 = children_cpu_s(), os.getloadavg()[0], time.perf_counter()
    measured = take()
    wall_s = time.perf_counter() - t0
    cpu_s = children_cpu_s() - cpu0  # forked ranks included (executor/own_cpu.py)
    w, w_sp = (dtensor_waits_us(fitted, measured, sp).get(2) for sp in (False, True))
    log.append({"kind": kind, "utc": time.strftime("%H:%M:%S", time.gmtime()), "load0": load0, "wall_s": wall_s,
                "child_cpu_s": cpu_s, "w": w, "w_sp": w_sp,
                "raw": {str(sp): [rank[sp] for rank in measured[2]] for sp in (False, True)}})
    if out:
        with open(out, "w") as f:
            json.dump(log, f)
    print(f"{kind:2} {log[-1]['utc']} load {load0:.1f} wall {wall_s:.1f} s cpu {cpu_s:.1f} s W {w:.0f} SP {w_sp:.0f}",
          flush=True)
    return measured


def main() -> None:
    from executor.calibrate_dtensor import ITERATIONS, dtensor_calls, dtensor_moment, dtensor_moments
    from simulator.cluster.io import load_cluster

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON file for every launch's raw per-iteration data")
    args = p.parse_args()
    base = load_cluster("localhost-cpu")
    fitted = replace(base, node=replace(base.node, gpus_per_node=2))
    log: list = []
    for _ in range(args.rounds):
        takes = []
        for k in range(3):
            _launch("A", lambda: dtensor_calls((2,), iterations=ITERATIONS), fitted, log, args.out)
            takes.append(_launch(f"B{k}", lambda: dtensor_moment((2,)), fitted, log, args.out))
        w, sp = dtensor_moments(fitted, takes)
        print(f"B median {w[2].text()}; SP {sp[2].text()}", flush=True)


if __name__ == "__main__":
    main()
