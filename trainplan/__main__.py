"""Entry point: ``trainplan ...`` and ``python -m trainplan ...``.

Each command group module exposes ``register(subparsers)``, which adds its parser and sets
``handler`` (a function taking the parsed namespace and returning an exit code). Bad user input
raises :class:`simulator.errors.SpecError` (or :class:`trainplan.cli_common.UsageError`); it
becomes one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings

from simulator.errors import SpecError, SpecNote
from trainplan import cli_common

COMMAND_MODULES: tuple[str, ...] = (
    "trainplan.cmd_plan",
    "trainplan.cmd_cluster",
    "trainplan.cmd_model",
    "trainplan.cmd_memory",
    "trainplan.cmd_collective",
    "trainplan.cmd_calibrate",
    "trainplan.cmd_simulate",
    "trainplan.cmd_execute",
    "trainplan.cmd_launch",
    "trainplan.cmd_validate",
)
"""Command-group modules, in the order ``--help`` lists them. Add a module here to add a command."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trainplan")
    except PackageNotFoundError:  # running from a checkout that was not installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: argparse's version action, with the installed version read only when asked (the
    package metadata costs an import on every command otherwise)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show program's version number and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(f"trainplan {_version()}\n", sys.stdout)
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI's parser; with ``command`` (a command's name) the parser with that command alone, which
    parses that command's arguments as the whole one does and imports only its module (``trainplan plan``
    does not pay for the executor's or the validation's imports)."""
    import importlib

    modules = [f"trainplan.cmd_{command}"] if f"trainplan.cmd_{command}" in COMMAND_MODULES else COMMAND_MODULES
    parser = cli_common.ArgumentParser(prog="trainplan", description=(
        "Simulate and plan distributed deep-learning training; run plans for real and check the model."))
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


_NEGATIVE_VALUE = re.compile(r"^-[0-9.]")


def attach_negative_values(argv: list[str]) -> list[str]:
    """``--params -7B`` → ``--params=-7B``: argparse reads a value that starts with ``-`` and is not a
    plain number as the next option and says "expected one argument"; attached, the value reaches the
    flag's own check, which says it must be positive (issue 15 §3)."""
    out: list[str] = []
    for token in argv:
        if out and _NEGATIVE_VALUE.match(token) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def _show_notes(show):
    """``warnings.showwarning`` that prints a :class:`SpecNote` as one ``trainplan: note:`` line on stderr and
    passes every other warning to ``show``."""
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, SpecNote):
            print(f"trainplan: note: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return showwarning


def main(argv: list[str] | None = None) -> int:
    argv = attach_negative_values(sys.argv[1:] if argv is None else list(argv))
    with warnings.catch_warnings():
        warnings.showwarning = _show_notes(warnings.showwarning)
        return _run(argv)


def _run(argv: list[str]) -> int:
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (SpecError, cli_common.UsageError) as err:
        print(f"trainplan {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader (e.g. `| head`) closed the pipe: stop quietly, as Unix tools do.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("trainplan: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
