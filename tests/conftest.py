"""Shared test fixtures and the GPU skip rule."""

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none present")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Hypothesis profiles: the default run stays quick for CI; `pytest --hypothesis-profile long` runs each
# fuzz suite (tests/test_fuzz_*.py) at 10,000 cases in all, shared between its tests (fuzz_budget.py
# reads the profile's name; the max_examples here is for any other test run under the profile).
from hypothesis import settings  # noqa: E402

settings.register_profile("long", max_examples=10_000, deadline=None)
# No per-example deadline by default either: a time limit is a timed test, and on a shared 2-core
# machine a first example that loads a cluster file can take over a second (seen in a merge run).
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")
