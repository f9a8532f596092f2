"""``trainplan validate --suite default|quick``: plan, run and validate the suite of small plans.

    trainplan validate --suite quick [--nproc N] [--calibrate] [--retries N] [--cluster FILE] [--out report.md]
                       [--runs DIR] [--plans-only | --no-run] [--backend gloo|nccl] [--json]

Composes ``simulator.validation_suite`` (the cases), ``executor.suite_run`` (calibrate, run each case
as ``trainplan execute --scale tiny`` does, sample the machine's load) and ``simulator.suite_runs`` /
``suite_report`` / ``suite_markdown`` (validate each results file, MAPE, table, report, scatter).
``--plans-only`` and ``--no-run`` split it for clusters: write the plans, run them under torchrun,
then report from the results files (docs/validation.md).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from simulator.errors import SpecError
from trainplan import cli_common

SUITE_ONLY = ("nproc", "calibrate", "retries", "out", "runs", "plans_only", "no_run", "backend")
DEFAULT_RETRIES = 2
"""``--retries``: extra runs of a case measured on a noisy machine (a hygiene protocol, not a model term): quiet
suites of 2026-11-26 flagged 3-10 of 21 cases, mostly for a speed drift that passes within minutes
(docs/validation.md, val28)."""


def add_arguments(p) -> None:
    g = p.add_argument_group("suite (plan, run and validate a suite of small plans)")
    g.add_argument("--suite", metavar="default|quick", help="run the suite instead of validating one results file")
    g.add_argument("--nproc", type=int, metavar="N",
                   help="most local processes per case (default: each case's own, 2-8); fewer shrink its dp, and a "
                        "case that then loses what it tests is skipped")
    g.add_argument("--calibrate", action="store_true",
                   help="first measure this machine's all-reduce (ring, tree) and estimate on the fitted cluster")
    g.add_argument("--retries", type=int, metavar="N",
                   help="run a case the report flags noisy (other work's CPU share, or the machine's speed drift from "
                        "the calibration's, over its threshold) again, up to N more times, and report its first quiet "
                        f"attempt, else its least drifted (default {DEFAULT_RETRIES}; 0: each case once)")
    g.add_argument("--out", metavar="REPORT.md", help="write the Markdown report, and its scatter as REPORT.png")
    g.add_argument("--runs", metavar="DIR", help="folder for the plans, results files and suite.json (default: "
                                                 "REPORT-runs beside --out, else a temporary folder)")
    g.add_argument("--plans-only", action="store_true",
                   help="write the plans into --runs and print how to run each (e.g. under torchrun), then stop")
    g.add_argument("--no-run", action="store_true",
                   help="validate the results files already in --runs (an earlier suite, torchrun runs), run nothing")
    g.add_argument("--backend", choices=("gloo", "nccl"), help="default nccl when CUDA is available, else gloo")


def check_not_given(args) -> None:
    for name in SUITE_ONLY:
        if getattr(args, name) not in (None, False):
            raise SpecError(f"--{name.replace('_', '-')}", "only applies with --suite")


def _runs_folder(args) -> tuple[Path, bool]:
    """The runs folder and whether it is temporary."""
    if args.runs is not None:
        return Path(args.runs), False
    if args.out is not None:
        out = Path(args.out)
        return out.with_name(out.stem + "-runs"), False
    if args.plans_only or args.no_run:
        raise SpecError("--runs", "--plans-only and --no-run need the folder: give --runs DIR")
    return Path(tempfile.mkdtemp(prefix="trainplan-suite-")), True


def _check(args, cases) -> str | None:
    """Every flag before any work; the process-count warning to print, if any."""
    from executor.launch import check_local_processes
    from executor.suite_run import processes_for
    from simulator.jsonio import check_suffix, check_writable

    if args.plot is not None:
        raise SpecError("--plot", "with --suite the scatter is written beside the report: give --out report.md")
    if args.plans_only and (args.no_run or args.calibrate):
        raise SpecError("--plans-only", "writes the plans and stops: not with --no-run or --calibrate")
    if args.no_run and args.calibrate:
        raise SpecError("--calibrate", "--no-run runs nothing: give --cluster FILE instead")
    if args.retries is not None and args.retries < 0:
        raise SpecError("--retries", f"must be 0 or more (extra runs of a noisy case), got {args.retries}")
    if args.retries is not None and (args.no_run or args.plans_only):
        raise SpecError("--retries", "re-runs noisy cases: not with --no-run or --plans-only, which run nothing")
    if args.nproc is not None and args.nproc < 1:
        raise SpecError("--nproc", f"must be a positive integer, got {args.nproc}")
    if args.out is not None:
        check_suffix(args.out, (".md",), "--out")
        check_writable(args.out, "--out")
    if args.runs is not None and Path(args.runs).exists() and not Path(args.runs).is_dir():
        raise SpecError("--runs", f"{args.runs!r} is a file; give a folder")
    if args.no_run and not Path(args.runs or "").is_dir():
        raise SpecError("--runs", f"folder {args.runs!r} does not exist; run the suite (or torchrun) into it first")
    if args.cluster is not None:
        from simulator.cluster.io import load_cluster

        try:
            load_cluster(args.cluster)
        except SpecError as err:
            raise SpecError("--cluster", f"{args.cluster}: {err}") from None
    if args.no_run or args.plans_only:
        return None
    return check_local_processes(max(processes_for(c, args.nproc) for c in cases), "--nproc")


def run(args) -> int:
    from simulator.suite_runs import load_manifest, suite_cluster, suite_rows
    from simulator.validation_suite import STEPS_WARMUP, SuiteName, suite_cases

    cases = suite_cases(args.suite)
    warning = _check(args, cases)
    runs, temporary = _runs_folder(args)
    try:
        if args.plans_only:
            return _write_plans(cases, runs, args)
        if args.no_run:
            manifest = load_manifest(runs)
            cluster = suite_cluster(runs, manifest, args.cluster)
        else:
            manifest = _run(args, cases, runs, STEPS_WARMUP[SuiteName(args.suite)], warning)
            cluster = suite_cluster(runs, manifest, None)
        rows = suite_rows(cases, runs, cluster, manifest)
        return _report(args, rows, cluster, manifest, runs, temporary)
    finally:
        if temporary:
            shutil.rmtree(runs, ignore_errors=True)


def _run(args, cases, runs: Path, steps_warmup: tuple[int, int], warning: str | None):
    from executor.options import DEFAULT_TIMEOUT_S, resolve_backend
    from executor.calibrate_run import DEFAULT_PROCESSES
    from executor.speed_probe import REFERENCE_READINGS_BEFORE, reference_readings
    from executor.suite_calibration import calibrated_cluster
    from executor.suite_run import CALIBRATION_PROCESSES, run_suite

    backend = resolve_backend(args.backend).value
    base = args.cluster or ("localhost-cpu" if backend == "gloo" else None)
    if warning:
        print(warning, file=sys.stderr)
    notes, before = [], ()
    if args.calibrate:
        if base is None:
            raise SpecError("--cluster", "--calibrate on GPUs needs the base cluster to fit: give --cluster")
        nproc = min(args.nproc or CALIBRATION_PROCESSES, CALIBRATION_PROCESSES)
        counts = ", ".join(str(n) for n in DEFAULT_PROCESSES if n <= nproc)
        before = reference_readings(REFERENCE_READINGS_BEFORE)  # the speed reference spans the calibration
        print(f"validate: calibrating the network on {counts} {backend} processes", file=sys.stderr)
        base, notes = calibrated_cluster(base, runs, calibrate_network=True, nproc=nproc, backend=backend)
    from simulator.validation_suite import MEASURE_S, SuiteName

    steps, warmup = steps_warmup
    measure_s = MEASURE_S[SuiteName(args.suite)]
    budget = f", more while the measured ones take under {measure_s:g} s" if measure_s else ""
    print(f"validate: running the {args.suite} suite, {len(cases)} cases, {steps} steps ({warmup} warm-up) "
          f"each{budget}, into {runs}", file=sys.stderr)
    return run_suite(cases, runs, suite=args.suite, cluster=base, cluster_notes=notes, nproc=args.nproc,
                     steps=steps, warmup=warmup, timeout_s=DEFAULT_TIMEOUT_S, backend=backend,
                     progress=lambda line: print(line, file=sys.stderr), measure_s=measure_s,
                     readings_before=before, retries=DEFAULT_RETRIES if args.retries is None else args.retries)


def _write_plans(cases, runs: Path, args) -> int:
    from executor.options import DEFAULT_TIMEOUT_S
    from executor.suite_run import executor_args, write_plans
    from simulator.validation_suite import MEASURE_S, STEPS_WARMUP, SuiteName

    write_plans(cases, runs)
    steps, warmup = STEPS_WARMUP[SuiteName(args.suite)]
    measure_s = MEASURE_S[SuiteName(args.suite)]
    print(f"wrote {len(cases)} plans into {runs}; run each (rank 0 writes its results file), then "
          f"`trainplan validate --suite {args.suite} --runs {runs} --no-run --cluster YOUR_CLUSTER`:")
    for case in cases:
        argv = executor_args(case, runs, steps=steps, warmup=warmup, timeout_s=DEFAULT_TIMEOUT_S, measure_s=measure_s)
        print(f"  {case.name} ({case.processes} processes): torchrun --nproc-per-node {case.processes} "
              f"-m executor.run {' '.join(argv)}")
    return 0


def _report(args, rows, cluster, manifest, runs: Path, temporary: bool) -> int:
    from simulator.suite_markdown import markdown
    from simulator.suite_report import SuiteReport, format_table
    from simulator.suite_scatter import scatter_figure

    report = SuiteReport(suite=args.suite, cluster=_cluster_name(cluster, rows), rows=tuple(rows), manifest=manifest)
    written = []
    if args.out is not None:
        out = Path(args.out)
        png = out.with_suffix(".png")
        scatter_figure(report).savefig(png, dpi=120)
        out.write_text(markdown(report, png.name))
        written = [str(out), str(png)]
    if args.json:
        cli_common.print_json(report.to_dict() | {"runs": None if temporary else str(runs), "files": written})
    else:
        print(format_table(report))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    if temporary:
        print("the plans and results files were in a temporary folder: give --runs DIR to keep them", file=sys.stderr)
    return 0


def _cluster_name(cluster: str | None, rows) -> str:
    named = next((r.validation.cluster_name for r in rows if r.ok), None)
    return named or cluster or "the plans' own clusters"
