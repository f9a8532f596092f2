"""Fuzzing the command line (issue 15, part 4): whatever flags a user types, trainplan exits 0, 1 or 2;
a failure is one line on stderr with no traceback; what it prints as JSON holds no NaN, infinity,
negative time or memory, or utilisation above 1; and the same command gives the same output.

Each case starts from a valid command (so that the fuzz reaches the engines, not only argparse) and
changes 1–4 of its flags to values drawn from the command's own parser: its choices, plausible
numbers and sizes, and values at and past every limit (0, negative, 1e400, NaN, text). A case that
runs longer than :data:`CASE_LIMIT_S` fails as a hang.

Quick by default (``FUZZ_CLI_EXAMPLES`` cases per command). A long run: ``pytest
tests/test_fuzz_cli.py --hypothesis-profile long`` (10,000 cases in all, 2,000 per command group; see
``fuzz_budget.py``), or ``TRAINPLAN_FUZZ_EXAMPLES=N`` per command; ``TRAINPLAN_FUZZ_LOG=path`` records
every case (command, exit code, wall and CPU time).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_budget import LONG, Hang, fuzz_settings, limited, log_case, timed
from trainplan.__main__ import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
CASE_LIMIT_S = 60
"""CPU time after which one command counts as hung (the slowest valid case here takes about 2 s). CPU
time, not wall time, so that a loaded machine (or a ``nice``d long run) does not turn slow into hung;
a wall-time backstop of :data:`WALL_LIMIT_FACTOR` times as long catches a hang that sleeps."""
WALL_LIMIT_FACTOR = 20

BASES = {
    "simulate": ["simulate", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--dp", "2", "--tp", "2",
                 "--pp", "2", "--gbs", "16"],
    "memory": ["memory", "--model", "llama2-7b", "--cluster", "dgx-a100", "--gpus", "8", "--zero", "1", "--mbs", "1"],
    "collective": ["collective", "--cluster", "dgx-h100", "--nodes", "2", "--bytes", "1KB..1MB"],
    "model show": ["model", "show", "gpt3-1.3b"],
    "cluster show": ["cluster", "show", "dgx-a100"],
}
"""A valid command per group: the fuzz edits its flags."""
SKIP = {"--help", "--version", "--plot", "--trace", "--save-plan", "--plan", "--out", "--csv", "--measure",
        "--json", "--nproc", "--backend", "--repeats", "--warmup"}
"""Flags the fuzz leaves alone: writers (tested by the output-path tests), and measuring (launches processes)."""
PLAUSIBLE = ["1", "2", "4", "8", "16", "64", "0.5", "25", "1e4"]
"""Values that often make a valid command, so the fuzz reaches the engines (by flag: :data:`BY_FLAG`)."""
SIZES = ["1KB..1MB", "64MB", "1MiB", "4KiB..64KiB", "1GB", "1KiB..1GiB"]
BY_FLAG = {"--cluster": ["dgx-a100", "dgx-h100", "h100-roce", "pcie-l40s", "dgx-v100", "localhost-cpu",
                         str(ROOT / "examples" / "my-cluster.yaml")],
           "--model": ["gpt3-125m", "gpt3-1.3b", "llama2-7b", str(ROOT / "tests" / "data" / "gpt2.config.json")],
           "--op": ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast"],
           "--algorithm": ["ring", "tree", "ring,tree", "all", "auto", "hierarchical", "pairwise"],
           "--bytes": SIZES, "--bucket-mb": ["1", "25", "500"], "--straggler": ["rank=1,factor=2", "prob=0.5,factor=2"],
           "--layer-split": ["6,6", "4,8"], "--params": ["7.5e9", "1.3B", "70B"],
           "--nodes": ["1", "2", "4", "16"] + (["64", "1024", "100000"] if LONG else [])}
"""Per-flag plausible values. Node counts stay at 16 or fewer in the quick run to keep CI short (a
64-node all-to-all table takes seconds, 4,096-rank tables several); the long run includes larger
counts, where a case over the hang limit fails."""
INTS = ["1", "2", "4", "8", "16", "64"]
EXTREME = ["0", "-1", "3", "1024", "100000", "1e9", "1e400", "nan", "inf", "-inf", "", "abc", "1e-6", "1KB...1GB",
           "8..4", "1GB", "prob=0.5,factor=nan", "rank=99,factor=1.5", "dgx-h10", "2,10", "nonsense"]
"""Values at and past every limit, and of wrong types."""
FUZZ = fuzz_settings(quick=25, tests=len(BASES))


def _subparser(path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in path.split():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


def _options(path: str) -> list[argparse.Action]:
    return [a for a in _subparser(path)._actions
            if a.option_strings and a.option_strings[0] not in SKIP and a.option_strings[-1] not in SKIP]


@st.composite
def edited(draw, path: str) -> list[str]:
    """The base command of ``path`` with 1–4 flags set (or added) to drawn values."""
    argv = list(BASES[path])
    for action in draw(st.lists(st.sampled_from(_options(path)), min_size=1, max_size=4, unique_by=id)):
        flag = draw(st.sampled_from(action.option_strings))
        if flag in argv:  # replace the base's value rather than repeat the flag (repeats have their own test)
            i = argv.index(flag)
            del argv[i:i + 1 + (action.nargs != 0)]
        if action.nargs == 0:
            argv.append(flag)
            continue
        valid = ([str(c) for c in action.choices] if action.choices else BY_FLAG.get(action.option_strings[-1])
                 or (INTS if action.type is int else PLAUSIBLE))
        extreme = [v for v in EXTREME if flag != "--nodes" or LONG or not v.isdigit() or int(v) <= 16]
        argv += [flag, draw(st.one_of(st.sampled_from(valid), st.sampled_from(valid), st.sampled_from(extreme)))]
    return argv


def run(argv: list[str], clock: dict | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``trainplan argv`` in this process, failing on a hang; ``clock``
    receives the case's ``wall_s`` and ``cpu_s``."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with timed() as times, limited(CASE_LIMIT_S, CASE_LIMIT_S * WALL_LIMIT_FACTOR), \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as stop:  # argparse's own errors
                code = stop.code
    except Hang:
        log_case("cli", command=_group(argv), argv=argv, outcome="hang", exit=None, **times)
        pytest.fail(f"hung for {CASE_LIMIT_S} s: trainplan {' '.join(argv)}")
    if clock is not None:
        clock.update(times)
    return code, out.getvalue(), err.getvalue()


def _group(argv: list[str]) -> str:
    """The command group of ``argv`` (``model show``, ``simulate``...)."""
    return next(path for path in BASES if argv[:len(path.split())] == path.split())


def findings(argv: list[str], code, out: str, err: str) -> list[str]:
    """What is wrong with one run's result (empty when nothing is)."""
    if code not in (0, 1, 2):
        return [f"exit {code}"]
    if "Traceback" in err:
        return ["traceback"]
    if code != 0:
        return [] if len(err.strip().splitlines()) == 1 else ["not one line on stderr"]
    return bad_numbers(json.loads(out)) if "--json" in argv else []


def bad_numbers(obj, where: str = "") -> list[str]:
    """Places in a JSON output that hold NaN or infinity, a negative time, size or count, or an
    efficiency above 1 (MFU, HFU, goodput, any "efficiency" or "fraction")."""
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            found += bad_numbers(value, f"{where}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found += bad_numbers(value, f"{where}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        leaf = where.rsplit(".", 1)[-1].split("[")[0].lower()
        if not math.isfinite(obj):
            found.append(f"{where} = {obj}")
        elif obj < 0 and (any(w in leaf for w in ("_s", "time", "bytes", "gb", "tokens", "flop", "mfu", "hfu"))
                          or ".breakdown." in where):  # breakdown categories are seconds ("bubble": -2e-16 once)
            found.append(f"{where} = {obj} < 0")
        elif obj > 1 + 1e-9 and any(w in leaf for w in ("mfu", "hfu", "goodput", "efficiency", "fraction")):
            found.append(f"{where} = {obj} > 1")
    return found


def _unstable(text: str) -> str:
    """The output without the fields that measure this process (wall time of the engine)."""
    return "\n".join(line for line in text.splitlines() if "wall_s" not in line)


def check(argv: list[str]) -> None:
    clock: dict = {}
    code, out, err = run(argv, clock)
    shown = "trainplan " + " ".join(argv)
    found = findings(argv, code, out, err)
    if not found and code == 0:
        again = run(argv)
        found = [] if (again[0], _unstable(again[1])) == (code, _unstable(out)) else ["not deterministic"]
    log_case("cli", command=_group(argv), argv=argv, outcome="; ".join(found) or "ok", exit=code, **clock)
    assert not found, f"{found}: {shown}\n{err}"


@pytest.mark.parametrize("path", sorted(BASES))
def test_every_base_command_runs(path):
    """The fuzz starts from commands that work (else it would test only the error path)."""
    code, out, err = run(BASES[path] + ["--json"])
    assert code == 0, err
    assert not bad_numbers(json.loads(out))


@pytest.mark.parametrize("path", sorted(BASES))
def test_fuzzed_commands_exit_cleanly(path):
    @FUZZ
    @given(argv=edited(path), json_out=st.booleans())
    def fuzz(argv, json_out):
        check(argv + (["--json"] if json_out else []))

    fuzz()


def test_the_checks_can_fail():
    """The oracle itself: NaN, a negative time and an MFU over 1 are each found."""
    assert bad_numbers({"step_time_s": -1.0}) and bad_numbers({"a": [{"mfu": 1.5}]})
    assert bad_numbers({"x": float("nan")}) and not bad_numbers({"step_time_s": 2.0, "mfu": 0.4, "delta": -3})
    assert bad_numbers({"breakdown": {"bubble": -2e-16}})
