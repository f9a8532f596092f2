"""Load a script of ``benchmarks/`` as a module for a test (the folder is no package)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str):
    """``benchmarks/NAME.py`` executed as module ``NAME`` and registered in ``sys.modules`` (so that its own
    ``from NAME import ...`` siblings and dataclasses resolve)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
