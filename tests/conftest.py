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
