"""benchmarks/pipeline_p2p_stamps.py's per-boundary send-first share: a transfer is send first when its receive's
posting ended after its send's posting began; micro-batch 0 is left out (the model's serial share,
simulator.receive_first.expected_prices, counts from micro-batch 1); a backward's receive is keyed by its sender,
the next stage. Synthetic stamps, no processes."""

from __future__ import annotations

from tests.benchmark_modules import load_benchmark


def _step(rank_events):
    return [[(0, 1000, events)] for events in rank_events]


def test_send_first_share_per_boundary():
    stamps = load_benchmark("pipeline_p2p_stamps")
    rank0 = [("postSF", 0, 0, 10, 12), ("postSF", 0, 1, 100, 110), ("postSF", 0, 2, 200, 210),
             ("postRB", 0, 1, 300, 305), ("postRB", 0, 2, 400, 405)]
    rank1 = [("postRF", 1, 0, 50, 60), ("postRF", 1, 1, 90, 95), ("postRF", 1, 2, 240, 250),
             ("postSB", 1, 1, 310, 320), ("postSB", 1, 2, 380, 390)]
    shares = stamps.send_first_shares(_step([rank0, rank1]))
    # F: mb 1 receive first (95 < 100), mb 2 send first (250 > 200), mb 0 (send first) left out
    # B from stage 1: mb 1 receive first (305 < 310), mb 2 send first (405 > 380)
    assert shares == {("B", 1): (0.5, 2), ("F", 0): (0.5, 2)}


def test_a_transfer_without_its_receive_is_not_counted():
    stamps = load_benchmark("pipeline_p2p_stamps")
    shares = stamps.send_first_shares(_step([[("postSF", 0, 1, 100, 110)], [("postRF", 1, 2, 90, 95)]]))
    assert shares == {}

