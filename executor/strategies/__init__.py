"""Strategy families the plan runner knows (:mod:`executor.strategies.base` is the contract).

Each module in :data:`FAMILY_MODULES` registers one or more families when imported;
:func:`load_families` imports them all (the runner and ``trainplan execute`` call it).
"""

from __future__ import annotations

import importlib

FAMILY_MODULES: tuple[str, ...] = (
    "executor.strategies.data_parallel",
    "executor.strategies.parallel",
    "executor.strategies.param_server",
)
"""Modules that register a family. Add a module here to add a family."""


def load_families() -> None:
    """Import every family module (each registers itself; importing twice is harmless)."""
    for name in FAMILY_MODULES:
        importlib.import_module(name)
