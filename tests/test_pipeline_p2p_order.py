"""benchmarks/pipeline_p2p_order.py: the margins of a pipeline's postings (receive − send, per transfer), their
spread, the report beside the model's walk, and send-first latencies split by what the receiver did. Synthetic
stamps, no processes."""

from __future__ import annotations

from tests.benchmark_modules import load_benchmark


def _step(rank_events):
    return [[(0, 1000, events)] for events in rank_events]


def test_margins_per_transfer_and_their_spread():
    """A transfer's margin is its receive posting's end − its send posting's start, in µs (positive: send first),
    per step; the spread is p10..p90 / 2.563 (a normal's σ)."""
    stamps = load_benchmark("pipeline_p2p_order")
    steps = [[(0, 1000, [("postSF", 0, 1, 100_000, 110_000)]), (0, 1000, [("postSF", 0, 1, 100_000, 110_000)])],
             [(0, 1000, [("postRF", 1, 1, 90_000, 95_000)]), (0, 1000, [("postRF", 1, 1, 200_000, 250_000)])]]
    assert stamps.margins(steps) == {("F", 0, 1): [-5.0, 150.0]}
    assert stamps.spread_us([-5.0, 150.0]) == (150.0 - -5.0) / 2.563


def test_order_report_compares_the_run_with_the_walk():
    """The report's walk is :func:`simulator.receive_first.walk_transfers` on the run's medians: a GPipe run whose
    stamps put every later transfer send first (its receive posted 410 µs after its send) is reported beside the
    walk's margin, 0 here (forwards of 0.5 ms on both stages, the receive-first price 0: rank 1 posts micro-batch
    j's receive as rank 0 sends it), and the shares differ: 1.00 in the run, 0.00 in the walk."""
    stamps = load_benchmark("pipeline_p2p_order")
    ranks = [[], []]
    for k in range(3):
        r0, r1 = [], []
        for mb in range(4):
            t = 1_000_000 * mb
            r0 += [("F", 0, mb, t, t + 500_000), ("postSF", 0, mb, t + 500_000, t + 510_000)]
            r1 += [("postRF", 1, mb, t + 900_000, t + 910_000), ("waitRF", 1, mb, t + 910_000, t + 1_000_000),
                   ("F", 1, mb, t + 1_000_000, t + 1_500_000)]
        ranks[0].append((0, 5_000_000, r0))
        ranks[1].append((0, 5_000_000, r1))
    report = stamps.order_report("gpipe", 1, ranks)
    assert "F0.1 410 (410..410) / 0;" in report        # 910 − 500 µs, every step
    assert "spread (median over transfers) 0 us" in report
    assert "F0 1.00 / 0.00" in report


def test_send_first_latency_split_by_what_the_receiver_did():
    """Two send-first transfers into stage 1 (rank 1): micro-batch 1's receive is posted and waited on at once
    (blocked: from the receive posting's start to the wait's end), micro-batch 2's receive is posted before a backward
    the rank computes before waiting (computing: the wait alone), in µs. A receive-first one is left out."""
    stamps = load_benchmark("pipeline_p2p_order")
    rank0 = [("postSF", 0, 1, 0, 10_000), ("postSF", 0, 2, 0, 10_000), ("postSF", 0, 3, 900_000, 910_000)]
    rank1 = [("postRF", 1, 1, 100_000, 110_000), ("waitRF", 1, 1, 110_000, 400_000),
             ("postRF", 1, 2, 400_000, 410_000), ("B", 1, 0, 420_000, 600_000), ("waitRF", 1, 2, 610_000, 1_000_000),
             ("postRF", 1, 3, 800_000, 810_000), ("waitRF", 1, 3, 810_000, 1_200_000)]
    split = stamps.send_first_split(_step([rank0, rank1]))
    assert split == {"blocked": [300.0], "computing": [390.0]}
