"""The text report of a StepResult (hand-built results; no engine needed)."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.report import MAX_RANK_ROWS, format_step
from simulator.results import Category, Engine, StepResult
from timeline_fixtures import step_result


def test_headline_numbers():
    """3 s step, 16 384 tokens: 5 461 tokens/s; MFU = 6e15 / (3 · 16 · 312e12) = 40.1 %; HFU 8e15/... = 53.4 %."""
    text = format_step(step_result())
    first = text.splitlines()[0]
    assert first == "engine des: step 3.000 s, 5,461 tokens/s, MFU 40.1 %, HFU 53.4 %"
    assert "16 GPUs, 16,384 tokens/step" in text


def test_breakdown_has_percent_of_step_and_total():
    lines = format_step(step_result()).splitlines()
    fwd = next(line for line in lines if line.strip().startswith("forward"))
    assert fwd.split()[-2:] == ["26.7", "%"]  # 0.8 / 3.0
    dp = next(line for line in lines if line.strip().startswith("dp"))
    assert "(exposed)" in dp and dp.split()[-2:] == ["3.3", "%"]
    total = next(line for line in lines if line.strip().startswith("total"))
    assert total.split()[-2:] == ["100.0", "%"]
    assert not any(line.strip().startswith("recompute") for line in lines)  # zero categories are left out
    assert not any("note: categories sum" in line for line in lines)


def test_breakdown_mismatch_is_reported():
    r = step_result()
    broken = StepResult(**{**r.__dict__, "breakdown": {Category.FORWARD: 1.0}})
    assert "note: categories sum to 1 s, the step is 3 s" in format_step(broken)


def test_per_rank_table_columns_and_rows():
    text = format_step(step_result())
    header = next(line for line in text.splitlines() if line.strip().startswith("rank"))
    assert header.split() == ["rank", "stage", "forward", "backward", "tp", "dp", "bubble", "total"]
    row3 = next(line for line in text.splitlines() if line.split()[:2] == ["3", "3"])
    assert float(row3.split()[-1]) == pytest.approx(0.8 + 1.6 + 0.2 + 0.07 + 0.3)


def test_per_rank_table_is_capped():
    r = step_result()
    many = pd.DataFrame([dict(rank=i, stage=0, forward=1.0) for i in range(40)])
    text = format_step(StepResult(**{**r.__dict__, "per_rank": many}))
    assert f"... {40 - MAX_RANK_ROWS} more rank(s)" in text


def test_memory_line_without_memory_model():
    assert "memory: not modelled for this workload" in format_step(step_result())


def test_memory_line_from_memory_report():
    from simulator.cluster.io import load_cluster
    from simulator.memory import memory_report
    from simulator.strategy import Strategy
    from simulator.workload import load_model

    report = memory_report(load_model("gpt3-125m"), load_cluster("dgx-a100"), Strategy(global_batch=8, dp=8))
    r = step_result()
    text = format_step(StepResult(**{**r.__dict__, "memory": report}))
    assert "memory: most loaded rank (stage 0)" in text and "of 80.0 GB" in text and "memory: fits" in text
    assert "; peak allocated " in text and ", reserved " in text


def test_extras_goodput_time_to_train_and_staleness():
    text = format_step(step_result(goodput=0.934, time_to_train_s=2 * 86400.0,
                                   staleness={0: [0, 1, 2, 1], 1: [0, 0]}, restarts=3))
    assert "goodput: 93.4 %" in text
    assert "expected time to train: 172,800 s (2.00 days)" in text
    assert any(line.split() == ["worker", "0", "1.00", "2"] for line in text.splitlines())
    assert "engine notes: restarts 3" in text


def test_staleness_as_a_flat_list():
    text = format_step(step_result(staleness=[0, 1, 1, 3]))
    assert "gradient staleness (steps): mean 1.25, median 1, max 3 over 4 updates" in text


def test_analytical_result_without_per_rank():
    r = step_result(Engine.ANALYTICAL, with_timeline=False)
    text = format_step(StepResult(**{**r.__dict__, "per_rank": None}))
    assert text.startswith("engine analytical:") and "per rank" not in text


def test_staleness_summary_shape():
    """The DES's summary form: per worker, a histogram, mean and max."""
    summary = {"per_worker": {"0": [0, 1, 1], "1": [2, 2]}, "histogram": {"0": 1, "1": 2, "2": 2},
               "mean": 1.2, "max": 2}
    lines = format_step(step_result(staleness=summary)).splitlines()
    assert ["worker", "1", "2.00", "2"] in [line.split() for line in lines]
    assert "  histogram (staleness: updates): 0: 1, 1: 2, 2: 2" in lines
    assert "  all workers: mean 1.20, max 2" in lines


def test_short_steps_in_milliseconds():
    r = step_result()
    short = StepResult(**{**r.__dict__, "step_time_s": 0.03, "breakdown": {Category.FORWARD: 0.01,
                                                                           Category.BACKWARD: 0.02}})
    lines = format_step(short).splitlines()
    assert lines[0].startswith("engine des: step 30.00 ms")
    assert "ms" in next(line for line in lines if line.startswith("breakdown")).split()
    fwd = next(line for line in lines if line.strip().startswith("forward"))
    assert fwd.split()[:2] == ["forward", "10.0000"]
    assert any(line.startswith("per rank (ms;") for line in lines)
