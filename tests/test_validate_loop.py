"""validate compares the optimizer with ``optimizer.step()`` alone: the per-step host terms the estimate charges with
its optimizer (the loop's ``step_loop_us`` and cold first forward, torch's pipeline runtime's per-step actions) are
compared where the executor's phase clocks put them — outside every phase, and the cold first forward inside
``forward``; likewise the runtime's per-action time and p2p posts the estimate charges in forward and backward go to
outside-phases and pp (simulator/validate_phases.py, ``loop_moves``; val32). The recorded pp-dp run (4 processes on
2 cores: core share 2) on the suite's cluster with the host fields stated by hand."""

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.results import Category
from simulator.run_results import load_results
from simulator.validate import compare, estimate_compiled, run_cluster, validate

DATA = Path(__file__).parent / "data" / "suite_default"
LOOP_US, COLD_US, ACTION_US, POST_US = 400.0, 100.0, 50.0, 30.0


def _case(case: str):
    results = load_results(DATA / f"{case}.results.json")
    cluster = run_cluster(results, str(DATA / "cluster.yaml"))
    host = replace(cluster.node.host, step_loop_us=LOOP_US, first_microbatch_cold_us=COLD_US,
                   pipeline_action_us=ACTION_US, pipeline_p2p_post_us=POST_US, rank_jitter_sd_fraction=0.0)
    cluster = replace(cluster, node=replace(cluster.node, host=host))
    return results, cluster


def test_pp_dp_loop_is_compared_outside_the_optimizer():
    """Hand-worked: share 2 (4 ranks, 2 cores), one stage per rank, m = 2. Per step: outside (400 + 3 · 50) · 2 =
    1,100 µs and the cold forward 100 · 2 = 200 µs out of the optimizer; per forward (and backward) of a chunk 2
    actions (compute and one send or receive) · 50 · 2 = 200 µs out to outside, 1 post · 30 · 2 = 60 µs out to pp.
    So optimizer −1,300, forward +200 − 2 · 260, backward −2 · 260, pp +2 · 2 · 60, outside +1,100 + 2 · 2 · 200 µs;
    the step row does not move. Fails if the loop or the runtime is compared inside the wrong phase again."""
    results, cluster = _case("pp-dp")
    work, analytical, des = estimate_compiled(results, cluster)
    assert (work.layout.pp, work.layout.dp, work.layout.v, work.micro_batches) == (2, 2, 1, 2)
    for stage in work.stages:
        assert stage.loop_outside_s == pytest.approx(1100e-6, rel=1e-12)
        assert stage.loop_forward_s == pytest.approx(200e-6, rel=1e-12)
        (chunk,) = stage.chunks
        assert (chunk.runtime_outside_s, chunk.runtime_post_s) == (pytest.approx(200e-6), pytest.approx(60e-6))
    v = validate(results, cluster)
    expected = {"optimizer": -1300e-6, "forward": 200e-6 - 520e-6, "backward": -520e-6, "pp": 240e-6}
    for est, engine in ((analytical, "analytical"), (des, "des")):
        b = est.breakdown
        assert getattr(v.row("step_time_s"), engine) == est.step_time_s
        for name, moved in expected.items():
            assert getattr(v.row(name), engine) == pytest.approx(b[Category(name)] + moved, rel=1e-9), name
        outside = est.step_time_s - sum(b.values())
        assert getattr(v.row("outside_phases"), engine) == pytest.approx(outside + 1900e-6, rel=1e-9, abs=1e-12)
        # nothing is counted twice or lost: the rows still hold the estimate's whole step
        rows = sum(getattr(r, engine) for r in v.rows if r.unit == "s" and r.name != "step_time_s")
        assert rows == pytest.approx(est.step_time_s, rel=1e-9)
        assert min(getattr(v.row(n), engine) for n in expected) > 0


def test_the_estimate_itself_does_not_move():
    """The moves are the validation's: the compiled optimizer still holds the loop (the engines place it there in
    time), and ``compare`` without them prints the estimate's own categories."""
    results, cluster = _case("pp-dp")
    work, analytical, des = estimate_compiled(results, cluster)
    plain = compare(results, analytical, des, cluster.name)
    assert plain.row("optimizer").analytical == analytical.breakdown[Category.OPTIMIZER]
    stage = work.stages[0]
    assert stage.optimizer_s > stage.loop_outside_s + stage.loop_forward_s


def test_a_plain_ddp_run_moves_the_loop_alone():
    """2 ranks on 2 cores (share 1), no pipeline: outside 400 µs, forward 100 µs; no runtime part in any chunk."""
    results, cluster = _case("ddp-overlap")
    work, analytical, _ = estimate_compiled(results, cluster)
    assert work.stages[0].loop_outside_s == pytest.approx(400e-6, rel=1e-12)
    assert work.stages[0].loop_forward_s == pytest.approx(100e-6, rel=1e-12)
    assert all(ch.runtime_outside_s == ch.runtime_post_s == 0.0 for ch in work.stages[0].chunks)
    v = validate(results, cluster)
    assert v.row("optimizer").analytical == pytest.approx(analytical.breakdown[Category.OPTIMIZER] - 500e-6, rel=1e-9)


def test_a_parameter_server_worker_times_its_loop_in_forward():
    """The worker's ``_work`` starts its forward timer before the batch and the gradient reset: the whole loop moves
    to forward, nothing to outside."""
    from simulator.validate_phases import loop_moves

    results, cluster = _case("ps-sync")
    work, _, _ = estimate_compiled(results, cluster)
    moves = loop_moves(work)
    assert moves.get("outside_phases", 0.0) == 0.0
    assert moves["forward"] == pytest.approx(500e-6, rel=1e-12) == -moves["optimizer"]  # (400 + 100) µs, share 1
