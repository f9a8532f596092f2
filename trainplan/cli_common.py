"""Helpers shared by the command modules: the parser class, JSON output, and one-line errors."""

from __future__ import annotations

import argparse
import json
import sys


class UsageError(ValueError):
    """A command-line combination that makes no sense (reported as one line, exit code 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports errors as one line with exit code 2 (argparse's own code), no usage dump."""

    def error(self, message: str) -> None:  # noqa: D102 - argparse override
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def print_json(obj) -> None:
    """Print ``obj`` as indented JSON on stdout (the ``--json`` output of every command)."""
    json.dump(obj, sys.stdout, indent=2, default=_default)
    sys.stdout.write("\n")


def _default(obj):
    if hasattr(obj, "value"):
        return obj.value
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
