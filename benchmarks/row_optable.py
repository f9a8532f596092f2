"""One published row's op table, per micro-batch, by operation: the block's rows × layers plus the edges, as
:func:`simulator.compute.layer_times` and :func:`~simulator.compute.edge_times` give them (no power term), then the
row's estimate and its breakdown. For hand-working a row (docs/validation.md, foundry23).

    PYTHONPATH=. python benchmarks/row_optable.py foundry-h100-3b-4k-8
"""

from __future__ import annotations

import collections
import sys

from benchmarks.validate_published import cluster_of, load_runs, step_time_from_figure, strategy_of, workload_of
from simulator.analytical import estimate
from simulator.compute import edge_times, layer_times
from simulator.strategy.formats import runs_autocast


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    runs = {r.id: r for r in load_runs()}
    if len(args) != 1 or args[0] not in runs:
        print("usage: row_optable.py ROW_ID (an id of benchmarks/published_runs.yaml)", file=sys.stderr)
        return 2
    run = runs[args[0]]
    spec, cluster, s = workload_of(run), cluster_of(run), strategy_of(run)
    autocast = runs_autocast(spec.dtype, s)
    rows = layer_times(spec, cluster.device, s.micro_batch, run.seq, autocast=autocast, model_code=s.model_code)
    edges = edge_times(spec, cluster.device, s.micro_batch, run.seq, autocast=autocast, model_code=s.model_code)
    by_op: collections.Counter = collections.Counter()
    for r in rows:
        by_op[r.op.value] += r.time_s * spec.layers
    for r in edges:
        by_op["edge " + r.op.value] += r.time_s
    print(f"{run.id}: autocast {autocast}, model code {s.model_code.value}, micro-batch {s.micro_batch} x {run.seq}")
    for op, t in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"  {op:24s} {t * 1e3:9.2f} ms")
    print(f"  {'per micro-batch':24s} {sum(by_op.values()) * 1e3:9.2f} ms")
    result = estimate(cluster, spec, s)
    print(f"estimate {result.step_time_s:.3f} s, published {step_time_from_figure(run, spec, run.published):.3f} s")
    print({c.value: round(v, 4) for c, v in result.breakdown.items() if v})
    return 0


if __name__ == "__main__":
    sys.exit(main())
