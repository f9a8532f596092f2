"""Record (or check) the step-time and memory estimates of a fixed set of examples.

Refactors must leave estimates unchanged: ``python benchmarks/golden_estimates.py --write FILE``
records them (run on the commit before a refactor), ``tests/test_golden_estimates.py`` recomputes
them on the current code and compares to 1e-9. Only the flat strategy keys and the engines' public
entry points are used, so the same script runs before and after a refactor.

The cases: the README's ``simulate`` examples and a spread of layouts (DDP, ZeRO 1-3, offload,
1F1B/GPipe/interleaved pipelines, TP+SP, recompute, eager attention, a parameter server, buckets) and a
mixture-of-experts model with expert and context parallelism under FP8 block scaling.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CASES = {
    "gpt3-175b-1024-3d": ("gpt3-175b", "dgx-a100", 128, 2048, {"global_batch": 1536, "micro_batch": 1, "dp": 16,
                                                               "tp": 8, "pp": 8, "recompute": "full"}),
    "llama2-7b-deepspeed-z3": ("llama2-7b", "dgx-h100", 1, 4096, {"global_batch": 64, "micro_batch": 2, "dp": 8,
                                                                 "zero": 3, "bucket_params": 500000000,
                                                                 "overlap_grad_reduce": False}),
    "gpt3-1.3b-ps-async": ("gpt3-1.3b", "dgx-a100", 2, None, {"global_batch": 256, "dp": 16,
                                                             "dp_sync": "param-server", "ps_mode": "async",
                                                             "ps_shards": 4, "staleness_steps": 2}),
    "gpt3-125m-small-3d": ("gpt3-125m", "dgx-h100", 1, None, {"global_batch": 16, "dp": 2, "tp": 2, "pp": 2}),
    "gpt3-1.3b-interleaved-sp": ("gpt3-1.3b", "dgx-a100", 2, None, {"global_batch": 64, "dp": 2, "tp": 2, "pp": 4,
                                                                   "schedule": "interleaved", "virtual_stages": 2,
                                                                   "sequence_parallel": True,
                                                                   "recompute": "selective"}),
    "gpt3-1.3b-gpipe-eager": ("gpt3-1.3b", "dgx-a100", 1, None, {"global_batch": 32, "dp": 2, "pp": 4,
                                                                "schedule": "gpipe", "attention": "eager"}),
    "llama2-7b-z1-full-recompute": ("llama2-7b", "dgx-a100", 1, 2048, {"global_batch": 16, "dp": 8, "zero": 1,
                                                                      "recompute": "full"}),
    "llama2-13b-z3-tp2": ("llama2-13b", "dgx-a100", 2, 2048, {"global_batch": 32, "dp": 8, "tp": 2, "zero": 3}),
    "llama2-7b-z2-ring-buckets": ("llama2-7b", "h100-roce", 2, 2048, {"global_batch": 32, "dp": 16, "zero": 2,
                                                                     "allreduce_algorithm": "ring",
                                                                     "bucket_bytes": 52428800}),
    "gpt3-2.7b-ddp-tree-no-overlap": ("gpt3-2.7b", "dgx-a100", 4, None, {"global_batch": 128, "dp": 32,
                                                                        "allreduce_algorithm": "tree",
                                                                        "overlap_grad_reduce": False}),
    "mixtral-fp8-blockwise-ep-cp": ("mixtral-8x7b", "dgx-h100", 2, 8192, {"global_batch": 16, "dp": 4, "cp": 2, "tp": 2,
                                                                        "ep": 2, "sequence_parallel": True,
                                                                        "framework": "megatron", "zero": 1,
                                                                        "precision": "fp8",
                                                                        "fp8_recipe": "te-blockwise"}),
}
DES_CASES = ("gpt3-125m-small-3d", "gpt3-1.3b-ps-async", "gpt3-1.3b-interleaved-sp", "llama2-7b-z2-ring-buckets")


def _inputs(name):
    from simulator.cluster.io import load_cluster
    from simulator.strategy.flat import strategy_from_flat
    from simulator.workload import load_model

    model, cluster, nodes, seq, keys = CASES[name]
    workload = load_model(model)
    if seq is not None:
        workload = workload.with_seq(seq)
    return workload, load_cluster(cluster, nodes=nodes), strategy_from_flat(dict(keys))


def estimates() -> dict:
    """{case: {engine: {"step_time_s", breakdown categories..., "memory_total_bytes"}}}."""
    from simulator.analytical import estimate
    from simulator.compile import compile_step
    from simulator.engine.step import simulate

    out = {}
    for name in CASES:
        workload, cluster, strategy = _inputs(name)
        rows = {"analytical": estimate(cluster, workload, strategy)}
        if name in DES_CASES:
            rows["des"] = simulate(compile_step(cluster, workload, strategy), cluster, seed=0, steps=1)
        out[name] = {}
        for engine, r in rows.items():
            row = {"step_time_s": r.step_time_s}
            row.update({getattr(c, "value", str(c)): v for c, v in r.breakdown.items()})
            if r.memory is not None:
                row["memory_total_bytes"] = r.memory.worst.total_bytes
                row["memory_stages_total_bytes"] = [st.total_bytes for st in r.memory.stages]
            out[name][engine] = row
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="FILE", help="write the estimates as JSON to FILE")
    args = parser.parse_args(argv)
    data = estimates()
    text = json.dumps(data, indent=1, sort_keys=True)
    if args.write:
        Path(args.write).write_text(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
