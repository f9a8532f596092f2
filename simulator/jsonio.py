"""JSON files in and out, with one-line errors: read an object from a file (unreadable, non-UTF-8,
a directory, malformed: one :class:`SpecError` each), write atomically (a temporary file renamed
over the target, so a reader never sees half a file), and check an output path before long work.
Used by the plan file, the results file, cluster files and model config files."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from simulator.errors import SpecError


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of ``path``; missing, a directory, unreadable or not UTF-8 is one SpecError."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise SpecError(what, f"{str(p)!r} is a directory; give a {what} file") from None
    except FileNotFoundError:
        raise SpecError(what, f"no such file {str(p)!r}") from None
    except UnicodeDecodeError as err:
        raise SpecError(what, f"{str(p)!r} is not UTF-8 text (byte {err.start}); is it a binary file?") from None
    except OSError as err:
        raise SpecError(what, f"cannot read {str(p)!r} ({err.strerror or type(err).__name__})") from None


def parse_json(text: str, where: str) -> Any:
    """JSON text → Python data; malformed text is one SpecError(``where``, "invalid JSON at line N ...")."""
    return _loads(text, lambda detail: SpecError(where, f"invalid JSON {detail}"))


def _loads(text: str, error) -> Any:
    """``json.loads``, with every way it fails turned into ``error(detail)``: malformed text, nesting too
    deep for Python's parser (a RecursionError), an integer over Python's 4300-digit limit (a ValueError)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"at line {err.lineno}, column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise error("(nested too deeply)") from None
    except ValueError as err:
        raise error(f"({err})") from None


def read_json(path: str | Path, what: str) -> dict:
    """A JSON object from ``path``; an unreadable, non-UTF-8 or malformed file is one SpecError."""
    p = Path(path)
    data = _loads(read_text(p, what), lambda detail: SpecError(what, f"{str(p)!r} is not valid JSON {detail}"))
    if not isinstance(data, dict):
        raise SpecError(what, f"{str(p)!r} must hold a JSON object")
    return data


def write_json(path: str | Path, data: dict) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, renamed over it."""
    p = Path(path)
    check_writable(p)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    except OSError as err:
        raise SpecError("out", f"cannot write in {str(p.parent)!r} ({err.strerror})") from None
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode a plain open() would
        os.replace(tmp, p)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise SpecError("out", f"cannot write {str(p)!r} ({err.strerror})") from None
    return p


def check_writable(path: str | Path, field: str = "out") -> None:
    """Raise SpecError now if ``path`` cannot be written (call before long work)."""
    p = Path(path)
    if p.is_dir():
        raise SpecError(field, f"{str(p)!r} is a directory; give a file name")
    if not p.parent.is_dir():
        raise SpecError(field, f"folder {str(p.parent)!r} does not exist")
    if not os.access(p.parent, os.W_OK):
        raise SpecError(field, f"folder {str(p.parent)!r} is not writable")


def check_suffix(path: str | Path, suffixes: tuple[str, ...], field: str) -> None:
    """Raise SpecError if ``path`` does not end in one of ``suffixes`` (case-insensitive), naming them."""
    if Path(path).suffix.lower() not in suffixes:
        raise SpecError(field, f"{str(path)!r} must end in {', '.join(suffixes)}")


IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")
"""File types matplotlib's ``savefig`` writes with its default backends (``FigureCanvasBase.filetypes``)."""


def check_plot_path(path: str | Path, field: str = "plot") -> None:
    """Raise SpecError now if ``path`` is not an image file name that can be written (before long work)."""
    check_suffix(path, IMAGE_SUFFIXES, field)
    check_writable(path, field)
