"""Count the operators eager torch dispatches for the executor's model and print them beside what the compute
model charges (``Kernel.dispatches``, simulator/workload/eager_dispatch.py).

Deterministic (no timing): one process, fp32 on the CPU, ``--scale tiny`` of ``--model`` (default gpt3-125m, the
validation suite's model), micro-batch 2, counted by :mod:`executor.dispatch_count`. Per block (two blocks less
one), for the whole model with its loss, and for the AdamW step; per operator, then the totals against the
model's. A model the counts were not measured for (simulator.workload.eager_dispatch.measured) shows the gap.
Usage: ``PYTHONPATH=. python benchmarks/eager_dispatch_count.py [--model NAME] [--json]``. Results: docs/sources.md,
entry ``own-eager-dispatch-count``; docs/validation.md.
"""

from __future__ import annotations

import argparse
import json
import sys

from executor.compute_grid import executed, tiny_model
from executor.dispatch_count import count_block, count_model
from executor.model import build_gpt
from simulator.host_overhead import ADAMW_PER_TENSOR_CALLS
from simulator.workload.kinds import DtypePolicy
from simulator.workload.ops import edge_work, layer_work
from simulator.workload.registry import load_model

MICRO_BATCH = 2


def modelled(spec) -> dict[str, int]:
    """What the compute model charges on a CPU, per phase."""
    block, edges = layer_work(spec, MICRO_BATCH), edge_work(spec, MICRO_BATCH)
    calls = {name: sum(k.dispatches for w in works for k in getattr(w, phase))
             for name, works, phase in (("block forward", block, "fwd"), ("block backward", block, "bwd"),
                                        ("edges forward", edges, "fwd"), ("edges backward", edges, "bwd"))}
    kernels = {name.replace("forward", "forward kernels").replace("backward", "backward kernels"):
               sum(len(getattr(w, phase)) for w in works)
               for name, works, phase in (("block forward", block, "fwd"), ("block backward", block, "bwd"),
                                          ("edges forward", edges, "fwd"), ("edges backward", edges, "bwd"))}
    tensors = len(list(build_gpt(spec).parameters()))
    return {**calls, **kernels, "model forward": spec.layers * calls["block forward"] + calls["edges forward"],
            "model backward": spec.layers * calls["block backward"] + calls["edges backward"],
            "optimizer": ADAMW_PER_TENSOR_CALLS * tensors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gpt3-125m")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    spec = executed(tiny_model(load_model(args.model), DtypePolicy.FP32))
    block, model = count_block(spec, MICRO_BATCH), count_model(spec, MICRO_BATCH)
    counted = {"block forward": block.forward, "block backward": block.backward, "model forward": model.forward,
               "model backward": model.backward, "optimizer": model.optimizer}
    ours = modelled(spec)
    if args.json:
        json.dump({"model": spec.name, "counted": counted, "modelled": ours}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{spec.name}: fp32, micro-batch {MICRO_BATCH}, {spec.layers} blocks")
    for name, ops in counted.items():
        detail = ", ".join(f"{k.removeprefix('aten.')} {v}" for k, v in sorted(ops.items()))
        print(f"{name:15s} torch {sum(ops.values()):4d}  model {ours[name]:4d}   ({detail})")
    print("op-list kernels: " + ", ".join(f"{k} {v}" for k, v in ours.items() if "kernels" in k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
