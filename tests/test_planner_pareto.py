"""``--pareto`` (step time against memory per GPU) and the progress counter on stderr."""

from __future__ import annotations

import io
import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import planner
from planner.result import pareto_mask
from simulator.cluster.io import load_cluster
from simulator.workload import get_preset
from trainplan.__main__ import main
from trainplan.cli_common import Counter

MODEL = get_preset("gpt3-125m").with_seq(512)
CLUSTER = load_cluster("dgx-h100", nodes=1)
ARGV = ["plan", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--seq", "512",
        "--refine", "0"]


def _dominated(i, step, mem):
    return bool(np.any((step <= step[i]) & (mem <= mem[i]) & ((step < step[i]) | (mem < mem[i]))))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=25))
def test_the_front_is_exactly_the_undominated_plans(points):
    step, mem = (np.array(col, dtype=float) for col in zip(*points))
    mask = pareto_mask(step, mem)
    for i in range(len(step)):
        if mask[i]:
            assert not _dominated(i, step, mem)
        else:  # dominated, or a duplicate of a front member
            assert _dominated(i, step, mem) or any(mask[j] and step[j] == step[i] and mem[j] == mem[i]
                                                   for j in range(len(step)))
    assert mask.any()


def test_plan_result_front_and_cli_json(capsys):
    result = planner.plan(MODEL, CLUSTER, gpus=8, global_batch=16, refine=0)
    front = result.pareto()
    assert front.index[0] == 0 and len(front) < len(result.frame)
    assert front["step_time_s"].is_monotonic_increasing and front["memory_bytes"].is_monotonic_decreasing
    assert main([*ARGV, "--pareto", "--json", "--quiet"]) == 0
    rows = json.loads(capsys.readouterr().out)["pareto"]
    assert len(rows) == len(front)
    assert [r["memory"]["total_bytes"] for r in rows] == sorted((r["memory"]["total_bytes"] for r in rows),
                                                                reverse=True)


def test_progress_is_reported_by_phase_and_counter_draws_and_clears():
    seen = []
    planner.plan(MODEL, CLUSTER, gpus=8, global_batch=16, refine=2, progress=lambda *a: seen.append(a))
    assert {p for p, _, _ in seen} >= {"memory", "rank", "refine"}
    assert ("refine", 2, 2) in seen
    stream = io.StringIO()
    counter = Counter(stream)
    counter("rank", 3, 10)
    counter("rank", 10, 10)  # the last one is always drawn
    counter.close()
    text = stream.getvalue()
    assert "\rrank: 3/10" in text and "rank: 10/10" in text and text.endswith("\r")


def test_no_progress_when_stderr_is_not_a_terminal(capsys):
    assert main(ARGV) == 0
    assert "\r" not in capsys.readouterr().err
