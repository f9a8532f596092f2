"""Fuzzing the Python API (issue 15, part 4): every entry point raises the project's own
:class:`SpecError` for bad input, and what it returns is finite, positive where it is a time or a
size, and at most 1 where it is a utilisation.

Entry points: ``strategy_from_flat`` (each flat key set to a value of any type), ``apply_profile``
(any profile name, any override), ``build_layout`` and the analytical estimate (random degrees,
batches and options on a small model), and ``collectives.registry.estimate`` (random groups, sizes,
operations and algorithms). Quick by default; ``--hypothesis-profile long`` runs 10,000 cases in all
(2,500 per test; ``fuzz_budget.py``), ``TRAINPLAN_FUZZ_EXAMPLES=N`` any number per test, and
``TRAINPLAN_FUZZ_LOG=path`` records every case (entry point, outcome, wall and CPU time).
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.collectives import registry
from simulator.collectives.base import Op
from simulator.errors import SpecError
from simulator.profiles import apply_profile, profile_names
from simulator.strategy import build_layout
from simulator.strategy.flat import FLAT, strategy_from_flat
from simulator.workload import get_preset
from fuzz_budget import fuzz_settings
from fuzz_budget import spec_errors_only as shared_spec_errors_only
from test_fuzz_loaders import EXTREMES, field_values

FUZZ = fuzz_settings(quick=120, tests=4)
CASE_LIMIT_S = 20
"""CPU seconds after which one call counts as hung (the slowest seen takes under 2 s)."""
SMALL = get_preset("gpt3-125m").with_seq(512)
CLUSTERS = {f"{name}x{nodes}": load_cluster(name, nodes=nodes) for name in ("dgx-h100", "dgx-a100", "pcie-l40s",
                                                                            "h100-roce") for nodes in (1, 2)}
KEYS = sorted(FLAT)
PLAUSIBLE = {"global_batch": [8, 16, 32], "micro_batch": [1, 2], "dp": [None, 1, 2, 4], "tp": [1, 2, 4],
             "pp": [1, 2, 4], "zero": [0, 1, 2, 3], "schedule": ["1f1b", "gpipe", "interleaved"],
             "virtual_stages": [1, 2], "recompute": ["none", "selective", "full"], "sequence_parallel": [False, True],
             "bucket_bytes": [1 << 20, 25 << 20], "allreduce_algorithm": ["auto", "ring", "tree"]}
"""Values that often lay out on 8-16 GPUs, so the fuzz reaches the estimate."""


def spec_errors_only(call):
    """``call()``, or None when it raised SpecError; any other exception fails the test (shared helper)."""
    return shared_spec_errors_only("api", call, CASE_LIMIT_S)


def check_result(result) -> None:
    assert math.isfinite(result.step_time_s) and result.step_time_s > 0, result.step_time_s
    assert 0 <= result.mfu <= 1 and math.isfinite(result.tokens_per_s) and result.tokens_per_s > 0
    for category, seconds in result.breakdown.items():
        assert math.isfinite(seconds) and seconds >= 0, (category, seconds)


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS), st.one_of(EXTREMES, field_values), max_size=4))
def test_strategy_from_flat_raises_only_spec_errors(values):
    spec_errors_only(lambda: strategy_from_flat({"global_batch": 16} | values))


@FUZZ
@given(st.one_of(st.sampled_from(profile_names()), st.text(max_size=8), EXTREMES),
       st.dictionaries(st.sampled_from(["zero", "sequence_parallel", "bucket_bytes", "overlap_grad_reduce",
                                        "recompute", "tp"]), st.one_of(EXTREMES, field_values), max_size=2))
def test_apply_profile_raises_only_spec_errors(name, overrides):
    spec_errors_only(lambda: apply_profile(name, global_batch=16, **overrides))


@st.composite
def plausible_flats(draw):
    flat = {"global_batch": 16}
    for key in draw(st.lists(st.sampled_from(sorted(PLAUSIBLE)), min_size=1, max_size=6, unique=True)):
        flat[key] = draw(st.one_of(st.sampled_from(PLAUSIBLE[key]), st.sampled_from(PLAUSIBLE[key]), EXTREMES))
    return flat


@FUZZ
@given(plausible_flats(), st.sampled_from(sorted(CLUSTERS)))
def test_layouts_and_estimates_are_spec_errors_or_sane(flat, cluster_name):
    cluster = CLUSTERS[cluster_name]

    def run():
        strategy = strategy_from_flat(flat)
        build_layout(strategy, cluster, SMALL)
        return estimate(cluster, SMALL, strategy)

    result = spec_errors_only(run)
    if result is not None:
        check_result(result)


@FUZZ
@given(st.sampled_from(sorted(CLUSTERS)), st.one_of(st.integers(2, 16), EXTREMES),
       st.one_of(st.sampled_from(["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "reduce",
                                  "send-recv"]), st.text(max_size=6)),
       st.one_of(st.integers(1, 1 << 30), EXTREMES),
       st.sampled_from(["auto", "ring", "tree", "direct", "pairwise", "recursive-doubling", "halving-doubling",
                        "hierarchical", "nvls", "param-server", "bogus"]))
def test_collective_estimates_are_spec_errors_or_sane(cluster_name, ranks, op, nbytes, algorithm):
    cluster = CLUSTERS[cluster_name]

    def run():
        group = list(range(ranks)) if isinstance(ranks, int) and not isinstance(ranks, bool) and ranks < 64 else ranks
        return registry.estimate(cluster, group, Op.parse(op), nbytes, algorithm)

    result = spec_errors_only(run)
    if result is not None:
        assert math.isfinite(result.time_s) and result.time_s > 0, result
        assert math.isfinite(result.busbw_GBps) and result.busbw_GBps >= 0


def test_a_message_beyond_a_64_bit_size_is_a_spec_error():
    """Found by the long run of 2026-11-24: ``nbytes=10**400`` overflowed the float cost formulas
    (``OverflowError`` from every algorithm); the largest size a library's ``size_t`` holds still
    estimates to finite numbers."""
    cluster = CLUSTERS["dgx-h100x2"]
    for op in (Op.ALL_REDUCE, Op.ALL_GATHER, Op.ALL_TO_ALL, Op.BROADCAST):
        assert spec_errors_only(lambda: registry.estimate(cluster, list(range(16)), op, 10**400)) is None
        check = registry.estimate(cluster, list(range(16)), op, 2**64 - 1)
        assert math.isfinite(check.time_s) and check.time_s > 0 and math.isfinite(check.busbw_GBps)
