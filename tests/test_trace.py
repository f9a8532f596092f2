"""Chrome-trace JSON and Gantt PNG of a timeline (hand-built 1F1B timelines; no engine needed)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from simulator.errors import SpecError
from simulator.results import Category
from simulator.trace import (action_spans, category_of, chrome_trace_events, gantt, gantt_figure, pick_ranks, rank_label,
                             to_chrome_trace)
from timeline_fixtures import T_BWD_S, T_FWD_S, one_f_one_b_timeline

P, M = 4, 8


def _load(path):
    data = json.loads(path.read_text())
    return data["traceEvents"]


def test_trace_is_valid_json_with_processes_tracks_and_events(tmp_path):
    timeline = one_f_one_b_timeline(P, M)
    events = _load(to_chrome_trace(timeline, tmp_path / "t.json"))
    complete = [e for e in events if e["ph"] == "X"]
    # per rank: 2m compute + 2m tp + 1 dp (see timeline_fixtures)
    assert len(complete) == len(timeline) == P * (4 * M + 1)
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {r: f"rank {r} (stage {r})" for r in range(P)}
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {(r, s) for r in range(P) for s in ("compute", "tp", "dp")}
    compute_tid = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
                   and e["args"]["name"] == "compute"}
    assert compute_tid == {0}  # compute is the first track


def test_trace_times_are_microseconds_and_args_carry_microbatch(tmp_path):
    events = _load(to_chrome_trace(one_f_one_b_timeline(P, M), tmp_path / "t.json"))
    first_fwd = next(e for e in events if e["ph"] == "X" and e["name"] == "0F0")
    assert first_fwd["ts"] == 0.0 and first_fwd["dur"] == pytest.approx(T_FWD_S * 1e6)
    assert first_fwd["cat"] == "forward" and first_fwd["args"] == {"microbatch": 0, "stage": 0}
    last_bwd = next(e for e in events if e["ph"] == "X" and e["name"] == f"0B{M - 1}")
    assert last_bwd["dur"] == pytest.approx(T_BWD_S * 1e6)
    dp = [e for e in events if e["ph"] == "X" and e["cat"] == "dp"]
    assert all("microbatch" not in e["args"] for e in dp)  # None micro-batch is left out, not written as null


def test_trace_1f1b_order_on_last_stage_alternates():
    """On the last stage of 1F1B every forward is followed at once by its backward (F0 B0 F1 B1 ...)."""
    events = chrome_trace_events(one_f_one_b_timeline(P, M))
    last = sorted((e for e in events if e["ph"] == "X" and e["pid"] == P - 1 and e["tid"] == 0), key=lambda e: e["ts"])
    assert [e["name"] for e in last[:4]] == [f"{P - 1}F0", f"{P - 1}B0", f"{P - 1}F1", f"{P - 1}B1"]


def test_category_values_as_strings_work_too():
    a = chrome_trace_events(one_f_one_b_timeline(2, 2))
    b = chrome_trace_events(one_f_one_b_timeline(2, 2, category_as_value=True))
    assert a == b


def test_interleaved_rank_label_lists_chunks():
    assert rank_label(1, [1, 5]) == "rank 1 (stages 1, 5)"
    assert rank_label(0, []) == "rank 0"


def test_missing_columns_and_unknown_category_are_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="missing columns"):
        to_chrome_trace(pd.DataFrame({"rank": [0]}), tmp_path / "x.json")
    with pytest.raises(SpecError, match="--engine des"):
        to_chrome_trace(None, tmp_path / "x.json")
    with pytest.raises(SpecError, match="unknown category"):
        category_of("nap")
    assert category_of("DP") is Category.DP


def test_pick_ranks_spreads_and_keeps_ends():
    assert pick_ranks(list(range(10)), 16) == list(range(10))
    chosen = pick_ranks(list(range(1024)), 16)
    assert len(chosen) == 16 and chosen[0] == 0 and chosen[-1] == 1023
    assert chosen == sorted(chosen)


def test_gantt_png_written(tmp_path):
    path = gantt(one_f_one_b_timeline(P, M), tmp_path / "g.png", title="1F1B p=4 m=8")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_gantt_figure_leaves_pyplot_and_the_backend_alone():
    # A library drawing must not switch the process's backend (matplotlib.use) nor open pyplot figures:
    # a notebook displays the returned Figure itself.
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    backend, open_figures = matplotlib.get_backend(), plt.get_fignums()
    fig = gantt_figure(one_f_one_b_timeline(P, M), title="1F1B p=4 m=8")
    assert isinstance(fig, Figure) and fig.axes[0].get_title() == "1F1B p=4 m=8"
    assert matplotlib.get_backend() == backend and plt.get_fignums() == open_figures
    # 4 ranks x (compute, tp, dp) rows, compute first (see timeline_fixtures)
    assert len(fig.axes[0].get_yticks()) == 3 * P


def test_gantt_many_ranks_limited(tmp_path):
    frames = []
    for block in range(10):  # 40 ranks: ten copies of a 4-stage pipeline
        f = one_f_one_b_timeline(P, 2)
        f["rank"] += block * P
        frames.append(f)
    path = gantt(pd.concat(frames, ignore_index=True), tmp_path / "g.png", max_ranks=6)
    assert path.stat().st_size > 5_000


def test_action_spans_merge_layer_pieces():
    """An engine may time one forward layer by layer: pieces of one action on one row become one span."""
    frame = pd.DataFrame({"_row": [0, 0, 0, 0, 1], "name": ["0F0", "0F0", "0B0", "0F0", "0F0"],
                          "_cat": [Category.FORWARD, Category.FORWARD, Category.BACKWARD, Category.FORWARD,
                                   Category.FORWARD],
                          "start_s": [0.0, 1.5, 3.0, 5.0, 0.0], "end_s": [1.0, 2.5, 4.0, 6.0, 1.0],
                          "microbatch": [0, 0, 0, 0, 0]})
    spans = action_spans(frame)
    assert list(zip(spans["_row"], spans["start_s"], spans["end_s"])) == [
        (0, 0.0, 2.5), (0, 3.0, 4.0), (0, 5.0, 6.0), (1, 0.0, 1.0)]  # a later 0F0 (next step) stays apart


def test_trace_of_a_des_timeline(tmp_path):
    """The DES's own timeline (compiled work, 2 stages x 2 tp x 2 dp): one process per simulated rank."""
    from simulator.cluster.io import load_cluster
    from simulator.compile import compile_step
    from simulator.engine.step import simulate
    from simulator.strategy import AllReduceSync, Strategy
    from simulator.workload import load_model

    cluster = load_cluster("dgx-h100")
    strategy = Strategy(global_batch=8, dp=2, tp=2, pp=2, dp_sync=AllReduceSync(bucket_bytes=1 << 24))
    work = compile_step(cluster, load_model("gpt3-125m"), strategy, memory=False)
    timeline = simulate(work, cluster).timeline
    events = _load(to_chrome_trace(timeline, tmp_path / "des.json"))
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(processes.values()) == ["rank 0 (stage 0)", "rank 2 (stage 1)"]
    assert sum(e["ph"] == "X" for e in events) == len(timeline)
    assert gantt(timeline, tmp_path / "des.png").stat().st_size > 5_000
