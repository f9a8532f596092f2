"""``comm.group_wait_us``: the wait for a core of a blocking call by a group smaller than the node's processes
(simulator/cluster/core_wait.py, read by both engines through ``Env.overhead_s``), and the calibration's pair probe
(executor/calibrate_groups.py)."""

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.cluster.comm import CommProfile
from simulator.cluster.io import load_cluster, save_cluster
from simulator.collectives.base import Op
from simulator.collectives.registry import estimate
from simulator.errors import SpecError

_CPU = load_cluster("localhost-cpu")
DATA = Path(__file__).parent / "data" / "suite_default"
WHOLE = ((2, 1000.0), (4, 3000.0))
PAIRS = ((2, ((4, 800.0),)),)


def _cpu(p: int, waits=WHOLE, groups=PAIRS):
    return replace(_CPU, node=replace(_CPU.node, gpus_per_node=p),
                   comm=replace(_CPU.comm, blocking_wait_us=waits, group_wait_us=groups))


def test_wait_by_group_size_hand_worked():
    """Whole node {2: 1000, 4: 3000} µs, pairs {4: 800}: a pair at 4 processes 800; at 3 the line from its whole-node
    wait at 2 (1000) to 800: 900; at 8 the nearest, 800; at 2 (the whole node) 1000; a group of 4 at 4 3000; a group
    of 3 at 4 (size not measured) the whole node's 3000; no group size given: the whole node's."""
    comm = CommProfile(blocking_wait_us=WHOLE, group_wait_us=PAIRS)
    us = lambda p, g=None, op=None: comm.blocking_wait_s(p, op, g) * 1e6  # noqa: E731
    assert us(4, 2) == pytest.approx(800.0)
    assert us(3, 2) == pytest.approx(900.0)
    assert us(8, 2) == pytest.approx(800.0)
    assert us(2, 2) == pytest.approx(1000.0)
    assert us(4, 4) == pytest.approx(3000.0)
    assert us(4, 3) == pytest.approx(3000.0)
    assert us(4) == pytest.approx(3000.0)
    # an op with its own whole-node table anchors the pair's line at its own wait: (1300 + 800) / 2 at 3 processes
    per_op = replace(comm, op_wait_us=((Op.ALL_REDUCE, ((2, 1300.0), (4, 4300.0))),))
    assert per_op.blocking_wait_s(3, Op.ALL_REDUCE, 2) * 1e6 == pytest.approx(1050.0)
    assert per_op.blocking_wait_s(4, Op.ALL_REDUCE, 4) * 1e6 == pytest.approx(4300.0)
    # old files (no group table) read as before, whatever the group
    assert CommProfile(blocking_wait_us=WHOLE).blocking_wait_s(4, None, 2) * 1e6 == pytest.approx(3000.0)


@pytest.mark.parametrize("ranks, op, extra_us", [
    ((0, 1), Op.ALL_REDUCE, 800.0 - 3000.0),   # a pair on 4 processes: its own wait
    ((2, 3), Op.SEND_RECV, 800.0 - 3000.0),    # a pipeline hop is a pair's call too
    ((0, 1, 2, 3), Op.ALL_REDUCE, 0.0),        # the node's whole group: as before
    ((0, 1, 2), Op.ALL_GATHER, 0.0),           # a size not measured: the whole node's wait, as before
])
def test_estimates_pay_their_groups_wait(ranks, op, extra_us):
    """One call on localhost-cpu with 4 processes moves by exactly the difference of the waits it reads."""
    before = estimate(_cpu(4, groups=()), list(ranks), op, 65536, "auto").time_s
    after = estimate(_cpu(4), list(ranks), op, 65536, "auto").time_s
    assert after - before == pytest.approx(extra_us * 1e-6, rel=1e-9, abs=1e-12)


def test_a_gpu_cluster_ignores_the_field():
    gpu = load_cluster("dgx-h100")
    with_field = replace(gpu, comm=replace(gpu.comm, group_wait_us=((2, ((8, 5000.0),)),)))
    assert estimate(with_field, [0, 1], Op.ALL_REDUCE, 1 << 20, "ring").time_s == \
        estimate(gpu, [0, 1], Op.ALL_REDUCE, 1 << 20, "ring").time_s


@pytest.mark.parametrize("case, moves", [("tp-dp", True), ("pp-dp", True), ("ddp-ring", False), ("tp", False)])
def test_engines_move_together_and_only_where_groups_are_smaller(case, moves):
    """Recorded runs: tp-dp's and pp-dp's pairs on 4 processes get faster by the same amount in both engines; ddp-ring
    (one 4-rank group) and tp (2 processes, the pair is the node) do not move at all."""
    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate

    results = load_results(DATA / f"{case}.results.json")
    base = run_cluster(results, str(DATA / "cluster.yaml"))
    base = replace(base, comm=replace(base.comm, blocking_wait_us=WHOLE, group_wait_us=()))
    paired = replace(base, comm=replace(base.comm, group_wait_us=PAIRS))
    before, after = (validate(results, c).row("step_time_s") for c in (base, paired))
    if not moves:
        assert (after.analytical, after.des) == (before.analytical, before.des)
        return
    assert after.analytical - before.analytical < -1e-3  # many pair calls per step, each 2.2 ms less
    assert after.des - before.des == pytest.approx(after.analytical - before.analytical, rel=0.05)


def test_file_round_trip_json_keys_and_show(tmp_path, capsys):
    import json

    import yaml

    from trainplan.__main__ import main

    groups = ((2, ((3, 900.5), (4, 650.0))), (4, ((8, 2000.0),)))
    path = save_cluster(_cpu(4, groups=groups), tmp_path / "c.yaml")
    assert load_cluster(str(path)).comm.group_wait_us == groups
    d = yaml.safe_load(path.read_text())
    d["comm"]["group_wait_us"] = {"2": {"4": 650, "3": 900}}  # JSON's keys are text; any order
    (tmp_path / "c.json").write_text(json.dumps(d))
    assert load_cluster(str(tmp_path / "c.json")).comm.group_wait_us == ((2, ((3, 900), (4, 650))),)
    assert main(["cluster", "show", str(path)]) == 0
    assert "wait per call of a 2-rank group 900.5 µs at 3, 650 µs at 4 processes" in capsys.readouterr().out
    d["comm"].pop("group_wait_us")  # an older file loads, with no table
    (tmp_path / "old.json").write_text(json.dumps(d))
    assert load_cluster(str(tmp_path / "old.json")).comm.group_wait_us == ()


@pytest.mark.parametrize("value, message", [
    ({1: {4: 100.0}}, "keys are group sizes (whole numbers >= 2)"),
    ({"pair": {4: 100.0}}, "keys are group sizes"),
    ({2: {2: 100.0}}, "comm.group_wait_us.2: give process counts above the group size 2"),
    ({2: {4: -1.0}}, "comm.group_wait_us.2.4: must be a non-negative number"),
    ({2: [100.0]}, "must be a mapping of process count to µs"),
    ([100.0], "must be a mapping of group size to {process count: µs}"),
])
def test_bad_group_tables_exit_2_in_one_line(tmp_path, capsys, value, message):
    import yaml

    from trainplan.__main__ import main

    d = yaml.safe_load(save_cluster(_cpu(2, groups=()), tmp_path / "ok.yaml").read_text())
    d["comm"]["group_wait_us"] = value
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError, match="group_wait_us"):
        load_cluster(str(bad))
    code = main(["cluster", "show", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_pair_wait_is_the_mean_excess_over_the_fast_estimate():
    """Calls of a pair on 4 processes that each take the fitted cluster's estimate (no waits, 4 processes' sharing)
    plus 0.3 or 0.9 ms: W_2(4) = 600 µs; calls faster than the estimate give 0, never a negative wait."""
    from executor.calibrate_groups import pair_waits_us, probe_counts, with_pair_waits

    fitted = _cpu(4)  # its waits are dropped for the fast estimate
    fast = {n: estimate(_cpu(4, waits=(), groups=()), [0, 1], Op.ALL_REDUCE, n, "auto").time_s for n in (4096, 65536)}
    calls = {4: {n: [t + 0.3e-3, t + 0.9e-3] for n, t in fast.items()}}
    assert pair_waits_us(fitted, calls) == {4: pytest.approx(600.0)}
    assert pair_waits_us(fitted, {4: {n: [t * 0.5] for n, t in fast.items()}}) == {4: 0.0}
    assert probe_counts((2, 3, 4)) == (4,) and probe_counts((2, 3)) == () and probe_counts((4, 8, 6)) == (4, 6, 8)
    assert with_pair_waits(_CPU, {4: 600.0}).comm.group_wait_us == ((2, ((4, 600.0),)),)
    assert with_pair_waits(_CPU, {}) is _CPU


def test_pair_probe_runs_pairs_on_gloo():
    """4 gloo processes in two pairs: every rank's timed calls come back per size (4 ranks × 2 rounds), positive."""
    from executor.calibrate_groups import pair_calls

    out = pair_calls([2, 4], sizes=(64, 256), rounds=2, warmup=1)
    assert list(out) == [4]
    assert {n: len(t) for n, t in out[4].items()} == {64: 8, 256: 8}
    assert all(t > 0 for times in out[4].values() for t in times)
