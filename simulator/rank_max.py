"""The median of the per-step maximum over n ranks, from one rank's distribution (order statistics).

If n ranks' times X_1..X_n are independent with one distribution F, P(max X_i <= x) = F(x)^n, so the median of the
maximum is the x with F(x)^n = 1/2: x = F^-1(0.5^(1/n)) (David & Nagaraja, *Order Statistics*, 3rd ed., 2003,
§2.1, the distribution of the largest order statistic). For n = 1 that is the median; n = 2 the 0.707 quantile;
n = 4 the 0.841 quantile. Ranks that share their jitter (a collective lines them up, the whole machine slows
down) do not raise the maximum: the margin applies to the independent part only.
"""

from __future__ import annotations

import math


def rank_max_quantile(ranks: int) -> float:
    """``0.5 ** (1 / ranks)``: the quantile of one rank's distribution that is the median of the maximum of
    ``ranks`` independent ranks."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    return 0.5 ** (1.0 / ranks)


def quantile(samples, q: float) -> float:
    """The ``q`` quantile of ``samples``, linear between order statistics (Hyndman & Fan 1996, definition 7:
    position (len − 1)·q, numpy's default)."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def normal_quantile(q: float) -> float:
    """z with Φ(z) = q, the standard normal's inverse (Python's ``statistics.NormalDist``)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(q)


def independent_sd(per_rank) -> float:
    """The standard deviation of the ranks' independent jitter, from paired per-step samples (ranks × steps): each
    pair of ranks' per-step difference X_i − X_j cancels what they share and has the spread √2·σ of the
    independent part; σ is read robustly from the differences' interquartile range, IQR / (1.349·√2) (for a normal
    distribution IQR = 1.349·σ), so a few stalled steps do not set it."""
    diffs = [a - b for i, ri in enumerate(per_rank) for rj in per_rank[i + 1:] for a, b in zip(ri, rj)]
    if not diffs:
        return 0.0
    iqr = quantile(diffs, 0.75) - quantile(diffs, 0.25)
    return iqr / (1.349 * math.sqrt(2.0))


def rank_max_margin(sd: float, ranks: int) -> float:
    """The median of the maximum over ``ranks`` ranks above one rank's median, for an independent part with
    standard deviation ``sd`` (normal): sd · z(0.5^(1/ranks)); 0 for one rank (z(0.5) = 0)."""
    return sd * normal_quantile(rank_max_quantile(ranks)) if ranks > 1 else 0.0


def max_lift(per_rank) -> float:
    """The median over steps of the per-step maximum over ranks, over the mean of the ranks' medians, less 1, from
    paired per-step samples (ranks × steps): how far the slowest rank per step sits above a rank's median."""
    from statistics import fmean, median

    steps = min(len(r) for r in per_rank)
    rank_median = fmean(median(r[:steps]) for r in per_rank)
    if steps == 0 or rank_median <= 0:
        return 0.0
    return median(max(r[k] for r in per_rank) for k in range(steps)) / rank_median - 1.0


def effective_sd_fraction(per_rank) -> float:
    """The normal spread, as a fraction of a rank's median, whose order statistic gives the probe's own maximum:
    ``max_lift / z(0.5^(1/n))`` for n = len(per_rank) ≥ 2 ranks, at least 0. It reproduces the measured lift at the
    probe's n and carries it to other n with the normal's shape (:func:`rank_max_margin`); what the ranks share
    does not raise the measured maximum, so it is left out without a separate estimate of it."""
    n = len(per_rank)
    if n < 2:
        return 0.0
    return max(0.0, max_lift(per_rank)) / normal_quantile(rank_max_quantile(n))


def rank_max_gain(cluster, ranks: int) -> float:
    """The fraction by which the slowest of ``ranks`` ranks per step exceeds one rank's median own work:

        g = Host.rank_jitter_sd_fraction · z(0.5^(1/ranks))

    :func:`simulator.compile.step.stage_work` (both engines and the vectorised estimate read it) scales each chunk's
    forward, backward and recompute compute (with their host terms, not the calls inside them) and the optimizer step
    with its loop by 1 + g, so a step of m micro-batches pays g · (m · (forward + backward + recompute) + optimizer):
    each sync point waits for the slowest rank's work since the last. ``ranks``: the run's processes (the measured step
    is the slowest of them per step, ``simulator.run_results.Results._slowest``). The fraction comes from the cluster
    file (the calibration does not write it: :attr:`simulator.cluster.host_spec.HostSpec.rank_jitter_sd_fraction`)
    [src: own-rank-jitter-probe]; 0 without a host section, on an ``async`` device (a GPU: not measured there), or for
    one rank."""
    from simulator.cluster.spec import KernelDispatch

    host = cluster.node.host
    if host is None or cluster.device.kernel_dispatch is not KernelDispatch.INLINE or not host.rank_jitter_sd_fraction:
        return 0.0
    return rank_max_margin(host.rank_jitter_sd_fraction, ranks)
