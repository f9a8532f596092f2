"""A pipeline transfer priced by its probability of being posted send first (simulator/receive_first.py
``send_first_share``, ``host.pipeline_order_spread_us``): the share, the walk, the field's way into both engines."""

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.receive_first import blended_s, expected_prices, send_first_share, walk_transfers
from simulator.schedules import ActionKind, gpipe, one_f_one_b

DATA = Path(__file__).parent / "data" / "suite_default"
F, B = ActionKind.F, ActionKind.B


def test_share_is_a_step_without_spread_and_the_normal_cdf_with_one():
    assert send_first_share(1e-6, 0.0) == 1.0 and send_first_share(0.0, 0.0) == 0.0   # a tie is receive first
    assert send_first_share(-1e-3, 0.0) == 0.0
    assert send_first_share(0.0, 1e-3) == pytest.approx(0.5)
    assert send_first_share(1e-3, 1e-3) == pytest.approx(0.841345, abs=1e-6)       # Φ(1)
    assert send_first_share(-1e-3, 1e-3) == pytest.approx(1 - 0.841345, abs=1e-6)
    assert blended_s(1.0, 10.0, 0.25) == pytest.approx(3.25)


def test_walk_without_spread_is_the_all_or_nothing_walk():
    """The by-hand case of tests/test_receive_first.py: F1's receive is posted 1 s after its send (margin +1 s),
    every other transfer's at or before it; with spread 0 the shares are 0 or 1 and the prices the two classes'."""
    full, first = {(0, F): 10.0, (1, B): 10.0}, {(0, F): 1.0, (1, B): 1.0}
    walked = walk_transfers(one_f_one_b(2, 2), [1.0, 1.0], [1.0, 1.0], full, first)
    assert walked[(0, F, 1)].margin_s == pytest.approx(1.0) and walked[(0, F, 1)].share == 1.0
    assert walked[(0, F, 1)].price_s == 10.0 and walked[(0, F, 0)].price_s == 1.0
    assert all(w.share in (0.0, 1.0) for w in walked.values())


def test_spread_prices_each_transfer_at_its_share():
    """With a spread of 1 s, F0 (receive posted 1 s before its send) is send first with Φ(−1) = 0.159: 1 + 0.159 · 9
    s, arriving 0.43 s later than without a spread, which moves F1's margin to 1 + 1.43 s (rank 1's forward ends
    later, so it posts F1's receive later); every price is its share's blend; a huge spread puts every share at one
    half."""
    full, first = {(0, F): 10.0, (1, B): 10.0}, {(0, F): 1.0, (1, B): 1.0}
    walked = walk_transfers(one_f_one_b(2, 2), [1.0, 1.0], [1.0, 1.0], full, first, 1.0)
    assert walked[(0, F, 0)].price_s == pytest.approx(1.0 + 0.158655 * 9.0, abs=1e-5)
    assert walked[(0, F, 1)].margin_s == pytest.approx(1.0 + 1.0 + 0.158655 * 9.0 - 1.0, abs=1e-5)
    assert all(w.price_s == pytest.approx(1.0 + send_first_share(w.margin_s, 1.0) * 9.0) for w in walked.values())
    wide = expected_prices(gpipe(2, 4), [1.0, 1.0], [1.0, 1.0], full, first, 1e6)
    assert all(v[2] == pytest.approx(0.5, abs=1e-5) for v in wide.values())


def _cluster(spread_us: float):
    from simulator.cluster.io import load_cluster

    c = load_cluster(str(DATA / "cluster.yaml"))
    return replace(c, node=replace(c.node, gpus_per_node=2, host=replace(c.node.host, cpu_cores=2,
                                                                          pipeline_order_spread_us=spread_us)),
                   comm=replace(c.comm, blocking_wait_us=((2, 1000.0), (4, 3000.0))))


def _estimates(case: str, spread_us: float):
    from simulator.run_results import load_results
    from simulator.validate import estimate_run

    return estimate_run(load_results(DATA / f"{case}.results.json"), _cluster(spread_us))


def test_the_field_reaches_both_engines():
    """GPipe on 2 of 2 cores: some transfers' margins are within a millisecond, so a spread of 1 ms moves both
    engines' step (either way: micro-batch 0's receive-first transfers gain a share of the full price, later ones
    lose some)."""
    a0, d0 = _estimates("pp-gpipe", 0.0)
    a1, d1 = _estimates("pp-gpipe", 1000.0)
    assert abs(a1.step_time_s - a0.step_time_s) > 1e-5 and abs(d1.step_time_s - d0.step_time_s) > 1e-5


def test_the_field_round_trips_and_is_checked(tmp_path):
    from simulator.cluster.io import load_cluster, save_cluster
    from simulator.errors import SpecError

    path = save_cluster(_cluster(250.0), tmp_path / "c.yaml")
    assert load_cluster(str(path)).node.host.pipeline_order_spread_us == 250.0
    with pytest.raises(SpecError, match="pipeline_order_spread_us"):
        replace(_cluster(0.0).node.host, pipeline_order_spread_us=-1.0)
