"""Test helper: command lines built from a base and changes, since an option may be given once."""

from __future__ import annotations


def _pairs(argv: list[str]) -> list[list[str]]:
    """[[token, value?], ...]: an option with the value that follows it (a positional stays alone)."""
    out: list[list[str]] = []
    for token in argv:
        if out and out[-1][0].startswith("--") and len(out[-1]) == 1 and not token.startswith("--"):
            out[-1].append(token)
        else:
            out.append([token])
    return out


def _name(option: str) -> str:
    return option.removeprefix("--no-") if option.startswith("--no-") else option.removeprefix("--")


def merged(base: list[str], extra: list[str]) -> list[str]:
    """``base`` with every option of ``extra`` replacing the same option (or its ``--no-`` twin) in it."""
    changes = _pairs(extra)
    replaced = {_name(c[0]) for c in changes if c[0].startswith("--")}
    kept = [p for p in _pairs(base) if not (p[0].startswith("--") and _name(p[0]) in replaced)]
    return [t for p in kept + changes for t in p]
