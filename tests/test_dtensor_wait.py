"""``comm.dtensor_wait_us``: the wait for a core of torch tensor parallelism's DTensor calls measured inside the tp
model (simulator/cluster/dtensor_wait.py, read by both engines through the compiled calls), and the calibration's
probe (executor/calibrate_dtensor.py)."""

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.cluster.dtensor_wait import dtensor_call_s, dtensor_wait_s
from simulator.cluster.io import load_cluster, save_cluster
from simulator.collectives.base import Op
from simulator.errors import SpecError

_CPU = load_cluster("localhost-cpu")
DATA = Path(__file__).parent / "data" / "suite_default"
OP_WAITS = ((Op.ALL_GATHER, ((2, 830.0), (4, 3080.0))), (Op.ALL_REDUCE, ((2, 1312.0), (4, 4330.0))))


def _cpu(p: int, dtensor=((2, 800.0),), groups=()):
    return replace(_CPU, node=replace(_CPU.node, gpus_per_node=p),
                   comm=replace(_CPU.comm, op_wait_us=OP_WAITS, group_wait_us=groups, dtensor_wait_us=dtensor))


def test_call_swaps_its_wait_hand_worked():
    """An all-reduce of a pair on 2 processes estimated at 1,569 µs with its sweep wait of 1,312 µs and W_dt(2) = 800 µs
    costs 1,569 − 1,312 + 800 = 1,057 µs; a reduce-scatter waits as gloo's all-reduce (1,312) too; an all-gather's
    own sweep wait 830: 1,000 − 830 + 800 = 970 µs."""
    c = _cpu(2)
    assert dtensor_call_s(c, Op.ALL_REDUCE, 2, 1569e-6) * 1e6 == pytest.approx(1057.0)
    assert dtensor_call_s(c, Op.REDUCE_SCATTER, 2, 1569e-6) * 1e6 == pytest.approx(1057.0)
    assert dtensor_call_s(c, Op.ALL_GATHER, 2, 1000e-6) * 1e6 == pytest.approx(970.0)


def test_where_the_measured_wait_applies():
    """Read at the node's processes within the measured counts (the line between them, the smallest's below);
    above the largest measured count, for groups other than pairs, under a protocol or with no table: None (the
    call keeps its ordinary wait, unchanged)."""
    two_four = ((2, 800.0), (4, 1600.0))
    assert dtensor_wait_s(_cpu(3, two_four), 2) * 1e6 == pytest.approx(1200.0)
    assert dtensor_wait_s(_cpu(4, two_four), 2) * 1e6 == pytest.approx(1600.0)
    assert dtensor_wait_s(_cpu(4), 2) is None  # only 2 processes measured
    assert dtensor_wait_s(_cpu(8, two_four), 2) is None
    assert dtensor_wait_s(_cpu(4, two_four), 4) is None
    assert dtensor_wait_s(_cpu(2, ()), 2) is None
    assert dtensor_call_s(_cpu(4), Op.ALL_REDUCE, 2, 5e-3) == 5e-3
    gpu = load_cluster("dgx-h100")
    gpu = replace(gpu, comm=replace(gpu.comm, dtensor_wait_us=((8, 5000.0),)))
    assert dtensor_wait_s(gpu, 2) is None


def test_sequence_parallel_calls_read_their_own_table():
    """With SP's table {2: 600}: an SP forward/backward call pays 600, the others (and the optimizer's all-reduces,
    ``sp`` False) 800; without SP's table SP's calls read the common one."""
    c = replace(_cpu(2), comm=replace(_cpu(2).comm, dtensor_sp_wait_us=((2, 600.0),)))
    assert dtensor_call_s(c, Op.ALL_GATHER, 2, 1000e-6, sp=True) * 1e6 == pytest.approx(1000.0 - 830.0 + 600.0)
    assert dtensor_call_s(c, Op.ALL_GATHER, 2, 1000e-6) * 1e6 == pytest.approx(1000.0 - 830.0 + 800.0)
    assert dtensor_wait_s(_cpu(2), 2, sp=True) * 1e6 == pytest.approx(800.0)


def test_a_pair_on_four_processes_swaps_its_group_wait():
    """At 4 processes a pair's ordinary wait is its group wait (pairs {4: 2000}); the measured W_dt(4) replaces it."""
    c = _cpu(4, dtensor=((2, 800.0), (4, 1500.0)), groups=((2, ((4, 2000.0),)),))
    assert dtensor_call_s(c, Op.ALL_REDUCE, 2, 2500e-6) * 1e6 == pytest.approx(2500.0 - 2000.0 + 1500.0)


@pytest.mark.parametrize("case, moves", [("tp", True), ("tp-sp", True), ("tp-dp", False), ("ddp-ring", False)])
def test_engines_move_together_and_only_torch_tp_calls(case, moves):
    """Recorded runs: with W_dt(2) 500 µs below the all-reduce's sweep wait (1,312 µs), tp's and tp-sp's steps get
    faster by the same amount in both engines and nothing but their tp (and tp-sp's optimizer) phases moves; tp-dp (4 processes,
    not measured there) and ddp-ring (no DTensor call) do not move."""
    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate

    results = load_results(DATA / f"{case}.results.json")
    base = run_cluster(results, str(DATA / "cluster.yaml"))  # a file without waits: give it the sweep's
    base = replace(base, comm=replace(base.comm, op_wait_us=OP_WAITS, blocking_wait_us=((2, 1000.0), (4, 3700.0))))
    measured = replace(base, comm=replace(base.comm, dtensor_wait_us=((2, 1312.0 - 500.0),)))
    before, after = (validate(results, c) for c in (base, measured))
    step0, step1 = before.row("step_time_s"), after.row("step_time_s")
    if not moves:
        assert (step1.analytical, step1.des) == (step0.analytical, step0.des)
        return
    assert step1.analytical - step0.analytical < -1e-3
    assert step1.des - step0.des == pytest.approx(step1.analytical - step0.analytical, rel=0.02)
    for name in ("forward", "backward"):
        assert after.row(name).analytical == before.row(name).analytical


def test_file_round_trip_show_and_bad_values(tmp_path, capsys):
    import yaml

    from trainplan.__main__ import main

    c = _cpu(4, dtensor=((2, 812.5), (4, 1500.0)))
    path = save_cluster(replace(c, comm=replace(c.comm, dtensor_sp_wait_us=((2, 700.0),))), tmp_path / "c.yaml")
    assert load_cluster(str(path)).comm.dtensor_wait_us == ((2, 812.5), (4, 1500.0))
    assert load_cluster(str(path)).comm.dtensor_sp_wait_us == ((2, 700.0),)
    assert main(["cluster", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "wait per DTensor tp call 812.5 µs at 2, 1500 µs at 4 processes" in out
    assert "with sequence parallelism 700 µs at 2 processes" in out
    d = yaml.safe_load(path.read_text())
    d["comm"]["dtensor_wait_us"] = {2: -1.0}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError, match="dtensor_wait_us"):
        load_cluster(str(bad))
    assert main(["cluster", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "comm.dtensor_wait_us" in err and len(err.strip().splitlines()) == 1, err


def test_without_waits_drops_the_dtensor_waits():
    from executor.calibrate_modes import without_waits

    sp = replace(_cpu(2, dtensor=()), comm=replace(_cpu(2).comm, dtensor_wait_us=(), dtensor_sp_wait_us=((2, 1.0),)))
    assert without_waits(_cpu(2)).comm.dtensor_wait_us == ()
    assert without_waits(sp).comm.dtensor_sp_wait_us == ()


def test_probe_formula_hand_worked():
    """Two ranks, two iterations of 44 calls: 44 ms and 66 ms inside the collectives → 1.0 and 1.5 ms per call, mean
    1.25 ms; less the estimate's mean fast call → W_dt(2). A count that is not the estimate's list × micro-batches is
    left out; the result is never below 0."""
    from executor.calibrate_dtensor import MICRO_BATCHES, dtensor_waits_us, fast_call_s

    fitted = _cpu(2, dtensor=())
    fast_s, listed = fast_call_s(fitted, 2)
    sp_fast_s, sp_listed = fast_call_s(fitted, 2, sp=True)
    assert listed == 11  # 2 blocks: embedding 1 + 2·2 + logits' gather forward, 2·2 + output layer backward
    assert sp_listed == 21  # 1 + 2·4 + 2 forward (the last block's and the logits' gathers), 1 + 2·4 + 1 backward
    n, m = MICRO_BATCHES * listed, MICRO_BATCHES * sp_listed
    rank = {False: ([44e-3, 66e-3], [n, n]), True: ([84e-3], [m])}
    assert dtensor_waits_us(fitted, {2: [rank, rank]})[2] == pytest.approx(1250.0 - fast_s * 1e6)
    assert dtensor_waits_us(fitted, {2: [rank, rank]}, sp=True)[2] == pytest.approx(1000.0 - sp_fast_s * 1e6)
    assert dtensor_waits_us(fitted, {2: [{False: ([44e-3], [n + 1])}]}) == {}
    assert dtensor_waits_us(fitted, {2: [{False: ([1e-6], [n])}]})[2] == 0.0


def test_probe_counts_the_calls_the_estimate_lists():
    """gloo, 2 processes, the executor's tp model without and with SP: DTensor launches exactly the estimate's list
    per micro-batch (so
    the probe's per-call figure is per the calls the model prices), and the time inside them is positive."""
    from executor.calibrate_dtensor import MICRO_BATCHES, dtensor_calls, fast_call_s

    ranks = dtensor_calls((2,), iterations=1, warmup=0)[2]
    assert len(ranks) == 2
    for rank in ranks:
        for sp in (False, True):
            seconds, counts = rank[sp]
            assert counts == [MICRO_BATCHES * fast_call_s(_CPU, 2, sp)[1]]
            assert seconds[0] > 0.0


def test_three_moments_the_median_written_by_hand():
    """Three takes of the probe (executor.calibrate_dtensor.dtensor_moments), 2 processes, one iteration of 44 calls
    each: 44, 55 and 66 ms inside the collectives → 1.00, 1.25, 1.50 ms per call → W_dt(2) = that less the estimate's
    mean fast call f. The written value is the middle take's, 1,250 µs − f. With the last take read at 10 ms per call
    (440 ms) the written value is 1,250 µs − f, at 0.1 ms (4.4 ms, below f: read 0) it is 1,000 µs − f: one high or
    one low take of three cannot set it, it stays within the other two (tp21 read 813-1,308 µs from single takes).
    SP's table is kept apart (84 ms / 4·21 calls: 1 ms − f_SP). The source records every take and their range."""
    from executor.calibrate_dtensor import (MICRO_BATCHES, dtensor_moments, dtensor_source_text, fast_call_s,
                                            with_dtensor_waits)

    fitted = _cpu(2, dtensor=())
    fast_us, listed = fast_call_s(fitted, 2)[0] * 1e6, fast_call_s(fitted, 2)[1]
    sp_fast_us, sp_listed = fast_call_s(fitted, 2, sp=True)[0] * 1e6, fast_call_s(fitted, 2, sp=True)[1]
    n, m = MICRO_BATCHES * listed, MICRO_BATCHES * sp_listed

    def take(seconds):
        rank = {False: ([seconds], [n]), True: ([84e-3], [m])}
        return {2: [rank, rank]}

    waits, sp_waits = dtensor_moments(fitted, [take(44e-3), take(55e-3), take(66e-3)])
    assert waits[2].values == pytest.approx((1000.0 - fast_us, 1250.0 - fast_us, 1500.0 - fast_us))
    assert sp_waits[2].values == pytest.approx((1000.0 - sp_fast_us,) * 3)
    written = with_dtensor_waits(fitted, waits, sp_waits).comm
    assert written.dtensor_wait_us == ((2, pytest.approx(1250.0 - fast_us)),)
    assert written.dtensor_sp_wait_us == ((2, pytest.approx(1000.0 - sp_fast_us)),)
    for wild, kept_us in ((440e-3, 1250.0), (4.4e-3, 1000.0)):
        wild_waits, _ = dtensor_moments(fitted, [take(44e-3), take(55e-3), take(wild)])
        assert wild_waits[2].high > 8000.0 or wild_waits[2].low == 0.0
        assert with_dtensor_waits(fitted, wild_waits).comm.dtensor_wait_us == ((2, pytest.approx(kept_us - fast_us)),)
    low, mid, high = (f"{v:.0f}" for v in waits[2].values)
    text = dtensor_source_text(waits, sp_waits)
    assert f"2 processes {mid} us (moments {low}, {mid}, {high}; min..max {low}..{high})" in text
    assert "taken at 3 moments" in text and "the median written" in text and "dtensor_sp_wait_us" in text
    assert dtensor_source_text({}, {}) == "" and with_dtensor_waits(fitted, {}, {}) is fitted


def test_a_take_that_counts_other_calls_adds_no_moment():
    """A take whose calls per iteration are not the estimate's list × micro-batches is left out of the moments (as
    dtensor_waits_us leaves it out of one take): two moments remain, their median written."""
    from executor.calibrate_dtensor import MICRO_BATCHES, dtensor_moments, fast_call_s

    fitted = _cpu(2, dtensor=())
    n = MICRO_BATCHES * fast_call_s(fitted, 2)[1]
    takes = [{2: [{False: ([44e-3], [k]), True: ([1e-3], [1])}]} for k in (n, n + 1, n)]
    waits, sp_waits = dtensor_moments(fitted, takes)
    assert len(waits[2].values) == 2 and sp_waits == {}


def test_each_moment_times_its_share_of_the_iterations(monkeypatch):
    """Three moments of ⌈10 / 3⌉ = 4 timed iterations each (12 in all, against the one take's 10), the warm-up per
    launch as before; a design without 2 or 4 processes launches nothing."""
    import executor.calibrate_dtensor as probe

    seen = []
    monkeypatch.setattr(probe, "dtensor_calls", lambda nprocs, iterations: seen.append((nprocs, iterations)) or {})
    probe.dtensor_moment((2, 3))
    assert seen == [((2, 3), 4)] and probe.ITERATIONS == 10 and probe.WARMUP == 2
    assert probe.dtensor_moment((3,)) == {} and probe.dtensor_moment(()) == {} and len(seen) == 1
