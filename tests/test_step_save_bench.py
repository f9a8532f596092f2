"""The step after the run's results rewrite (executor/step_save_bench.py, ``host.step_after_save_us``).

Hand-worked, five steps of each kind per rank, the lower quartile the 2nd of 5 sorted: rank 0 after the rewrite
3.40 3.45 3.50 7.50 7.50 ms → 3.45, after none 3.00 3.00 3.05 3.10 3.10 → 3.00; rank 1 (a ~4 ms tick in 3 of its 5
steps after the rewrite, 1 of 5 after none) 3.60 3.65 7.60 7.60 7.70 → 3.65, 3.30 3.30 3.35 3.40 7.30 → 3.30; the
term mean(0.45, 0.35) ms = 400 µs, where the medians would give mean(0.45, 4.25) = 2,350 µs; a step faster after the
rewrite gives 0, not a negative field.
The rewrite is the run's own (``Results.save`` of a suite-shaped file): it writes what a recorded run wrote, with the
same keys, phases and steps kept; two gloo ranks run the interleaved probe."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from executor.compute_bench import Timing
from executor.compute_grid import executed, tiny_model
from executor.step_save_bench import (SAVE_PROBE_STEPS, SaveStepTiming, _Mirror, median_take, save_moments_text,
                                      save_steps_dict, save_steps_line, save_steps_source, time_save_steps,
                                      with_step_save)
from simulator.cluster.io import load_cluster
from simulator.run_results import RunStatus, load_results
from simulator.workload import DtypePolicy, load_model

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "data" / "suite_default" / "ddp-overlap.results.json"


AFTER = ((3.40, 7.50, 3.45, 7.50, 3.50), (3.60, 7.60, 3.65, 7.70, 7.60))
PLAIN = ((3.00, 3.05, 3.00, 3.10, 3.10), (3.30, 3.35, 7.30, 3.30, 3.40))


def _ms(ranks) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(x * 1e-3 for x in r) for r in ranks)


def _saved(after=AFTER, plain=PLAIN) -> SaveStepTiming:
    return SaveStepTiming(processes=2, after_save_s=_ms(after), plain_s=_ms(plain),
                          save=Timing(median_s=0.02, p10_s=0.02, p90_s=0.02))


def test_the_term_is_the_mean_excess_of_the_fast_mode_after_the_rewrite():
    assert _saved().step_after_save_us == pytest.approx(400.0, rel=1e-9)
    assert _saved(after=PLAIN, plain=AFTER).step_after_save_us == 0.0
    assert "400.0 us per step" in save_steps_line(_saved())
    assert save_steps_dict(_saved())["step_after_save_us"] == pytest.approx(400.0) and save_steps_dict(None) is None
    assert [t.median_s for t in _saved().after_save] == pytest.approx([3.50e-3, 7.60e-3])  # what the median read


def test_the_take_written_is_the_median_of_the_moments():
    """Three takes (probe17): 400 µs (the hand-worked one), 0 µs (after swapped with plain) and 350 µs (flat, 3.4 vs
    3.0 and 3.6 vs 3.3 ms): the one written is the 350 µs take, the middle; the source text gives every take."""
    flat = _saved(after=((3.4,) * 5, (3.6,) * 5), plain=((3.0,) * 5, (3.3,) * 5))
    takes = [_saved(), _saved(after=PLAIN, plain=AFTER), flat]
    assert median_take(takes) is flat and median_take(takes[::-1]) is flat
    assert median_take(takes[:1]) is takes[0]
    assert save_moments_text(takes) == ("; taken at 3 moments, the median written (executor.calibrate_moments): "
                                        "350 us (moments 400, 0, 350; min..max 0..400)")
    assert save_moments_text(takes[:1]) == ""


def test_the_spread_is_a_seeded_bootstrap_around_the_term():
    low, high = _saved().spread_us
    assert low <= 400.0 <= high and (low, high) == _saved().spread_us  # the same steps, the same spread
    flat = _saved(after=((3.4,) * 5, (3.6,) * 5), plain=((3.0,) * 5, (3.3,) * 5))
    assert flat.spread_us == pytest.approx((350.0, 350.0))  # nothing to resample: no spread
    assert save_steps_dict(_saved())["step_after_save_p10_p90_us"] == [low, high]
    assert f"bootstrap p10..p90 {low:.0f}..{high:.0f}" in save_steps_source(_saved())


def test_the_writer_sets_only_its_field():
    node = load_cluster("localhost-cpu").node
    written = with_step_save(node, _saved())
    assert written.host.step_after_save_us == pytest.approx(400.0)
    assert written == dataclasses.replace(node, host=dataclasses.replace(node.host, step_after_save_us=written.host
                                                                         .step_after_save_us))
    assert with_step_save(node, None) is node
    assert with_step_save(dataclasses.replace(node, host=None), _saved()).host is None


def _record(k: int) -> dict:
    return {"t": 0.004 + k * 1e-6, "loss": 4.8, "phases": {"forward": 0.001, "backward": 0.001, "optimizer": 0.0006}}


def test_the_rewrite_writes_what_a_run_writes(tmp_path):
    mirror = _Mirror(str(tmp_path / "r.json"), 2)
    for k in range(SAVE_PROBE_STEPS + 5):
        mirror.save([_record(k), _record(k)])
    assert len(mirror.seconds) == SAVE_PROBE_STEPS + 5
    saved = load_results(tmp_path / "r.json")
    assert saved.status is RunStatus.RUNNING and len(saved.ranks) == 2
    assert saved.completed_steps == SAVE_PROBE_STEPS  # the last 24 records, as the suite's largest file
    assert saved.ranks[0].step_time_s[-1] == pytest.approx(_record(SAVE_PROBE_STEPS + 4)["t"])
    recorded = json.loads(RECORDED.read_text())
    mine = json.loads((tmp_path / "r.json").read_text())
    assert mine.keys() == recorded.keys() and mine["run"].keys() == recorded["run"].keys()
    assert set(mine["ranks"][0]["phases_s"]) <= set(recorded["ranks"][0]["phases_s"])  # dp: the run's own clock
    keys = ("global_batch", "micro_batch", "dp", "tp", "pp", "zero", "overlap_grad_reduce", "recompute")
    assert [mine["run"]["plan"]["strategy"][k] for k in keys] == [recorded["run"]["plan"]["strategy"][k] for k in keys]
    assert mine["run"]["plan"]["model"] == recorded["run"]["plan"]["model"]  # the ddp-overlap case at --scale tiny


def test_two_ranks_interleave_the_steps_after_a_rewrite_and_after_none():
    spec = executed(tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32))
    t = time_save_steps(spec, 2, repeats=3, warmup=1)
    assert t.processes == 2 and len(t.after_save) == len(t.plain) == 2
    assert all(x.p10_s <= x.median_s <= x.p90_s and x.median_s > 0 for x in t.after_save + t.plain + (t.save,))
    assert t.step_after_save_us >= 0.0
