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

The flat-key table of docs/strategy.md is generated from the field declarations
(:func:`flat_key_table`); ``python tests/test_docs_examples.py`` rewrites it after a field changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import re
import shlex
import sys
import types
import typing
from enum import Enum
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("docs/plan_file.md", "docs/memory.md", "docs/strategy.md", "docs/cli.md")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"<!--\s*(output|sketch|file:\s*(\S+))\s*-->\s*$")
TABLE_BEGIN, TABLE_END = "<!-- flat-keys:begin -->", "<!-- flat-keys:end -->"


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


# --- the flat-key table of docs/strategy.md, generated from the declarations ----------------------

def _type_text(hint) -> str:
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        text = " or ".join(_type_text(a) for a in args if a is not type(None))
        return text + (" or none" if type(None) in args else "")
    if isinstance(hint, type) and issubclass(hint, Enum):
        return ", ".join(f"`{m.value}`" for m in hint)
    if typing.get_origin(hint) is tuple:
        return f"list of {_type_text(args[0])}"
    return {int: "int", float: "number", bool: "bool", str: "text"}.get(hint, getattr(hint, "__name__", str(hint)))


def _value_text(value) -> str:
    from simulator.units import MiB

    value = value.value if isinstance(value, Enum) else value
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and value and value % MiB == 0:
        return f"{value // MiB} MiB"
    return {"": "''", (): "empty"}.get(value, str(value)) if isinstance(value, (str, tuple)) else str(value)


def _default_text(k, owner) -> str:
    from simulator.strategy import Strategy

    f = next(f for f in dataclasses.fields(owner) if f.name == k.attr)
    if k.decl.nested:
        return f"`{f.default_factory().kind.value}`"
    if f.default is not dataclasses.MISSING:
        return _value_text(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _value_text(f.default_factory())
    holder = next(f for f in dataclasses.fields(Strategy) if f.name == k.field)
    return "unset (all or none)" if holder.default is None else "required"


def flat_key_table() -> str:
    """One row per flat key (:data:`simulator.strategy.flat.FLAT`), from its declaration."""
    from simulator.strategy import Strategy
    from simulator.strategy.flat import FLAT

    rows = ["| key | record | role | values | default | flag | meaning |", "|---|---|---|---|---|---|---|"]
    for k in FLAT.values():
        owner = k.record or Strategy
        values = (", ".join(f"`{r().kind.value}`" for r in k.decl.nested) if k.decl.nested
                  else _type_text(typing.get_type_hints(owner)[k.attr]))
        flag = f"`{k.decl.flag.name}`" if k.decl.flag else "–"
        rows.append(f"| `{k.key}` | {owner.__name__} | {k.decl.role.value} | {values} | "
                    f"{_default_text(k, owner)} | {flag} | {k.decl.doc} |")
    return "\n".join(rows)


def _table_in(text: str) -> tuple[int, int]:
    begin, end = text.index(TABLE_BEGIN) + len(TABLE_BEGIN), text.index(TABLE_END)
    return begin, end


def test_strategy_doc_lists_every_flat_key_as_declared():
    text = (ROOT / "docs/strategy.md").read_text(encoding="utf-8")
    begin, end = _table_in(text)
    assert text[begin:end].strip() == flat_key_table(), \
        "docs/strategy.md's flat-key table is out of date: run `python tests/test_docs_examples.py`"


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


if __name__ == "__main__":  # rewrite the generated table of docs/strategy.md
    sys.path.insert(0, str(ROOT))
    doc = ROOT / "docs/strategy.md"
    text = doc.read_text(encoding="utf-8")
    begin, end = _table_in(text)
    doc.write_text(text[:begin] + "\n" + flat_key_table() + "\n" + text[end:], encoding="utf-8")
    print(f"rewrote the flat-key table of {doc.relative_to(ROOT)}")
