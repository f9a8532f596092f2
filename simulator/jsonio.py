"""JSON files in and out, with one-line errors: read an object from a file (unreadable, non-UTF-8,
a directory, malformed: one :class:`SpecError` each), write atomically (a temporary file renamed
over the target, so a reader never sees half a file), and check an output path before long work.
Used by the plan file and the results file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from simulator.errors import SpecError


def read_json(path: str | Path, what: str) -> dict:
    """A JSON object from ``path``; an unreadable, non-UTF-8 or malformed file is one SpecError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise SpecError(what, f"{str(p)!r} is a directory; give a {what} file") from None
    except FileNotFoundError:
        raise SpecError(what, f"no such file {str(p)!r}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(what, f"cannot read {str(p)!r} ({type(err).__name__})") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise SpecError(what, f"{str(p)!r} is not valid JSON ({err})") from None
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
