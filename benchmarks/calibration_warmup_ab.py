"""Does a calibration read the machine differently when its first probe is not the first launch? A paired test.

Alternates ``--pairs`` times two suite calibrations (:func:`executor.suite_calibration.calibrated_cluster`, what
``trainplan validate --suite default --calibrate`` runs before its cases):

- A: as the suite runs it;
- B: after one throwaway launch of the rank-step probe (:func:`executor.step_bench.time_rank_steps`, 2 gloo
  processes, 10 steps: torch imported, a gloo group formed and the tiny model stepped once before the first probe).

Each calibration's file re-validates every recorded suite folder given (``validate --suite default --no-run --runs
DIR --cluster FILE``, the same measured steps for every file), and its fitted host figures are printed beside the
step-time MAPE and the mean signed error (fractions; negative: the estimates low). The hypothesis it tests
(docs/validation.md, "Old against new calibration code, paired, quiet", and cal19): the runs' own calibrations, taken right after an idle
machine, left the estimates 8-10 % low where calibrations taken later did not.

Before each calibration the script sleeps ``--idle-s`` (default 60 s), so that both kinds follow an idle machine, the
condition the hypothesis names; nothing else should run.

Usage: ``PYTHONPATH=. python benchmarks/calibration_warmup_ab.py --runs /tmp/r1 /tmp/r2 --pairs 2 --out /tmp/ab``
(each calibration 2-3 min on a quiet 2-core VM, 7-14 min at load 17-30). Results: docs/validation.md, cal19.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def warm_up() -> None:
    """One throwaway 2-process launch of the rank-step probe on the suite's tiny model (10 steps)."""
    from dataclasses import replace

    from executor.compute_grid import default_grid, executed
    from executor.step_bench import time_rank_steps
    from simulator.validation_suite import MODEL
    from simulator.workload import get_preset
    from simulator.workload.kinds import DtypePolicy

    grid = default_grid(get_preset(MODEL), DtypePolicy.FP32)
    time_rank_steps(executed(replace(grid.block, dtype=DtypePolicy.FP32)), grid.micro_batch, repeats=10, warmup=2)


def figures(path: Path) -> dict:
    """The calibrated figures a case's estimate leans on most (per-call host time, loop terms, the 2-process wait)."""
    from simulator.cluster.io import cluster_to_dict, load_cluster

    c = load_cluster(str(path))
    h, d, comm = c.node.host, c.device, cluster_to_dict(c)["comm"]
    return {"forward_call_us": d.kernel_launch_overhead_us, "backward_call_us": d.backward_call_overhead_us,
            "op_call_us": d.op_call_overhead_us, "step_loop_us": h.step_loop_us,
            "first_cold_us": h.first_microbatch_cold_us, "blocking_wait_us": comm.get("blocking_wait_us")}


def revalidate(runs: str, cluster: Path) -> dict:
    """Step-time MAPE and mean signed error of ``runs`` (recorded) on ``cluster``."""
    out = subprocess.run([sys.executable, "-m", "trainplan", "validate", "--suite", "default", "--no-run", "--runs",
                          runs, "--cluster", str(cluster), "--json"], cwd=ROOT, capture_output=True, text=True,
                         env=os.environ | {"PYTHONPATH": str(ROOT)}, check=True)
    report = json.loads(out.stdout)
    signed = [r["step_time_error"] for r in report["rows"] if r.get("step_time_error") is not None]
    return {"mape": report["step_time_mape"], "signed": statistics.fmean(signed) if signed else None,
            "families": report["family_step_time_mape"]}


def main() -> None:
    from executor.suite_calibration import calibrated_cluster

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs="+", required=True, help="recorded suite folders to re-validate")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--order", default="AB", help="the kinds in each pair, in order (AB or BA)")
    p.add_argument("--out", required=True, help="folder for the calibrations' files")
    p.add_argument("--idle-s", type=float, default=60.0,
                   help="seconds this script sleeps before each calibration, so that both kinds follow an idle "
                        "machine as a suite's calibration does (0: back to back)")
    args = p.parse_args()
    rows = []
    for i in range(args.pairs):
        for kind in args.order:
            folder = Path(args.out) / f"{kind}{i}"
            time.sleep(args.idle_s)
            load, start = os.getloadavg()[0], time.perf_counter()
            if kind == "B":
                warm_up()
            path, _ = calibrated_cluster("localhost-cpu", folder, calibrate_network=True, nproc=4)
            rows.append({"kind": kind, "pair": i, "load": round(load, 2),
                         "wall_s": round(time.perf_counter() - start, 1), "file": path, **figures(Path(path))})
            print(json.dumps(rows[-1]), flush=True)
    for row in rows:  # after every calibration: the folders may still be filling while the first ones run
        print(json.dumps(row | {"revalidated": {r: revalidate(r, Path(row["file"])) for r in args.runs}}), flush=True)

if __name__ == "__main__":
    main()
