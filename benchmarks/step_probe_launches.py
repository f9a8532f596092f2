"""What a rank-step probe launch costs and reads: plain-only launches against full ones, alternated.

``calibrate --compute`` takes its per-operator fields as the median over
:data:`executor.step_launches.STEP_PROBE_LAUNCHES` launches of the rank-step probe, the first with its DDP and FSDP2
steps, the others plain only (cal30). This script runs ``--rounds`` times the pair (plain-only launch, full launch)
with the calibration's own arguments (:func:`executor.calibrate_compute.measure_rank_steps`, llama2-7b's tiny fp32
model), and prints each launch's wall seconds and its fields (:func:`executor.step_launches.launch_fields`; the AdamW
update's bytes from the model's parameters), then the note the calibration would write for each round's first three.

Usage: ``PYTHONPATH=. python benchmarks/step_probe_launches.py --rounds 2`` (a plain launch 4.5-7 s, a full one
12-16 s on the 2-core VM at load 3). Results: docs/validation.md, cal30.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of four launches: plain-only, full, plain-only, full")
    args = parser.parse_args()

    from executor.calibrate_compute import default_grid, measure_rank_steps
    from executor.compute_bench import Timing
    from executor.compute_grid import executed
    from executor.host_bench import AdamwTiming
    from executor.model import build_gpt
    from executor.step_launches import StepLaunches, launch_fields
    from simulator.cluster.io import load_cluster
    from simulator.workload import DtypePolicy, load_model

    grid = default_grid(load_model("llama2-7b"), DtypePolicy.FP32)
    device, spec = load_cluster("localhost-cpu").device, executed(grid.block)
    params = list(build_gpt(spec, 0).parameters())
    adamw = AdamwTiming(step=Timing(median_s=0.0, p10_s=0.0, p90_s=0.0), tensors=len(params),
                        params=sum(p.numel() for p in params))
    for _ in range(max(1, args.rounds)):
        fields = []
        for wrapped in (False, True, False, True):
            t0 = time.perf_counter()
            steps = measure_rank_steps(grid, repeats=100, warmup=5, wrapped=wrapped)
            wall = time.perf_counter() - t0
            f = launch_fields(device, spec, grid.micro_batch, adamw, DtypePolicy.FP32, steps)
            fields.append(f)
            print(f"{'full ' if wrapped else 'plain'} launch {wall:5.1f} s wall: forward {f.forward_us:.2f}, backward "
                  f"{f.backward_us:.2f}, per op call {f.op_call_us:.2f}, step loop {f.step_loop_us:.0f} us", flush=True)
        print(StepLaunches(tuple(fields[:3])).note(), flush=True)


if __name__ == "__main__":
    main()
