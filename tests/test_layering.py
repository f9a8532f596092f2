"""The import direction is part of the design: planner -> simulator <- executor, CLI on top.

Scans every module's import statements (static, so lazy imports inside functions count too).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "simulator": {"torch", "planner", "executor", "trainplan"},
    "planner": {"torch", "executor", "trainplan"},
    "executor": {"planner", "trainplan"},
}


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_import_direction(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imported_roots(path) & FORBIDDEN[package]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, "; ".join(offenders)


def test_scanner_sees_lazy_imports(tmp_path):
    probe = tmp_path / "m.py"
    probe.write_text("def f():\n    import torch.distributed as dist\n    from planner import x\n")
    assert {"torch", "planner"} <= _imported_roots(probe)
