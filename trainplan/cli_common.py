"""Helpers shared by the command modules: the parser class, JSON output, one-line errors, a progress counter."""

from __future__ import annotations

import argparse
import json
import sys
import time


class UsageError(ValueError):
    """A command-line combination that makes no sense (reported as one line, exit code 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports errors as one line with exit code 2 (argparse's own code), no usage dump,
    and refuses an option given twice (or with its negation, ``--sp --no-sp``) instead of letting
    the last one win silently; options that collect values (``--straggler``) may repeat.
    Abbreviations are off (``--gb`` is not ``--gbs``): a prefix slipped past the repeat check, and
    its meaning would change whenever a flag that shares the prefix is added."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # noqa: D102 - argparse override
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 - argparse override
        self._refuse_repeats(sys.argv[1:] if args is None else list(args))
        return super().parse_known_args(args, namespace)

    def _refuse_repeats(self, args: list[str]) -> None:
        seen: dict[str, str] = {}
        for token in args:
            if not token.startswith("--"):
                continue
            if token == "--":
                break
            action = self._option_string_actions.get(token.split("=", 1)[0])
            if action is None or isinstance(action, (argparse._AppendAction, argparse._SubParsersAction)):
                continue
            if action.dest in seen:
                self.error(f"{token.split('=', 1)[0]}: given after {seen[action.dest]}; give it once")
            seen[action.dest] = token.split("=", 1)[0]


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


class Counter:
    """A one-line progress counter on stderr, ``phase: done/total``, redrawn at most every
    :data:`REDRAW_S` seconds and cleared by :meth:`close` (the CLI draws it on a terminal only)."""

    REDRAW_S = 0.1

    def __init__(self, stream) -> None:
        self.stream, self.last_s, self.width = stream, 0.0, 0

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last_s < self.REDRAW_S and done < total:
            return
        self.last_s = now
        text = f"{phase}: {done:,}/{total:,}"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = max(self.width, len(text))

    def close(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def cp_fp8_text(strategy) -> str:
    """`` cp=2 (ring, balanced)`` and ``, fp8 (te)`` for a header line; empty at the defaults."""
    text = ""
    if strategy.cp > 1:
        kind = strategy.cp_kind.value
        balance = (", balanced" if strategy.cp_balanced else ", unbalanced") if kind == "ring" else ""
        text += f" cp={strategy.cp} ({kind}{balance})"
    recipe = strategy.resolved_fp8_recipe
    if recipe is not None:
        text += f", fp8 ({recipe.value}{', fp8 all-gather' if strategy.fp8_all_gather else ''})"
    return text
