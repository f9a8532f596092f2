"""The step after the run's results rewrite (executor/step_save_bench.py, ``host.step_after_save_us``).

Hand-worked: ranks' steps of 3.40 / 3.60 ms after the rewrite and 3.00 / 3.30 ms after none give
mean(3.40, 3.60) − mean(3.00, 3.30) = 0.35 ms = 350 µs; a step faster after the rewrite gives 0, not a negative field.
The rewrite is the run's own (``Results.save`` of a suite-shaped file): it writes what a recorded run wrote, with the
same keys, phases and steps kept; two gloo ranks run the interleaved probe."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from executor.compute_bench import Timing
from executor.compute_grid import executed, tiny_model
from executor.step_save_bench import (SAVE_PROBE_STEPS, SaveStepTiming, _Mirror, save_steps_dict, save_steps_line,
                                      time_save_steps, with_step_save)
from simulator.cluster.io import load_cluster
from simulator.run_results import RunStatus, load_results
from simulator.workload import DtypePolicy, load_model

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "data" / "suite_default" / "ddp-overlap.results.json"


def _t(ms: float) -> Timing:
    return Timing(median_s=ms * 1e-3, p10_s=ms * 1e-3, p90_s=ms * 1e-3)


def _saved(after=(3.40, 3.60), plain=(3.00, 3.30)) -> SaveStepTiming:
    return SaveStepTiming(processes=2, after_save=tuple(map(_t, after)), plain=tuple(map(_t, plain)), save=_t(20.0))


def test_the_term_is_the_mean_excess_of_the_step_after_the_rewrite():
    assert _saved().step_after_save_us == pytest.approx(350.0, rel=1e-9)
    assert _saved(after=(2.9, 3.0)).step_after_save_us == 0.0
    assert "350.0 us per step" in save_steps_line(_saved())
    assert save_steps_dict(_saved())["step_after_save_us"] == pytest.approx(350.0) and save_steps_dict(None) is None


def test_the_writer_sets_only_its_field():
    node = load_cluster("localhost-cpu").node
    written = with_step_save(node, _saved())
    assert written.host.step_after_save_us == pytest.approx(350.0)
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
