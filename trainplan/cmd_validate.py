"""``trainplan validate``: compare a results file from ``trainplan execute`` with the simulator's estimates.

    trainplan validate results.json [--cluster FILE] [--plot FILE.png] [--json]
    trainplan validate --suite default|quick [--nproc N] [--calibrate] [--retries N] [--cluster FILE]
                       [--out report.md] [--runs DIR] [--plans-only | --no-run] [--json]

Re-simulates the plan as run (embedded in the results file) on the cluster with both engines and
prints estimated vs measured step time, each measured phase and memory, with signed errors
(:mod:`simulator.validate`; docs/validation.md). ``--suite`` plans, runs and validates the suite
of small plans (:mod:`trainplan.validate_suite`). Bad input is one line, exit 2, before any work.
"""

from __future__ import annotations

import argparse
import sys

from trainplan import cli_common, validate_suite


def register(subparsers) -> None:
    p = subparsers.add_parser("validate", help="estimated vs measured for a results file from `trainplan execute`",
                              description="Re-simulate the plan a results file ran (its shapes as run) with both "
                                          "engines and print estimated vs measured step time, phases and memory "
                                          "with their signed errors (docs/validation.md).")
    p.add_argument("results", metavar="RESULTS.json", nargs="?",
                   help="a results file written by `trainplan execute --out` (or give --suite)")
    p.add_argument("--cluster", metavar="FILE",
                   help="cluster preset or file to estimate on (default: the plan's cluster for a GPU run; "
                        "required for a gloo/CPU run: localhost-cpu or a file from `trainplan calibrate`)")
    p.add_argument("--plot", metavar="FILE.png", help="measured phases above the estimated breakdown, as an image")
    p.add_argument("--json", action="store_true",
                   help="print the rows and the top-level step_time_error and memory_error (signed fractions); "
                        "with --suite, the rows and step_time_mape (a fraction)")
    validate_suite.add_arguments(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from simulator.errors import SpecError
    from simulator.jsonio import check_plot_path
    from simulator.run_results import load_results
    from simulator.validate import check_results, run_cluster, validate
    from simulator.validate_report import format_validation, save_figure

    if args.suite is not None:
        if args.results is not None:
            raise SpecError("RESULTS.json", "give a results file or --suite, not both")
        return validate_suite.run(args)
    validate_suite.check_not_given(args)
    if args.results is None:
        raise SpecError("RESULTS.json", "give a results file from `trainplan execute --out`, or --suite quick|default")
    if args.plot is not None:
        check_plot_path(args.plot, "--plot")
    try:
        results = load_results(args.results)
    except SpecError as err:
        raise SpecError("RESULTS.json", str(err)) from None
    check_results(results)
    cluster = run_cluster(results, args.cluster)
    v = validate(results, cluster)
    written = [str(save_figure(v, args.plot))] if args.plot else []
    if args.json:
        cli_common.print_json(v.to_dict() | {"results": args.results, "files": written})
    else:
        print(format_validation(v))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0
