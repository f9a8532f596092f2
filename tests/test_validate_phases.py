"""validate's rows compare like with like: FSDP2's all-gathers and reduce-scatters, which the executor's phase clock
times inside ``forward`` and ``backward`` (executor/strategies/data_parallel.py ``phase_notes``), are compared there,
not left in the estimate's ``zero`` category (simulator/validate_phases.py). Recorded default-suite runs on gloo,
where every FSDP2 call blocks the compute thread, so each phase's share is exactly its calls' seconds."""

from pathlib import Path

import pytest

from simulator.results import Category
from simulator.run_results import load_results
from simulator.validate import compare, estimate_compiled, run_cluster, validate
from simulator.validate_phases import folded_categories

DATA = Path(__file__).parent / "data" / "suite_default"


def _estimate(case: str):
    results = load_results(DATA / f"{case}.results.json")
    cluster = run_cluster(results, str(DATA / "cluster.yaml"))
    return results, cluster, estimate_compiled(results, cluster)


@pytest.mark.parametrize("case, gathers_fwd, calls_bwd", [("zero2", 3, 3), ("zero3", 3, 6), ("zero3-offload", 3, 6)])
def test_fsdp2_calls_are_compared_inside_forward_and_backward(case, gathers_fwd, calls_bwd):
    """Per micro-batch: an all-gather per block and the root's before forward; under ZeRO-3 the same again before
    backward, then a reduce-scatter each. Forward's row is the estimate's forward plus the micro-batches' forward
    all-gathers; backward's row its
    backward plus the re-gathers (ZeRO-3 only) and reduce-scatters; together they hold the whole ``zero`` time."""
    results, cluster, (work, analytical, des) = _estimate(case)
    (chunk,) = work.stages[0].chunks
    assert (len(chunk.zero_fwd), len(chunk.zero_bwd), chunk.zero_prefetch_calls) == (gathers_fwd, calls_bwd, 0)
    m = work.micro_batches  # 2: 12 calls per step under ZeRO-2, 18 under ZeRO-3 (tests/test_fsdp2_wait.py)
    assert m == 2
    fwd_calls_s, bwd_calls_s = m * sum(c.time_s for c in chunk.zero_fwd), m * sum(c.time_s for c in chunk.zero_bwd)
    v = validate(results, cluster)
    for estimate, engine in ((analytical, "analytical"), (des, "des")):
        zero = estimate.breakdown[Category.ZERO]
        assert zero == pytest.approx(fwd_calls_s + bwd_calls_s, rel=1e-9)
        forward, backward = getattr(v.row("forward"), engine), getattr(v.row("backward"), engine)
        assert forward == pytest.approx(estimate.breakdown[Category.FORWARD] + fwd_calls_s, rel=1e-9)
        assert backward == pytest.approx(estimate.breakdown[Category.BACKWARD] + bwd_calls_s, rel=1e-9)
    assert v.row("zero") is None  # the executor measures no phase of its own for them


def test_without_folds_the_calls_stay_out_of_the_phases():
    """``compare`` without the compiled step's folds compares each phase with its own category only: the forward row
    is then short by every forward all-gather (what `trainplan validate` printed before the folds)."""
    results, cluster, (work, analytical, des) = _estimate("zero3")
    plain = compare(results, analytical, des, cluster.name)
    folded = compare(results, analytical, des, cluster.name, folded_categories(work))
    assert plain.row("forward").analytical == analytical.breakdown[Category.FORWARD]
    assert folded.row("forward").analytical > plain.row("forward").analytical
    assert folded.row("optimizer").analytical == plain.row("optimizer").analytical


@pytest.mark.parametrize("case", ["ddp-overlap", "tp", "pp-1f1b"])
def test_other_families_fold_nothing(case):
    """No FSDP2 call, no ZeroRedundancyOptimizer: every phase row is its own category."""
    results, cluster, (work, analytical, des) = _estimate(case)
    assert folded_categories(work) == {}
