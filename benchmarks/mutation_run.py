"""A small mutation tester: how many one-token changes to the simulator do the chosen tests miss?

Not part of CI (slow: one pytest run per mutant). Usage, from the repository root::

    python benchmarks/mutation_run.py [--tests-from DIR] [--minutes 30] [--out FILE] MODULE.py ...

Operators (mutmut's usual ones, chosen to fit this numeric code): ``+`` ↔ ``-``, ``*`` ↔ ``/``,
``**`` → ``*``, ``//`` → ``/``; ``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``, ``is`` ↔ ``is not``,
``in`` ↔ ``not in``; ``and`` ↔ ``or``; ``max`` ↔ ``min``; a number ``n`` → ``n + 1``; ``True`` ↔
``False``. Docstrings, f-strings and annotations are not mutated. Each mutant is written over the
module (as ``ast.unparse`` of the mutated tree), the tests run with ``-x`` in a forked child (numpy,
pandas, simpy and pytest are imported once, in the parent; the simulator is imported fresh in each
child), and the original file is restored. A mutant is *killed* when a test fails, *survived* when
all pass, *timeout* when the run takes longer than ``--timeout`` seconds.

``--tests-from DIR``: run the test files from another directory (an older checkout's ``tests/``),
to measure the figure before a change to the tests.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TESTS = ("tests/test_compile_host.py", "tests/test_compile.py", "tests/test_analytical.py",
         "tests/test_engines_agree.py", "tests/test_engine_step.py", "tests/test_analytical_vec.py")
"""The fast tests that exercise the default modules (each mutant runs them with ``-x``)."""

_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.Pow: ast.Mult,
          ast.FloorDiv: ast.Div}
_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
        ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
_BOOL = {ast.And: ast.Or, ast.Or: ast.And}
_NAME = {"max": "min", "min": "max"}


def _skipped(tree: ast.AST) -> set[int]:
    """ids of nodes never mutated: docstrings, f-strings, annotations."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            skip |= {id(n) for n in ast.walk(body[0])}
        if isinstance(node, ast.JoinedStr):
            skip |= {id(n) for n in ast.walk(node)}
        for ann in (getattr(node, "annotation", None), getattr(node, "returns", None)):
            if ann is not None:
                skip |= {id(n) for n in ast.walk(ann)}
    return skip


def _mutate(node: ast.AST) -> str | None:
    """Mutate ``node`` in place if an operator applies; return a description, else None."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
        old = type(node.op).__name__
        node.op = _BINOP[type(node.op)]()
        return f"{old} -> {type(node.op).__name__}"
    if isinstance(node, ast.AugAssign) and type(node.op) in _BINOP:
        old = type(node.op).__name__
        node.op = _BINOP[type(node.op)]()
        return f"{old}= -> {type(node.op).__name__}="
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _CMP:
        old = type(node.ops[0]).__name__
        node.ops[0] = _CMP[type(node.ops[0])]()
        return f"{old} -> {type(node.ops[0]).__name__}"
    if isinstance(node, ast.BoolOp):
        old = type(node.op).__name__
        node.op = _BOOL[type(node.op)]()
        return f"{old} -> {type(node.op).__name__}"
    if isinstance(node, ast.Name) and node.id in _NAME and isinstance(node.ctx, ast.Load):
        old, node.id = node.id, _NAME[node.id]
        return f"{old} -> {node.id}"
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        node.value = not node.value
        return f"{not node.value} -> {node.value}"
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        old, node.value = node.value, node.value + 1
        return f"{old!r} -> {node.value!r}"
    return None


def mutants(source: str) -> list[tuple[int, int, str]]:
    """(index, line, description) of every mutant of ``source``, in a fixed walk order."""
    tree = ast.parse(source)
    skip = _skipped(tree)
    out = []
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in skip:
            continue
        desc = _mutate(node)
        if desc is not None:
            out.append((i, getattr(node, "lineno", 0), desc))
    return out


def mutated_source(source: str, index: int) -> str:
    tree = ast.parse(source)
    node = next(n for i, n in enumerate(ast.walk(tree)) if i == index)
    _mutate(node)
    return ast.unparse(tree) + "\n"


def _run_tests(tests: list[str], timeout_s: float) -> str:
    """Run ``tests`` in a forked child; 'killed', 'survived' or 'timeout'."""
    pid = os.fork()
    if pid == 0:  # child: fresh simulator import, quiet pytest
        signal.alarm(int(timeout_s))
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        import pytest
        code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-m", "not multiproc", "--hypothesis-seed=0", *tests])
        os._exit(int(code))
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "timeout" if os.WTERMSIG(status) == signal.SIGALRM else "killed"
    return "survived" if os.WEXITSTATUS(status) == 0 else "killed"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="+", help="files under simulator/ to mutate")
    ap.add_argument("--tests-from", default=None, help="directory holding the test files (default tests/)")
    ap.add_argument("--minutes", type=float, default=30.0, help="stop starting mutants after this many minutes")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's test run")
    ap.add_argument("--out", default=None, help="write the per-mutant results as JSON here")
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    for name in ("numpy", "pandas", "simpy", "pytest", "hypothesis"):  # imported once, shared by the children
        importlib.import_module(name)
    base = Path(args.tests_from) if args.tests_from else ROOT / "tests"
    tests = [str(base / Path(t).name) for t in TESTS if (base / Path(t).name).exists()]
    if _run_tests(tests, args.timeout * 3) != "survived":
        print("the tests fail on the unmutated code; fix that first", file=sys.stderr)
        return 2
    deadline, results = time.monotonic() + 60 * args.minutes, []
    for module in args.modules:
        path = Path(module)
        original = path.read_text()
        for index, line, desc in mutants(original):
            if time.monotonic() > deadline:
                break
            try:
                path.write_text(mutated_source(original, index))
                outcome = _run_tests(tests, args.timeout)
            finally:
                path.write_text(original)
            results.append({"module": module, "line": line, "mutation": desc, "outcome": outcome})
            print(f"{module}:{line} {desc}: {outcome}", flush=True)
    summary: dict = {}
    for r in results:
        row = summary.setdefault(r["module"], {"killed": 0, "survived": 0, "timeout": 0})
        row[r["outcome"]] += 1
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "mutants": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
