"""What ``trainplan plan`` prints and writes for one search: the ranked table, the counts, the files.

:func:`report` takes the :class:`planner.result.PlanResult` of :func:`planner.plan` and the parsed
flags, writes ``--csv`` (every ranked candidate) and ``--out`` (the best plan file), and prints
``--json``, or the top ``--top`` plans (``--pareto``: the step-time / memory front) with
``--explain``'s reasons; the counts line goes to stderr. The search itself is run by
:mod:`trainplan.cmd_plan`; a sweep's table is :func:`trainplan.plan_sweep.table`.
"""

from __future__ import annotations

import sys

from simulator.units import GB
from trainplan import cli_common


def table(result, top: int, pareto: bool = False) -> str:
    """The top ``top`` plans, or with ``pareto`` every plan on the step-time / memory front (# is the rank)."""
    from planner.explain import describe

    lines = [f"{'#':>2}  {'step s':>9} {'tok/s/GPU':>10} {'MFU':>6} {'GB/GPU':>7} {'free GB':>7}  strategy"]
    rows = result.pareto() if pareto else result.top(top)
    width = max([2] + [len(str(i + 1)) for i in rows.index])
    lines[0] = " " * (width - 2) + lines[0]
    for i, r in rows.iterrows():
        lines.append(f"{i + 1:>{width}}  {r['step_time_s']:>9.4g} {r['tokens_per_s_per_gpu']:>10,.0f} {r['mfu']:>6.1%} "
                     f"{r['memory_bytes'] / GB:>7.1f} {r['headroom_bytes'] / GB:>7.1f}  {describe(r['strategy'])}")
    return "\n".join(lines)


def counts_line(counts) -> str:
    """One line: how many candidates were enumerated, invalid, did not fit, ranked, refined, and the seconds."""
    d = counts.to_dict()
    why = lambda by: ", ".join(f"{k} {v}" for k, v in by.items())  # noqa: E731
    return (f"candidates: {d['enumerated']} enumerated, {d['invalid']} invalid ({why(d['invalid_by_reason'])}), "
            f"{d['infeasible']} do not fit ({why(d['infeasible_by_reason'])}), {d['ranked']} ranked, "
            f"{d['refined']} refined by the DES; seconds " + ", ".join(f"{k} {v:g}" for k, v in d["seconds"].items()))


def _gpus_per_node(result) -> int | None:
    """The node size the explanation names crossing groups by (None when nothing fits)."""
    return None if result.best is None else result.best.cluster.node.gpus_per_node


def report(args, result, compare=None) -> int:
    """Write and print one search's outputs; ``compare(frame)`` adds ``--against``'s lines to ``--explain``.
    Returns the exit code: 0 with a plan, 1 when nothing fits."""
    from planner.explain import explain

    if not args.quiet:
        print(counts_line(result.counts), file=sys.stderr)
    if args.csv:
        frame = result.frame.drop(columns=["strategy"]).assign(strategy=[str(s) for s in result.frame["strategy"]])
        frame.to_csv(args.csv, index=False)
    if args.out and result.best is not None:
        result.best.save(args.out)
    if args.json:
        out = result.to_dict(args.top, pareto=args.pareto)
        if args.explain:
            out["explain"] = (explain(result.frame, result.notes, _gpus_per_node(result))
                              + (compare(result.frame) if compare else []))
        cli_common.print_json(out)
    elif result.best is None:
        print("nothing fits: " + counts_line(result.counts))
        print("to make it fit: more GPUs, --zero 3, --recompute full, a smaller --max-mbs, or --offload")
    else:
        if args.pareto:
            print("plans no other beats on both step time and memory per GPU (# is the rank):")
        print(table(result, args.top, args.pareto))
        if args.explain:
            print("\n".join(explain(result.frame, result.notes, _gpus_per_node(result))
                             + (compare(result.frame) if compare else [])))
    for path in (args.out if result.best is not None else None, args.csv):
        if path:
            print(f"wrote {path}", file=sys.stderr)
    return 0 if result.best is not None else 1
