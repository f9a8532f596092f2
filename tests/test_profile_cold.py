"""benchmarks/profile_cold.py's sampler (cold21): one stack read gives each function once inclusive, the top frame
exclusive, and the innermost ``@dataclass``-generated method with its class and caller."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from benchmark_modules import load_benchmark

load_benchmark("bench_analytical")  # profile_cold imports it by name
Sampler = load_benchmark("profile_cold").Sampler


@dataclass(frozen=True)
class _Probe:
    n: int

    def __post_init__(self) -> None:  # runs inside the generated __init__, a "<string>" frame
        _SAMPLER(0, sys._getframe())


_SAMPLER = Sampler()


def _recurse(k: int) -> None:
    if k:
        _recurse(k - 1)
    else:
        _Probe(1)


def test_one_sample_counts_each_function_once_and_the_generated_init():
    _recurse(3)
    assert _SAMPLER.samples == 1
    top = [key for key in _SAMPLER.exclusive]
    assert len(top) == 1 and top[0].endswith(":__post_init__")
    recurse = [key for key in _SAMPLER.inclusive if key.endswith(":_recurse")]
    assert len(recurse) == 1 and _SAMPLER.inclusive[recurse[0]] == 1  # four frames, counted once
    assert "<string>:__init__" in _SAMPLER.inclusive
    (generated, count), = _SAMPLER.generated.items()
    assert generated[:2] == ("__init__", "_Probe") and generated[2].endswith(":_recurse") and count == 1
