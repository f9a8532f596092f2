"""The examples in the docs run and print what the docs say, so the docs cannot rot (the habit of
SimPy's ``docs/conftest.py``: examples are tests against their saved output).

Each document in :data:`DOCS` is run top to bottom in a fresh temporary folder; its fenced blocks
are read by their info string:

- ``bash``: every line but ``#`` comments is a ``trainplan ...`` command (a trailing backslash
  continues it), run in-process through :func:`trainplan.__main__.main`; it must exit 0. Any
  other line fails the test, so no example is skipped silently.
- ``console``: ``$ trainplan ...`` lines, each followed by the exact output it must print
  (stdout, then stderr); an output starting with ``trainplan ...: error:`` must come with exit
  code 2, any other with 0.
- ``python``: executed, one namespace per document.
- a block right after ``<!-- output -->``: the exact stdout of the ``python`` block before it.
- a block right after ``<!-- file: NAME -->``: the JSON that file holds at that point (numbers to
  1e-9 relative).
- a block right after ``<!-- sketch -->`` is not run (code that shows a shape, not an example).

Blocks with any other info string (plain synopses, ``text``, ``yaml``) are not run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("docs/plan_file.md",)
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"<!--\s*(output|sketch|file:\s*(\S+))\s*-->\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    lang: str
    body: str
    mark: str | None
    """``output``, ``sketch``, ``file:NAME`` or None: the HTML comment on the line before the fence."""
    line: int


def blocks(text: str) -> list[Block]:
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        kind = None if mark is None else (f"file:{mark.group(2)}" if mark.group(2) else mark.group(1))
        out.append(Block(m.group(1).strip(), m.group(2), kind, text.count("\n", 0, m.start()) + 1))
    return out


def commands(body: str) -> list[str]:
    """The lines of a shell block, continuation lines joined."""
    lines = (c.strip() for c in body.replace("\\\n", " ").splitlines())
    return [c for c in lines if c and not c.startswith("#")]


def run_trainplan(line: str) -> tuple[int, str]:
    """Run one ``trainplan ...`` command line in-process: (exit code, stdout + stderr)."""
    from trainplan.__main__ import main

    argv = shlex.split(line)
    assert argv[0] == "trainplan", f"only trainplan commands run in the docs' examples, not {line!r}"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv[1:])
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code
    return code, out.getvalue() + err.getvalue()


def check_console(body: str, where: str) -> None:
    lines = body.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("$ ")]
    assert starts and starts[0] == 0, f"{where}: a console block starts with a '$ trainplan ...' line"
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(lines)
        code, printed = run_trainplan(lines[start][2:])
        expected = "\n".join(lines[start + 1:end])
        assert printed.rstrip("\n") == expected.rstrip("\n"), f"{where}: {lines[start]}"
        error = re.match(r"trainplan( \S+)?: error:", expected) is not None
        assert code == (2 if error else 0), f"{where}: {lines[start]} exited {code}"


def same_json(got, want, path="") -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{path}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            same_json(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            same_json(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15), \
            f"{path}: {got!r} != {want!r}"
    else:
        assert got == want and type(got) is type(want), f"{path}: {got!r} != {want!r}"


def run_document(name: str) -> int:
    """Run the examples of one document in the current folder; the number of blocks checked."""
    namespace: dict = {"__name__": "__docs__"}
    last_stdout, checked = None, 0
    for b in blocks((ROOT / name).read_text(encoding="utf-8")):
        where = f"{name}:{b.line}"
        if b.mark == "sketch":
            continue
        if b.mark == "output":
            assert last_stdout is not None, f"{where}: an output block follows a python block"
            assert last_stdout.rstrip("\n") == b.body.rstrip("\n"), f"{where}: the python block printed\n{last_stdout}"
        elif b.mark and b.mark.startswith("file:"):
            path = Path(b.mark.removeprefix("file:"))
            assert path.is_file(), f"{where}: no file {path} was written by the blocks above"
            same_json(json.loads(path.read_text()), json.loads(b.body), str(path))
        elif b.lang == "bash":
            for line in commands(b.body):
                code, printed = run_trainplan(line)
                assert code == 0, f"{where}: {line} exited {code}:\n{printed}"
        elif b.lang == "console":
            check_console(b.body, where)
        elif b.lang == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(b.body, where, "exec"), namespace)  # noqa: S102 - the docs' own examples
            last_stdout = out.getvalue()
        else:
            continue
        checked += 1
    return checked


@pytest.mark.parametrize("name", DOCS)
def test_document_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_document(name) > 0, f"{name} has no example the test runs"


def test_the_runner_fails_on_a_wrong_example(tmp_path, monkeypatch):
    """The checks above can fail: a wrong expected line, a command other than trainplan, a JSON
    value that differs (exactly, or beyond 1e-9 relative)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match="trainplan model list"):
        check_console("$ trainplan model list\nnot what it prints\n", "probe")
    with pytest.raises(AssertionError, match="only trainplan commands"):
        run_trainplan("rm -rf /")
    with pytest.raises(AssertionError, match=r"\.gpus: 9 != 8"):
        same_json({"gpus": 9}, {"gpus": 8})
    with pytest.raises(AssertionError, match="step"):
        same_json({"step": 1.0 + 1e-6}, {"step": 1.0})
