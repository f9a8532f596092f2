"""Cluster presets parsed once per test session, for property tests that would otherwise parse a preset's YAML in
every hypothesis example (0.05-0.2 s of CPU each on the 2-core CI VM: over 90 % of an example of
tests/test_memory_props.py, test25 2026-11-26). A :class:`~simulator.cluster.spec.Cluster` is a frozen dataclass,
so examples can share one. Loading a preset itself stays tested where it is the subject (tests/test_cluster_io.py,
tests/test_presets.py)."""

from __future__ import annotations

from functools import lru_cache

from simulator.cluster.io import load_cluster
from simulator.cluster.presets import load_preset


@lru_cache(maxsize=None)
def cluster(name: str, nodes: int | None = None):
    """``load_cluster(name, nodes)``, parsed on the first call only."""
    return load_cluster(name, nodes)


@lru_cache(maxsize=None)
def preset(name: str, nodes: int | None = None):
    """``load_preset(name, nodes)``, parsed on the first call only."""
    return load_preset(name, nodes)
