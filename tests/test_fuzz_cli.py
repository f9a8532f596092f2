"""Fuzzing the command line (issue 15, part 4): whatever flags a user types, trainplan exits 0, 1 or 2;
a failure is one line on stderr with no traceback; what it prints as JSON holds no NaN, infinity,
negative time or memory, or utilisation above 1; and the same command gives the same output.

Each case starts from a valid command (so that the fuzz reaches the engines, not only argparse) and
changes 1–4 of its flags to values drawn from the command's own parser: its choices, plausible
numbers and sizes, and values at and past every limit (0, negative, 1e400, NaN, text). A case that
runs longer than :data:`CASE_LIMIT_S` fails as a hang.

Quick by default (``FUZZ_CLI_EXAMPLES`` cases per command). A long run: ``pytest
tests/test_fuzz_cli.py --hypothesis-profile long`` (10,000 cases per command, profile registered in
``conftest.py``), or ``TRAINPLAN_FUZZ_EXAMPLES=N``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainplan.__main__ import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
LONG = settings.get_current_profile_name() == "long"
FUZZ_CLI_EXAMPLES = int(os.environ.get("TRAINPLAN_FUZZ_EXAMPLES", "10000" if LONG else "25"))
FUZZ = settings(max_examples=FUZZ_CLI_EXAMPLES, deadline=None,
                derandomize="TRAINPLAN_FUZZ_EXAMPLES" not in os.environ and not LONG,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CASE_LIMIT_S = 60
"""Wall time after which one command counts as hung (the slowest valid case here takes about 2 s)."""

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
SIZES = ["1KB..1MB", "64MB", "1MB", "4KB..64KB", "1GB"]
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


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def run(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``trainplan argv`` in this process, failing on a hang."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as stop:  # argparse's own errors
                code = stop.code
    except _Hang:
        pytest.fail(f"hung for {CASE_LIMIT_S} s: trainplan {' '.join(argv)}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue()


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
        elif obj < 0 and any(w in leaf for w in ("_s", "time", "bytes", "gb", "tokens", "flop", "mfu", "hfu")):
            found.append(f"{where} = {obj} < 0")
        elif obj > 1 + 1e-9 and any(w in leaf for w in ("mfu", "hfu", "goodput", "efficiency", "fraction")):
            found.append(f"{where} = {obj} > 1")
    return found


def _unstable(text: str) -> str:
    """The output without the fields that measure this process (wall time of the engine)."""
    return "\n".join(line for line in text.splitlines() if "wall_s" not in line)


def check(argv: list[str]) -> None:
    code, out, err = run(argv)
    shown = "trainplan " + " ".join(argv)
    assert code in (0, 1, 2), f"exit {code}: {shown}\n{err}"
    assert "Traceback" not in err, f"traceback: {shown}\n{err}"
    if code != 0:
        assert len(err.strip().splitlines()) == 1, f"not one line: {shown}\n{err}"
        return
    if "--json" in argv:
        assert not bad_numbers(json.loads(out)), f"{bad_numbers(json.loads(out))}: {shown}"
    again = run(argv)
    assert (again[0], _unstable(again[1])) == (code, _unstable(out)), f"not deterministic: {shown}"


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
