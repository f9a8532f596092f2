"""torch tensor parallelism's host time per module: the calibration's loop against a step's, on a 2-rank gloo mesh.

``host.tp_forward_module_us`` / ``tp_backward_module_us`` come from :mod:`executor.tp_host_bench`: the 10th
percentile of ONE micro-batch's forward (forward + backward) after a barrier, tp model less plain model, less the
seconds the executor's ``TpClock`` counts inside the collectives, over the modules. A run's step
(``executor.strategies.parallel.ParallelRunner.train_step``) instead runs ``--micro-batches`` micro-batches back
to back after the optimizer, and its forward / backward phases are the *sums* (so the step pays the mean, not a
low percentile). This probe times both on the same two ranks, in the same iterations, the models interleaved (a
barrier before each), each iteration ending with a for-loop AdamW step as the executor's:

- ``calib``: one micro-batch, as the calibration (p10 and mean of the iterations);
- ``step``: ``--micro-batches`` micro-batches back to back, per micro-batch (p10 and mean).

and prints per module (``executor.host_bench.tp_modules``), forward and backward apart,
``(t(tp) − t(plain)) / modules`` for each loop and statistic.

Usage: ``PYTHONPATH=. python benchmarks/tp_step_host_probe.py --launches 3`` (about 20 s a launch on the idle
2-core VM). Results: docs/validation.md ("tp21") [src: own-tp-step-host-probe-2026-11-26].
"""

import argparse
import statistics
import time

from executor.compute_bench import timing_of
from executor.compute_grid import tiny_model
from executor.host_bench import tp_modules
from executor.launch import run
from simulator.workload.kinds import DtypePolicy
from simulator.workload.presets import get_preset


def _pass(model, x, y, clock, micro_batches: int) -> tuple[list[float], list[float]]:
    """Forward and backward seconds less the collectives' of each of ``micro_batches`` micro-batches run back to
    back, as ``ParallelRunner._accumulate`` runs them."""
    fwd, bwd = [], []
    for _ in range(micro_batches):
        c0, t0 = clock.seconds, time.perf_counter()
        loss = model(x, y) / micro_batches
        c1, t1 = clock.seconds, time.perf_counter()
        loss.backward()
        c2, t2 = clock.seconds, time.perf_counter()
        fwd.append((t1 - t0) - (c1 - c0))
        bwd.append((t2 - t1) - (c2 - c1))
    return fwd, bwd


def rank_fn(rank, world, spec, mb, micro_batches, repeats, warmup):
    """Per model and loop the seconds per micro-batch (module docstring)."""
    import torch
    import torch.distributed as dist

    from executor.phase_clock import TpClock
    from executor.tp_host_bench import tp_probe_setup

    models, x, y = tp_probe_setup(spec, world, mb, 0)
    optims = {k: torch.optim.AdamW(m.parameters(), lr=1e-4, foreach=False) for k, m in models.items()}
    clock, out = TpClock(), {}
    with clock.timing():
        for i in range(warmup + repeats):
            for loop, count in (("calib", 1), ("step", micro_batches)):
                for name, model in models.items():
                    optims[name].zero_grad(set_to_none=True)
                    dist.barrier()
                    fwd, bwd = _pass(model, x, y, clock, count)
                    optims[name].step()
                    if i >= warmup:
                        out.setdefault(f"{loop}_{name}_fwd", []).extend(fwd)
                        out.setdefault(f"{loop}_{name}_bwd", []).extend(bwd)
    return out


STATS = {"p10": lambda v: timing_of(v).p10_s, "median": statistics.median, "mean": statistics.fmean}


def per_module_us(per_rank: list[dict], loop: str, phase: str, modules: int) -> dict[str, float]:
    """Statistic name → ``(t(tp) − t(plain)) / modules`` in µs, each statistic the mean over ranks."""
    def stat(key, fn):
        return statistics.fmean(fn(r[key]) for r in per_rank)
    return {name: (stat(f"{loop}_tp_{phase}", fn) - stat(f"{loop}_plain_{phase}", fn)) / modules * 1e6
            for name, fn in STATS.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--micro-batches", type=int, default=4, help="the suite's tp case: 4")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    spec = tiny_model(get_preset("gpt3-125m"), DtypePolicy.FP32, tp=2)
    modules = tp_modules(spec)
    for launch in range(a.launches):
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        per_rank = run(rank_fn, 2, args=(spec, 2, a.micro_batches, a.repeats, a.warmup), num_threads=1)
        cells = []
        for phase in ("fwd", "bwd"):
            calib, step = (per_module_us(per_rank, loop, phase, modules) for loop in ("calib", "step"))
            cells.append(f"{phase} calib " + " ".join(f"{k} {v:.0f}" for k, v in calib.items())
                         + " step " + " ".join(f"{k} {v:.0f}" for k, v in step.items())
                         + f" step mean / calib p10 {step['mean'] / calib['p10']:.2f}")
        plain = {k: statistics.fmean(statistics.fmean(r[k]) for r in per_rank) * 1e3
                 for k in per_rank[0] if "plain" in k}
        print(f"launch {launch + 1} load {load} us/module: " + " | ".join(cells)
              + " | plain ms/mb " + " ".join(f"{k} {v:.2f}" for k, v in plain.items()), flush=True)


if __name__ == "__main__":
    main()
