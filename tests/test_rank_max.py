"""The slowest rank per step (simulator/rank_max.py): order statistics hand-worked, the probe's fraction, the charge."""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path

import pytest

from executor.step_bench import step_jitter_fraction
from recorded_step import recorded_step, with_host
from simulator.cluster._schema import cluster_from_dict
from simulator.cluster.io import cluster_to_dict, load_cluster, save_cluster
from simulator.rank_max import (effective_sd_fraction, independent_sd, max_lift, normal_quantile, quantile,
                                rank_max_gain, rank_max_margin, rank_max_quantile)
from simulator.run_results import load_results
from simulator.validate import run_cluster, run_workload

RUNS = Path(__file__).resolve().parent / "data" / "suite_quick"


def test_the_maximum_s_median_quantile_hand_worked():
    """F(x)^n = 1/2: n = 1 the median; 2: 2^-1/2 = 0.70711; 4: 2^-1/4 = 0.84090; 8: 2^-1/8 = 0.91700."""
    assert rank_max_quantile(1) == 0.5
    assert rank_max_quantile(2) == pytest.approx(0.707107, abs=1e-6)
    assert rank_max_quantile(4) == pytest.approx(0.840896, abs=1e-6)
    assert rank_max_quantile(8) == pytest.approx(0.917004, abs=1e-6)
    with pytest.raises(ValueError):
        rank_max_quantile(0)


def test_the_quantile_against_every_pair_of_two_ranks_enumerated():
    """Two independent ranks, each 1..10 ms with equal chance: of the 100 pairs, max <= 7 in 49, <= 8 in 64, so the
    maximum's median is 8; F^-1(0.70711) of one rank is 8 too (7/10 < 0.707 <= 8/10)."""
    values = range(1, 11)
    maxima = sorted(max(a, b) for a, b in itertools.product(values, values))
    assert statistics.median_low(maxima) == 8
    assert min(v for v in values if v / 10 >= rank_max_quantile(2)) == 8
    # linear quantile (Hyndman-Fan 7) of 0..100 is 100 q
    assert quantile(range(101), rank_max_quantile(2)) == pytest.approx(70.7107, abs=1e-4)


def test_an_exponential_rank_s_maximum_hand_worked():
    """Exp(1): F^-1(q) = -ln(1 - q); the median of the max of 2 is -ln(1 - 0.70711) = 1.2279, of 4 is -ln(0.15910) = 1.8382,
    against one rank's ln 2 = 0.6931; checked on a fine deterministic grid of the distribution's quantiles."""
    grid = [-math.log(1 - (k + 0.5) / 20000) for k in range(20000)]
    assert quantile(grid, rank_max_quantile(2)) == pytest.approx(1.2279, abs=2e-3)
    assert quantile(grid, rank_max_quantile(4)) == pytest.approx(1.8382, abs=2e-3)


def test_the_normal_margin_hand_worked():
    """z(0.70711) = 0.5450, z(0.84090) = 0.9981, z(0.91700) = 1.3852 (normal table); one rank adds nothing."""
    assert normal_quantile(rank_max_quantile(2)) == pytest.approx(0.5450, abs=1e-4)
    assert rank_max_margin(2.0, 4) == pytest.approx(2 * 0.9981, abs=1e-3)
    assert rank_max_margin(1.0, 8) == pytest.approx(1.3852, abs=1e-4)
    assert rank_max_margin(1.0, 1) == 0.0


def test_the_probe_s_fraction_hand_worked():
    """Two ranks, 5 steps, 10 or 12 ms: each rank's median is 10, the slower per step 12, 12, 12, 12, 10, so its
    median is 12: a lift of 0.2 and a fraction 0.2 / 0.5450 = 0.3670; ranks that move together lift nothing."""
    alternating = [[10.0, 12.0, 10.0, 12.0, 10.0], [12.0, 10.0, 12.0, 10.0, 10.0]]
    assert max_lift(alternating) == pytest.approx(0.2)
    assert effective_sd_fraction(alternating) == pytest.approx(0.2 / 0.544952, rel=1e-5)
    assert step_jitter_fraction(alternating) == effective_sd_fraction(alternating)
    together = [[10.0, 20.0, 30.0], [10.0, 20.0, 30.0]]
    assert effective_sd_fraction(together) == 0.0
    assert independent_sd(together) == 0.0
    assert step_jitter_fraction([[1.0, 2.0]]) == 0.0


def test_independent_sd_reads_the_pair_s_differences():
    """Differences -2, -1, 0, 1, 2 (shared part 0..4 cancels): IQR 2, σ = 2 / (1.349·√2) = 1.0484."""
    a = [0.0, 1.0, 2.0, 3.0, 4.0]
    b = [x + d for x, d in zip(a, [2.0, 1.0, 0.0, -1.0, -2.0])]
    assert independent_sd([a, b]) == pytest.approx(2 / (1.349 * math.sqrt(2)), rel=1e-9)


def _with_fraction(cluster, fraction: float):
    return with_host(cluster, rank_jitter_sd_fraction=fraction)


_step = recorded_step


def test_the_field_round_trips_and_a_preset_charges_nothing(tmp_path):
    base = run_cluster(load_results(RUNS / "ddp-overlap.results.json"), "localhost-cpu")
    assert base.node.host.rank_jitter_sd_fraction == 0.0
    assert rank_max_gain(base, 4) == 0.0
    d = cluster_to_dict(base)
    d["host"]["rank_jitter_sd_fraction"] = 0.05
    cluster = cluster_from_dict(d)
    assert cluster.node.host.rank_jitter_sd_fraction == 0.05
    assert load_cluster(str(save_cluster(cluster, tmp_path / "c.yaml"))).node.host == cluster.node.host
    assert rank_max_gain(cluster, 4) == pytest.approx(0.05 * 0.998149, rel=1e-5)
    assert rank_max_gain(cluster, 1) == 0.0


@pytest.mark.parametrize("case", ["ddp-overlap", "pp-1f1b"])
def test_own_work_scales_by_the_gain_in_every_engine(case):
    """Fraction 0.1 on 2 ranks: g = 0.1 · z(0.70711) = 0.05450; each chunk's forward, backward and recompute (no
    calls inside them here) and the optimizer step scale by 1 + g; both engines and the vectorised estimate (which
    shares stage work between micro-batch counts) grow alike."""
    from simulator.analytical_vec import estimate_many

    base = run_cluster(load_results(RUNS / f"{case}.results.json"), "localhost-cpu")
    bare, layout, analytical0, des0 = _step(case, base)
    cluster = _with_fraction(base, 0.1)
    work, _, analytical1, des1 = _step(case, cluster)
    assert layout.world_size == 2
    g = 0.1 * 0.544952
    for old, new in zip(bare.stages, work.stages):
        assert new.optimizer_s == pytest.approx(old.optimizer_s * (1 + g), rel=1e-5)
        for a, b in zip(old.chunks, new.chunks):
            assert (b.fwd_s, b.bwd_s) == pytest.approx((a.fwd_s * (1 + g), a.bwd_s * (1 + g)), rel=1e-5)
    assert analytical1 > analytical0 and des1 > des0
    assert analytical1 == pytest.approx(des1, rel=1e-9) or len(bare.stages) > 1
    plan = load_results(RUNS / f"{case}.results.json").run.plan
    workload = run_workload(load_results(RUNS / f"{case}.results.json"))
    vec = estimate_many(cluster, workload, [plan.strategy], gpus=plan._layout_gpus())
    assert float(vec.step_time_s.iloc[0]) == pytest.approx(analytical1, rel=1e-9)
