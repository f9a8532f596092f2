"""The tensor-parallel host probe on a tp group (executor/tp_host_bench.py): its formula and what it leaves out."""

import dataclasses
import time

import pytest

from executor.compute_grid import tiny_model
from executor.tp_host_bench import TP_PROBE_RANKS, _tp_rank, module_terms, time_tp_group_modules
from simulator.workload.kinds import DtypePolicy
from simulator.workload.registry import load_model

SPEC = dataclasses.replace(tiny_model(load_model("gpt3-125m"), DtypePolicy.FP32, tp=2), dropout=0.0)


def test_module_terms_hand_worked():
    """Two ranks' medians averaged; 10 modules (2 blocks × 4 + embedding + output layer).
    Rank 0: tp forward 4 ms, plain 1 ms; rank 1: tp 5 ms, plain 1 ms → (4.5 − 1) / 10 = 350 µs per module forward.
    Steps: tp 9 / 10 ms, plain 2 ms → (9.5 − 2) / 10 = 750 µs per module, less the forward's 350: 400 µs backward.
    Each tp list also holds 3 calls 1 ms shorter (its 10th percentile lower, the median as above): a p10 would give
    250 / 400 µs, so the test fails if the terms go back to the 10th percentile (tp21)."""
    def rank(tp_fwd_ms, tp_step_ms):
        def calls(ms):
            return [(ms - 1) * 1e-3] * 3 + [ms * 1e-3] * 7
        return {"plain_forward": [1e-3] * 10, "plain_step": [2e-3] * 10, "tp_forward": calls(tp_fwd_ms),
                "tp_step": calls(tp_step_ms), "collectives": [7e-3] * 10}
    t = module_terms(SPEC, [rank(4, 9), rank(5, 10)])
    assert t.modules == 10
    assert t.forward_module_us == pytest.approx(350.0)
    assert t.backward_module_us == pytest.approx(400.0)
    assert t.collectives.median_s == pytest.approx(7e-3)


def test_module_terms_never_negative():
    flat = {"plain_forward": [2e-3], "plain_step": [5e-3], "tp_forward": [1e-3], "tp_step": [3e-3],
            "collectives": [0.0]}
    t = module_terms(SPEC, [flat])
    assert (t.forward_module_us, t.backward_module_us) == (0.0, 0.0)


def test_collective_time_is_left_out(monkeypatch):
    """On torch's fake 2-rank group, with a clock that only moves inside the functional collectives (1 s per call),
    the tp model's forward and step come out 0 and the collectives hold every second: the probe subtracts exactly
    what the executor's TpClock counts. Without the subtraction the tp forward would be its calls' seconds."""
    import torch.distributed._functional_collectives as funcol

    from executor.fsdp2_host_bench import fake_group

    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    for name in ("all_reduce", "all_gather_single", "reduce_scatter_single"):
        original = getattr(funcol, name)

        def ticking(*args, _original=original, **kwargs):
            now[0] += 1.0
            return _original(*args, **kwargs)
        monkeypatch.setattr(funcol, name, ticking)
    with fake_group(TP_PROBE_RANKS):
        out = _tp_rank(0, TP_PROBE_RANKS, SPEC, 2, repeats=2, warmup=1, seed=0)
    assert out["tp_forward"] == [0.0, 0.0] and out["tp_step"] == [0.0, 0.0]
    assert out["plain_forward"] == [0.0, 0.0]
    # forward: the embedding's and 2 per block's all-reduces, the logits' all-gather; backward: 2 per block and the
    # output layer's input gradient (executor.strategies.tensor, executor.model.project_logits)
    assert out["collectives"] == [11.0, 11.0]


def test_probe_runs_on_a_real_tp_group():
    """Two gloo processes: collectives ran (a 1-rank mesh issues none), the terms follow the formula, and the AdamW
    steps of both models were timed."""
    t = time_tp_group_modules(SPEC, 2, repeats=3, warmup=1, thread_count=1)
    assert t.modules == 10 and t.collectives is not None and t.collectives.p10_s > 0
    assert t.forward_module_us == pytest.approx(max(0.0, (t.tp_forward.median_s - t.plain_forward.median_s) / 10 * 1e6))
    assert t.forward_module_us + t.backward_module_us == pytest.approx(
        max(t.forward_module_us, (t.tp_step.median_s - t.plain_step.median_s) / 10 * 1e6))
    # the same launch's AdamW steps (val31): both models stepped, the tp model's 17 DTensor tensors counted
    opt = t.optimizer
    assert opt is not None and (opt.plain_params, opt.tp_params, opt.dtensor_tensors) == (109_312, 55_616, 17)
    assert min(opt.plain.median_s, opt.tp.median_s, opt.plain_cpu.median_s, opt.tp_cpu.median_s) > 0
