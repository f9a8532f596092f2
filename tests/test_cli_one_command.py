"""``trainplan COMMAND ...`` builds the parser of that command alone (``build_parser(command)``): the same
arguments, defaults and help as the whole CLI's parser gives that command, and only its module imported."""

import subprocess
import sys

import pytest

from trainplan.__main__ import COMMAND_MODULES, build_parser

COMMANDS = [name.removeprefix("trainplan.cmd_") for name in COMMAND_MODULES]


def _subparser(parser, command):
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[command]


def _described(parser):
    return [(tuple(a.option_strings), a.dest, a.default, a.help, a.nargs, a.required) for a in parser._actions]


@pytest.mark.parametrize("command", COMMANDS)
def test_one_command_parser_is_the_whole_cli_s(command):
    alone, whole = _subparser(build_parser(command), command), _subparser(build_parser(), command)
    assert _described(alone) == _described(whole)
    assert alone.format_help() == whole.format_help()
    assert list(next(a for a in build_parser(command)._actions if a.dest == "command").choices) == [command]


def test_an_unknown_command_gets_the_whole_cli():
    assert list(_subparser(build_parser("plann"), "plan").prog.split()) == ["trainplan", "plan"]
    assert len(next(a for a in build_parser("plann")._actions if a.dest == "command").choices) == len(COMMANDS)


def test_plan_imports_no_other_command():
    code = ("import sys\nfrom trainplan.__main__ import main\ntry:\n    main(['plan', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint(sorted(m for m in sys.modules if m.startswith('trainplan.cmd_')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['trainplan.cmd_plan']"


@pytest.mark.parametrize("argv", [["plan", "--help"], ["plan", "--model", "nosuch", "--gpus", "64", "--gbs", "512"],
                                  ["plan", "--model", "gpt3-125m", "--gpus", "8", "--gbs", "8", "--top", "0"]])
def test_plan_help_and_bad_flags_skip_the_search_imports(argv):
    """``plan --help`` and a bad flag exit before pandas and the planner are imported (~0.5 s of a 2-core VM's CPU,
    docs/planner.md cold22); fails if the parser's modules or the flags' checks import them again."""
    code = (f"import sys\nfrom trainplan.__main__ import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n"
            "    pass\nprint(sorted(m for m in ('pandas', 'planner') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
