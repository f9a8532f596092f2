"""What sequence parallelism adds to torch tensor parallelism's host time per micro-batch, on a 2-rank gloo mesh.

``executor/tp_host_bench.py`` measures the per-module terms (``host.tp_forward_module_us`` / ``_backward_``) on the
tp model without sequence parallelism only. This probe times, in the same iterations of one launch (a barrier before
each model), the plain tiny model, the executor's tp model and its tp model with sequence parallelism
(``executor.strategies.tensor.parallelize_gpt(..., sequence_parallel)``), forward and backward apart, each less the
seconds the executor's ``TpClock`` counts inside the collectives (what the run's tp phase holds); the 10th percentile
of 60 iterations after 5, the mean over the two ranks; and prints the differences sp − tp.

Usage: ``PYTHONPATH=. python benchmarks/sp_module_probe.py 3`` (launches). Results: docs/validation.md ("tree19"),
[src: own-sp-module-probe-2026-11-26]; used by :data:`simulator.framework_host.SP_MODULES_PER_BLOCK`.
"""

import statistics
import sys
import time

from executor.compute_bench import timing_of
from executor.compute_grid import tiny_model
from executor.launch import run
from simulator.workload.kinds import DtypePolicy
from simulator.workload.presets import get_preset


def rank_fn(rank, world, spec, mb, repeats, warmup):
    """Per timed iteration each model's forward, backward and collective seconds (module docstring)."""
    import torch.distributed as dist

    from executor.phase_clock import TpClock
    from executor.tp_host_bench import tp_probe_setup

    models, x, y = tp_probe_setup(spec, world, mb, 0, sequence_parallel=True)
    clock, out = TpClock(), {}
    with clock.timing():
        for i in range(warmup + repeats):
            for name, m in models.items():
                dist.barrier()
                c0, t0 = clock.seconds, time.perf_counter()
                loss = m(x, y)
                c1, t1 = clock.seconds, time.perf_counter()
                loss.backward()
                c2, t2 = clock.seconds, time.perf_counter()
                if i >= warmup:
                    out.setdefault(name + "_fwd", []).append((t1 - t0) - (c1 - c0))
                    out.setdefault(name + "_bwd", []).append((t2 - t1) - (c2 - c1))
                    out.setdefault(name + "_coll", []).append(c2 - c0)
    return out


def main() -> None:
    spec = tiny_model(get_preset("gpt3-125m"), DtypePolicy.FP32, tp=2)
    for r in range(int(sys.argv[1])):
        per_rank = run(rank_fn, 2, args=(spec, 2, 60, 5), num_threads=1)
        p10 = {k: statistics.fmean(timing_of(pr[k]).p10_s for pr in per_rank) * 1e3 for k in per_rank[0]}
        print(f"run {r + 1} p10 ms: " + " ".join(f"{k} {v:.3f}" for k, v in p10.items())
              + f" | sp-tp fwd {p10['sp_fwd'] - p10['tp_fwd']:.3f} bwd {p10['sp_bwd'] - p10['tp_bwd']:.3f}", flush=True)


if __name__ == "__main__":
    main()
