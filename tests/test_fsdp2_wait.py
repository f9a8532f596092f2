"""``comm.fsdp2_wait_us``: the wait for a core of FSDP2's blocking gloo calls measured inside the FSDP2 models
(simulator/cluster/fsdp2_wait.py, read by both engines through the compiled calls), and the calibration's probe's
arithmetic (executor/calibrate_fsdp2.py)."""

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.cluster.fsdp2_wait import fsdp2_call_s, fsdp2_wait_s
from simulator.cluster.io import load_cluster, save_cluster
from simulator.collectives.base import Op
from simulator.errors import SpecError

_CPU = load_cluster("localhost-cpu")
DATA = Path(__file__).parent / "data" / "suite_default"
OP_WAITS = ((Op.ALL_GATHER, ((2, 1148.0), (4, 3189.0))), (Op.ALL_REDUCE, ((2, 1187.0), (4, 4141.0))))


def _cpu(p: int, fsdp2=((2, 2000.0),)):
    return replace(_CPU, node=replace(_CPU.node, gpus_per_node=p),
                   comm=replace(_CPU.comm, op_wait_us=OP_WAITS, fsdp2_wait_us=fsdp2))


def test_call_swaps_its_wait_hand_worked():
    """An all-gather of the pair on 2 processes estimated at 1,441 µs with its sweep wait 1,148 µs and W_fsdp2(2) =
    2,000 µs costs 1,441 − 1,148 + 2,000 = 2,293 µs; a reduce-scatter waits as gloo's all-reduce: 1,670 − 1,187 +
    2,000 = 2,483 µs."""
    c = _cpu(2)
    assert fsdp2_call_s(c, Op.ALL_GATHER, 2, 1441e-6) * 1e6 == pytest.approx(2293.0)
    assert fsdp2_call_s(c, Op.REDUCE_SCATTER, 2, 1670e-6) * 1e6 == pytest.approx(2483.0)


def test_where_the_measured_wait_applies():
    """At the measured count (and the line between counts); above the largest measured count, for groups other than
    pairs, with no table or on a GPU cluster: None, and the call keeps its estimate."""
    assert fsdp2_wait_s(_cpu(3, ((2, 2000.0), (4, 3000.0))), 2) * 1e6 == pytest.approx(2500.0)
    assert fsdp2_wait_s(_cpu(4), 2) is None
    assert fsdp2_wait_s(_cpu(2), 4) is None
    assert fsdp2_wait_s(_cpu(2, ()), 2) is None
    assert fsdp2_call_s(_cpu(4), Op.ALL_GATHER, 2, 5e-3) == 5e-3
    gpu = load_cluster("dgx-h100")
    assert fsdp2_wait_s(replace(gpu, comm=replace(gpu.comm, fsdp2_wait_us=((8, 5000.0),))), 2) is None


@pytest.mark.parametrize("case, moves", [("zero2", True), ("zero3", True), ("zero3-offload", True), ("zero1", False),
                                         ("tp", False), ("ddp-overlap", False)])
def test_engines_move_together_and_only_fsdp2_calls(case, moves):
    """Recorded runs: W_fsdp2(2) 1 ms above both sweep waits lengthens each of zero2's 12 and zero3's 18 calls per step
    by 1 ms in both engines, forward and backward (where the executor times the calls) move by their calls' change
    and the optimizer does not; zero1 (ZeroRedundancyOptimizer), tp and DDP have no FSDP2 call and do not move."""
    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate

    results = load_results(DATA / f"{case}.results.json")
    base = run_cluster(results, str(DATA / "cluster.yaml"))
    base = replace(base, comm=replace(base.comm, op_wait_us=OP_WAITS, blocking_wait_us=((2, 1150.0), (4, 3700.0))))
    measured = replace(base, comm=replace(base.comm, fsdp2_wait_us=((2, 1148.0 + 1000.0),)))
    before, after = (validate(results, c) for c in (base, measured))
    step0, step1 = before.row("step_time_s"), after.row("step_time_s")
    if not moves:
        assert (step1.analytical, step1.des) == (step0.analytical, step0.des)
        return
    calls = {"zero2": 12, "zero3": 18, "zero3-offload": 18}[case]
    # the all-gathers' sweep wait is 1,148 µs (+1,000 µs); the reduce-scatters' 1,187 (+961 µs)
    reduce_scatters = {"zero2": 6, "zero3": 6, "zero3-offload": 6}[case]
    expected = (calls - reduce_scatters) * 1000e-6 + reduce_scatters * 961e-6
    assert step1.analytical - step0.analytical == pytest.approx(expected, rel=0.01)
    assert step1.des - step0.des == pytest.approx(expected, rel=0.02)
    # the calls are compared inside the phases that time them (simulator/validate_phases.py): forward holds the
    # 6 forward all-gathers, backward the rest; the optimizer does not move
    moved = {name: after.row(name).analytical - before.row(name).analytical for name in ("forward", "backward")}
    assert moved["forward"] == pytest.approx(6 * 1000e-6, rel=0.01)
    assert moved["forward"] + moved["backward"] == pytest.approx(expected, rel=0.01)
    assert after.row("optimizer").analytical == before.row("optimizer").analytical


def test_file_round_trip_show_and_bad_values(tmp_path, capsys):
    import yaml

    from trainplan.__main__ import main

    path = save_cluster(_cpu(2, ((2, 2012.5),)), tmp_path / "c.yaml")
    assert load_cluster(str(path)).comm.fsdp2_wait_us == ((2, 2012.5),)
    assert main(["cluster", "show", str(path)]) == 0
    assert "wait per FSDP2 call 2012.5 µs at 2 processes" in capsys.readouterr().out
    d = yaml.safe_load(path.read_text())
    d["comm"]["fsdp2_wait_us"] = {2: -1.0}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError, match="fsdp2_wait_us"):
        load_cluster(str(bad))
    assert main(["cluster", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "comm.fsdp2_wait_us" in err and len(err.strip().splitlines()) == 1, err


def test_without_waits_drops_it():
    from executor.calibrate_modes import without_waits

    assert without_waits(_cpu(2)).comm.fsdp2_wait_us == ()


def test_probe_arithmetic_hand_worked():
    """The probe's W: mean over ranks, models and iterations of seconds / calls less the mean fast estimate of the
    model's listed calls; a count that differs from the estimate's list writes nothing."""
    from executor.calibrate_fsdp2 import MICRO_BATCHES, fsdp2_waits_us, listed_calls

    fitted = _cpu(2, ())
    n3, n2 = (MICRO_BATCHES * len(listed_calls(fitted, z)) for z in (3, 2))
    assert (n3, n2) == (18, 12)  # FSDP2's counted calls per zero3 / zero2 step (docs/validation.md, fsdp16)
    fast = {z: sum(c.time_s for c in listed_calls(fitted, z)) / len(listed_calls(fitted, z)) for z in (3, 2)}
    rank = {3: ([n3 * (fast[3] + 2e-3)] * 2, [n3] * 2), 2: ([n2 * (fast[2] + 1e-3)] * 2, [n2] * 2)}
    assert fsdp2_waits_us(fitted, [rank, rank])[2] == pytest.approx(1500.0)
    short = {3: rank[3], 2: ([1.0], [n2 - 1])}
    assert fsdp2_waits_us(fitted, [rank, short]) == {}
