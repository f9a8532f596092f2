"""Plan quality against published expert layouts (issue 8 §6; benchmarks/expert_layouts.py runs the
whole space and docs/planner.md records it): the planner's best is estimated at least as fast as
the expert layout, and ``--explain --against`` says where they differ, with numbers.

The searches here are narrowed by pins that keep the expert layout inside the space (so that a
ranking that missed it would fail), to keep the test short."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import planner
from simulator.schedules import ScheduleKind
from simulator.strategy import Recompute, ZeroStage
from trainplan.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("expert_layouts", ROOT / "benchmarks" / "expert_layouts.py")
experts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(experts)
CASES = {label: case for label, *case in experts.EXPERTS}

NARROW = {
    "Megatron-LM GPT-3 175B, 1F1B": {"tp": (4, 8), "pp": (8, 16), "micro_batch": (1,), "zero": (ZeroStage.ZERO0,
             ZeroStage.ZERO1), "schedule": (ScheduleKind.ONE_F_ONE_B,), "recompute": (Recompute.NONE, Recompute.FULL)},
    "torchtitan Llama 3.1 8B FSDP": {"tp": (1, 2), "pp": (1,), "zero": (ZeroStage.ZERO3,)},
}


@pytest.mark.parametrize("label", sorted(NARROW))
def test_the_planner_is_at_least_as_fast_as_the_expert_layout(label):
    r = experts.compare(label, *CASES[label], pins=NARROW[label])
    assert r["best_s"] <= r["expert_s"] * (1 + 1e-9)
    assert r["why"][0].startswith(f"Against the {label}")
    if r["best_s"] < r["expert_s"] * 0.999:  # where they differ, the categories say why
        assert "slower in the closed form" in r["why"][1] and " s " in r["why"][1]


def test_cli_explain_against_a_plan_file(tmp_path, capsys):
    plan = tmp_path / "titan.json"
    assert main(["simulate", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8", "--dp", "8", "--gbs",
                 "16", "--mbs", "2", "--seq", "8192", "--zero", "3", "--framework", "fsdp2", "--recompute", "full",
                 "--save-plan", str(plan)]) == 0
    capsys.readouterr()
    argv = ["plan", "--model", "llama3.1-8b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16", "--seq", "8192",
            "--refine", "0", "--quiet", "--json", "--explain", "--against", str(plan), "--tp", "1", "--zero", "3"]
    assert main(argv) == 0
    lines = json.loads(capsys.readouterr().out)["explain"]
    head = next(i for i, line in enumerate(lines) if line.startswith("Against the layout of"))
    assert "rank #" in lines[head] and "recompute" in lines[head + 1]
    assert main([*argv[:8], "32", *argv[9:]]) == 2  # another global batch: not the same job
    assert "--against: the plan's global batch is 16, the search's 32" in capsys.readouterr().err
