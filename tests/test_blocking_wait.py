"""``comm.blocking_wait_us``: the expected wait for a core of one blocking call, by the node's process count, added to
every call's cost on a loopback node without a protocol (simulator/collectives/cost.py ``Env.blocking_wait_s``)."""

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


def _cpu(p: int, waits=()):
    return replace(_CPU, node=replace(_CPU.node, gpus_per_node=p), comm=replace(_CPU.comm, blocking_wait_us=waits))


def test_wait_per_process_count_hand_worked():
    """Measured counts exactly; the straight line between two; the nearest measured count outside them; 0 unset."""
    comm = CommProfile(blocking_wait_us=((2, 760.0), (4, 3700.0)))
    assert comm.blocking_wait_s(2) == pytest.approx(760e-6)
    assert comm.blocking_wait_s(3) == pytest.approx((760 + 3700) / 2 * 1e-6)  # 2230 µs
    assert comm.blocking_wait_s(4) == pytest.approx(3700e-6)
    assert comm.blocking_wait_s(8) == pytest.approx(3700e-6)  # not extrapolated
    assert comm.blocking_wait_s(1) == pytest.approx(760e-6)
    assert CommProfile().blocking_wait_s(4) == 0.0


@pytest.mark.parametrize("op, nbytes", [(Op.ALL_REDUCE, 4096), (Op.ALL_GATHER, 1 << 20), (Op.BROADCAST, 65536),
                                        (Op.REDUCE_SCATTER, 1 << 18)])
def test_each_call_pays_the_wait_of_its_nodes_processes(op, nbytes):
    """One call of each op on localhost-cpu with 3 processes: + W(3) = 2,000 µs (between 1,000 at 2 and 3,000 at 4)
    exactly, whatever the op and size; the same call with no table costs what it did."""
    waits = ((2, 1000.0), (4, 3000.0))
    ranks = [0, 1, 2]
    before = estimate(_cpu(3), ranks, op, nbytes, "auto").time_s
    after = estimate(_cpu(3, waits), ranks, op, nbytes, "auto").time_s
    assert after - before == pytest.approx(2000e-6, rel=1e-9)


def test_a_gpu_cluster_ignores_the_field():
    """Under a protocol (NCCL) or off a loopback link the α-β closed forms hold exactly: no wait is added."""
    gpu = load_cluster("dgx-h100")
    assert not gpu.comm.blocking_wait_us and not _CPU.comm.blocking_wait_us  # presets: not measured
    with_field = replace(gpu, comm=replace(gpu.comm, blocking_wait_us=((8, 5000.0),)))
    ranks = list(range(8))
    assert estimate(with_field, ranks, Op.ALL_REDUCE, 1 << 20, "ring").time_s == \
        estimate(gpu, ranks, Op.ALL_REDUCE, 1 << 20, "ring").time_s


def test_recorded_ddp_ring_run_moves_by_one_wait_per_call(tmp_path):
    """ddp-ring's recorded run (4 processes, one replayed bucket per step, exposed): read from the file, a wait of
    3,000 µs at 4 processes adds exactly 3 ms per step in both engines (one blocking call); a table measured at 2
    processes only (1,000 µs) adds 1 ms (the nearest count's)."""
    import yaml

    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate

    results = load_results(DATA / "ddp-ring.results.json")
    before = validate(results, run_cluster(results, str(DATA / "cluster.yaml"))).row("step_time_s")
    for table, extra_s in (({2: 1000.0, 4: 3000.0}, 3e-3), ({2: 1000.0}, 1e-3)):
        d = yaml.safe_load((DATA / "cluster.yaml").read_text())
        d["comm"]["blocking_wait_us"] = table
        path = tmp_path / "waits.yaml"
        path.write_text(yaml.safe_dump(d))
        after = validate(results, run_cluster(results, str(path))).row("step_time_s")
        assert after.analytical - before.analytical == pytest.approx(extra_s, rel=1e-6)
        assert after.des - before.des == pytest.approx(extra_s, rel=1e-6)


def test_recorded_many_call_run_grows_by_its_calls():
    """tp's recorded run (2 processes, many small all-reduces per step): a wait at 2 processes makes the step
    longer by a whole number of waits (its blocking calls on the critical path), more than one."""
    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate

    results = load_results(DATA / "tp.results.json")
    base = run_cluster(results, str(DATA / "cluster.yaml"))
    with_wait = replace(base, comm=replace(base.comm, blocking_wait_us=((2, 500.0),)))
    before, after = (validate(results, c).row("step_time_s") for c in (base, with_wait))
    calls = (after.analytical - before.analytical) / 500e-6
    assert calls > 1 and calls == pytest.approx(round(calls), abs=1e-6)


def test_file_round_trip_and_json_text_keys(tmp_path):
    cluster = _cpu(4, ((2, 760.5), (3, 2116.0), (4, 3695.6)))
    path = save_cluster(cluster, tmp_path / "c.yaml")
    assert load_cluster(str(path)).comm.blocking_wait_us == ((2, 760.5), (3, 2116.0), (4, 3695.6))
    import json

    import yaml

    d = yaml.safe_load(path.read_text())
    d["comm"]["blocking_wait_us"] = {"4": 3000, "2": 1000}  # JSON's keys are text; any order
    (tmp_path / "c.json").write_text(json.dumps(d))
    assert load_cluster(str(tmp_path / "c.json")).comm.blocking_wait_us == ((2, 1000), (4, 3000))


@pytest.mark.parametrize("value, message", [
    ({2: -1.0}, "comm.blocking_wait_us.2: must be a non-negative number"),
    ({0: 100.0}, "keys are process counts"),
    ({"two": 100.0}, "keys are process counts"),
    ([760.0], "must be a mapping of process count to µs"),
    ({2: "760"}, "comm.blocking_wait_us.2: must be a non-negative number"),
])
def test_bad_values_exit_2_in_one_line(tmp_path, capsys, value, message):
    import yaml

    from trainplan.__main__ import main

    d = yaml.safe_load(save_cluster(_cpu(2), tmp_path / "ok.yaml").read_text())
    d["comm"]["blocking_wait_us"] = value
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError, match="blocking_wait_us"):
        load_cluster(str(bad))
    code = main(["cluster", "show", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


# comm.op_wait_us: an op measured on its own pays its own wait (check15; docs/calibration.md, "Waits per op")

_PER_OP = ((Op.ALL_REDUCE, ((2, 1300.0), (4, 4300.0))), (Op.BROADCAST, ((2, 100.0), (4, 900.0))))


def test_op_table_replaces_the_default_for_its_op_only():
    """Hand-worked: broadcast at 3 processes reads its own line (100 + 900)/2 = 500 µs, the all-reduce (1300 + 4300)/2
    = 2800 µs, an op without a table (all-gather) and no op at all the default (1000 + 3000)/2 = 2000 µs."""
    comm = CommProfile(blocking_wait_us=((2, 1000.0), (4, 3000.0)), op_wait_us=_PER_OP)
    assert comm.blocking_wait_s(3, Op.BROADCAST) == pytest.approx(500e-6)
    assert comm.blocking_wait_s(3, Op.ALL_REDUCE) == pytest.approx(2800e-6)
    assert comm.blocking_wait_s(3, Op.ALL_GATHER) == pytest.approx(2000e-6)
    assert comm.blocking_wait_s(3) == pytest.approx(2000e-6)


@pytest.mark.parametrize("op, nbytes, extra_us", [(Op.ALL_REDUCE, 4096, 2800.0), (Op.BROADCAST, 65536, 500.0),
                                                  (Op.ALL_GATHER, 1 << 20, 2000.0),
                                                  (Op.REDUCE_SCATTER, 1 << 18, 2800.0)])
def test_each_op_pays_its_own_wait(op, nbytes, extra_us):
    """On localhost-cpu with 3 processes each call grows by its op's wait exactly; a reduce-scatter, which gloo runs
    as the all-reduce of the whole input (gloo_ops.waits_as), pays the all-reduce's."""
    ranks = [0, 1, 2]
    before = estimate(_cpu(3), ranks, op, nbytes, "auto").time_s
    cluster = _cpu(3, ((2, 1000.0), (4, 3000.0)))
    cluster = replace(cluster, comm=replace(cluster.comm, op_wait_us=_PER_OP))
    assert estimate(cluster, ranks, op, nbytes, "auto").time_s - before == pytest.approx(extra_us * 1e-6, rel=1e-9)


@pytest.mark.parametrize("case", ["zero2", "tp"])
def test_engines_move_together_with_op_waits(case):
    """A recorded run whose steps make all-reduces (tp) or reduce-scatters and all-gathers (zero2, FSDP2): with an
    all-reduce's own wait below the default, both engines move by the same amount (the DES charges a reduce-scatter
    the all-reduce's wait, as the analytical engine's estimate does, not the default), and by more than nothing."""
    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate

    results = load_results(DATA / f"{case}.results.json")
    base = run_cluster(results, str(DATA / "cluster.yaml"))
    waited = replace(base, comm=replace(base.comm, blocking_wait_us=((2, 3000.0),),
                                        op_wait_us=((Op.ALL_REDUCE, ((2, 700.0), (4, 2000.0))),)))
    before, after = (validate(results, c).row("step_time_s") for c in (base, waited))
    assert after.analytical - before.analytical > 1e-4
    assert after.des - before.des == pytest.approx(after.analytical - before.analytical, rel=1e-6)


def test_op_table_file_round_trip(tmp_path, capsys):
    from trainplan.__main__ import main

    cluster = replace(_cpu(4), comm=replace(_CPU.comm, op_wait_us=_PER_OP))
    path = save_cluster(cluster, tmp_path / "c.yaml")
    assert load_cluster(str(path)).comm.op_wait_us == _PER_OP
    assert main(["cluster", "show", str(path)]) == 0
    assert "wait per broadcast 100 µs at 2, 900 µs at 4 processes" in capsys.readouterr().out


@pytest.mark.parametrize("value, message", [
    ({"all-sum": {2: 100.0}}, "keys are collective ops"),
    ({"broadcast": {2: -1.0}}, "comm.op_wait_us.broadcast.2: must be a non-negative number"),
    ({"broadcast": [100.0]}, "must be a mapping of process count to µs"),
    ([100.0], "must be a mapping of op to {process count: µs}"),
])
def test_bad_op_tables_exit_2_in_one_line(tmp_path, capsys, value, message):
    import yaml

    from trainplan.__main__ import main

    d = yaml.safe_load(save_cluster(_cpu(2), tmp_path / "ok.yaml").read_text())
    d["comm"]["op_wait_us"] = value
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    code = main(["cluster", "show", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
