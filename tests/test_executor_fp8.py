"""FP8 plans in the executor (executor/fp8.py): torchao float8 on a GPU, refused with a reason elsewhere.

CPU: the refusals (one line, exit 2, through the CLI), the recipe mapping, the layers chosen (those the
simulator counts in FP8, never the output layer), the device and install checks. Where torchao is importable
(it is an optional dependency, not in CI) the swap itself and a data-parallel step run on CPU, whose
``torch._scaled_mm`` emulates the FP8 GEMM. GPU (marked): a 1-process FP8 run on NCCL against its bf16 twin.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from dataclasses import replace

import pytest
import torch

from executor.fp8 import (FP8_MODULES, Fp8Linear, apply_fp8, check_fp8_device, check_fp8_run, fp8_linears,
                          load_float8, torchao_recipe)
from executor.model import build_gpt
from executor.strategies.base import Backend, Precision
from parallel_runs import GPT_TINY, LLAMA_TINY, plan_for
from simulator.errors import SpecError
from simulator.workload.fp8 import FP8_OPS, Fp8Recipe
from trainplan.__main__ import main

HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
needs_torchao = pytest.mark.skipif(not HAS_TORCHAO, reason="torchao (optional: pip install 'trainplan[fp8]') "
                                   "is not installed")
FP8 = {"precision": "fp8", "fp8_recipe": "torchao"}


def _plan_file(tmp_path, flat: dict, spec=GPT_TINY, cluster: str = "dgx-h100") -> str:
    path = tmp_path / "plan.json"
    plan_for(spec, flat, cluster).save(path)
    return str(path)


# --- the recipe and the layers --------------------------------------------------------------------

def test_the_torchao_recipes_map_to_torchaos_and_transformer_engine_recipes_are_refused():
    assert torchao_recipe(Fp8Recipe.TORCHAO) == "tensorwise"
    assert torchao_recipe(Fp8Recipe.TORCHAO_ROWWISE) == "rowwise"
    for recipe in (r for r in Fp8Recipe if not r.is_torchao):
        with pytest.raises(SpecError, match=f"plan.strategy.fp8_recipe: {recipe.value}: .*--fp8-recipe torchao"):
            torchao_recipe(recipe)


@pytest.mark.parametrize("spec", [GPT_TINY, LLAMA_TINY], ids=lambda s: s.name)
def test_the_fp8_layers_are_the_blocks_linears_of_the_model_and_not_the_output_layer(spec):
    model = build_gpt(spec)
    block_linears = {n: (m.in_features, m.out_features) for n, m in model.named_modules()
                     if isinstance(m, torch.nn.Linear) and n.startswith("layers.")}
    chosen = fp8_linears(spec)
    assert {lin.name: (lin.in_features, lin.out_features) for lin in chosen} == block_linears
    assert not any("head" in lin.name for lin in chosen)
    assert set(FP8_MODULES) == set(FP8_OPS)  # every operation the simulator runs in FP8, and only those
    assert len(chosen) == 4 * spec.layers


def test_alignment_is_both_dimensions_multiples_of_16():
    assert Fp8Linear("a", 32, 96).aligned
    assert not Fp8Linear("a", 32, 40).aligned and not Fp8Linear("a", 24, 32).aligned


# --- refusals: one line, before launch -------------------------------------------------------------

def test_checks_refuse_what_this_executor_cannot_run():
    fp8 = plan_for(GPT_TINY, {"dp": 1, **FP8})
    check_fp8_run(fp8, Backend.NCCL, Precision.BF16_AUTOCAST)  # runs on a GPU
    check_fp8_run(plan_for(GPT_TINY, {"dp": 1}), Backend.GLOO, Precision.FP32)  # not FP8: nothing to check
    cases = [
        (fp8, Backend.GLOO, Precision.BF16_AUTOCAST, "--backend: gloo runs on CPU: FP8 needs a CUDA device with "
                                                     "FP8 tensor cores (sm_89+)"),
        (fp8, Backend.NCCL, Precision.FP32, "--precision: fp32 with an FP8 plan"),
        (plan_for(GPT_TINY, {"dp": 1, "precision": "fp8", "fp8_recipe": "te"}), Backend.NCCL,
         Precision.BF16_AUTOCAST, "plan.strategy.fp8_recipe: te: this executor runs FP8 through torchao"),
        (plan_for(GPT_TINY, {"tp": 2, **FP8}), Backend.NCCL, Precision.BF16_AUTOCAST,
         "plan.strategy.precision: fp8: this executor runs FP8 with tp = pp = 1"),
        (replace(fp8, model=replace(GPT_TINY, hidden=40, heads=4)), Backend.NCCL, Precision.BF16_AUTOCAST,
         "model: layers.0.attn.qkv is 40→120: FP8 GEMMs need both dimensions multiples of 16"),
    ]
    for plan, backend, precision, words in cases:
        with pytest.raises(SpecError) as err:
            check_fp8_run(plan, backend, precision)
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("extra, words", [
    ([], "--backend: gloo runs on CPU: FP8 needs a CUDA device with FP8 tensor cores (sm_89+)"),
    (["--precision", "fp32"], "--precision: fp32 with an FP8 plan"),
])
def test_the_cli_refuses_an_fp8_plan_on_cpu_in_one_line(tmp_path, capsys, extra, words):
    plan = _plan_file(tmp_path, {"dp": 1, **FP8})
    assert main(["execute", plan, "--backend", "gloo", "--steps", "2", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1, err


def test_the_cli_refuses_a_transformer_engine_recipe_in_one_line(tmp_path, capsys):
    plan = _plan_file(tmp_path, {"dp": 1, "precision": "fp8", "fp8_recipe": "te-current"})
    assert main(["execute", plan, "--backend", "gloo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "plan.strategy.fp8_recipe: te-current" in err and len(err.splitlines()) == 1, err


def test_a_gpu_without_fp8_tensor_cores_is_refused():
    check_fp8_device((9, 0), "NVIDIA H200")
    check_fp8_device((8, 9), "NVIDIA L40S")
    with pytest.raises(SpecError, match=r"--backend: NVIDIA A100-SXM4-80GB is sm_80: FP8 needs a CUDA device with "
                                        r"FP8 tensor cores \(sm_89\+"):
        check_fp8_device((8, 0), "NVIDIA A100-SXM4-80GB")


@pytest.mark.parametrize("capability, words", [((8, 0), "--backend: NVIDIA A100-SXM4-80GB is sm_80"),
                                               ((9, 0), None)])
def test_prepare_checks_the_gpu_of_an_nccl_run(tmp_path, monkeypatch, capability, words):
    """The NCCL path of ``executor.options.prepare`` up to CUDA, on CPU: the visible GPU's capability decides."""
    from executor.options import PrecisionChoice, RunOptions, prepare
    from simulator.plan_scale import Scale

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _d=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _d=None: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr("executor.fp8.load_float8", lambda: None)  # torchao's presence is the next test's
    options = RunOptions(plan=_plan_file(tmp_path, {"dp": 1, **FP8}), scale=Scale.parse("as-planned"), steps=2,
                         warmup=1, seed=0, backend=Backend.NCCL, precision=PrecisionChoice.AUTO, out=None,
                         trace=None, timeout_s=60.0, threads=None)
    if words is None:
        prepare(options, 1)
        return
    with pytest.raises(SpecError, match=words):
        prepare(options, 1)


def test_missing_torchao_is_one_line_naming_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao.float8 raises ImportError
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    with pytest.raises(SpecError) as err:
        load_float8()
    text = str(err.value)
    assert text.startswith("torchao: not importable") and "pip install 'trainplan[fp8]'" in text, text
    assert "--no-deps" in text and "\n" not in text


# --- the swap and a step on CPU (torchao installed) -----------------------------------------------

@needs_torchao
@pytest.mark.parametrize("recipe, scaling", [("torchao", "TENSORWISE"), ("torchao-rowwise", "AXISWISE")])
def test_apply_fp8_swaps_exactly_the_plans_layers_with_the_plans_recipe(recipe, scaling):
    from torchao.float8.float8_linear import Float8Linear

    plan = plan_for(LLAMA_TINY, {"dp": 1, "precision": "fp8", "fp8_recipe": recipe})
    model = build_gpt(LLAMA_TINY)
    text = apply_fp8(model, plan.strategy, LLAMA_TINY)
    swapped = {n: m for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert set(swapped) == {lin.name for lin in fp8_linears(LLAMA_TINY)}
    assert {m.config.cast_config_weight.scaling_granularity.name for m in swapped.values()} == {scaling}
    assert type(model.head) is torch.nn.Linear  # the output layer stays bf16, as the simulator has it
    assert f"{torchao_recipe(plan.strategy.fp8_recipe)} scaling" in text and "on 16 linear layers" in text


def _dp_losses(rank: int, world: int, flat: dict) -> tuple[list[float], str | None]:
    from executor.run import build_context
    from executor.strategies import load_families
    from executor.strategies.base import family_spec

    load_families()
    plan = plan_for(GPT_TINY, flat)
    ctx = build_context(plan, rank=rank, world=world, local_rank=rank, backend=Backend.GLOO, seed=0,
                        precision=Precision.BF16_AUTOCAST)
    runner = family_spec(ctx.layout).build(ctx)
    return [runner.train_step(step).loss for step in range(2)], runner.components().get("fp8")


@needs_torchao
@pytest.mark.multiproc
def test_a_data_parallel_fp8_step_runs_and_stays_close_to_bf16():
    """The GPU path's wiring (swap before DDP, autocast, AdamW) on CPU, where ``torch._scaled_mm`` is emulated:
    the first loss (same weights, same batch) within 2 % of the bf16 one; both finite."""
    from executor.launch import run

    (fp8, note), = run(_dp_losses, 1, args=({"dp": 1, **FP8},))
    (bf16, none), = run(_dp_losses, 1, args=({"dp": 1},))
    assert note and "Float8Linear" in note and none is None
    assert all(math.isfinite(x) for x in fp8 + bf16)
    assert fp8[0] == pytest.approx(bf16[0], rel=0.02)


# --- GPU: a real FP8 run ---------------------------------------------------------------------------

@pytest.mark.gpu
@needs_torchao
@pytest.mark.parametrize("recipe", ["torchao", "torchao-rowwise"])
def test_an_fp8_run_on_a_gpu_is_finite_and_close_to_bf16(tmp_path, recipe):
    """``trainplan execute`` of a tiny FP8 plan on one GPU (NCCL) and of its bf16 twin: same weights and data, so
    the first loss agrees to FP8 rounding (2 %) and the fourth, after three AdamW steps, to 5 %."""
    losses = {}
    for name, flat in (("fp8", {"dp": 1, "precision": "fp8", "fp8_recipe": recipe}), ("bf16", {"dp": 1})):
        (tmp_path / name).mkdir()
        plan = _plan_file(tmp_path / name, flat, cluster="hgx-h200")
        out = tmp_path / f"{name}.json"
        assert main(["execute", plan, "--backend", "nccl", "--nproc", "1", "--steps", "4", "--out", str(out)]) == 0
        ranks = json.loads(out.read_text())["ranks"]
        losses[name] = ranks[0]["loss"]
    assert all(math.isfinite(x) for x in losses["fp8"])
    assert losses["fp8"][0] == pytest.approx(losses["bf16"][0], rel=0.02)
    assert losses["fp8"][-1] == pytest.approx(losses["bf16"][-1], rel=0.05)


# --- validate: an FP8 results file is re-simulated in FP8 -----------------------------------------

def _results_file(tmp_path, precision: str) -> str:
    """A results file as a 1-GPU NCCL run of gpt3-125m on hgx-h200 writes it (hand-made measurements)."""
    from simulator.cluster.io import load_cluster
    from simulator.plan_file import Plan
    from simulator.run_results import RankResult, Results, RunInfo, RunStatus
    from simulator.strategy.flat import strategy_from_flat
    from simulator.workload import get_preset

    flat = {"global_batch": 8, "micro_batch": 8} | ({"precision": "fp8"} if precision == "fp8" else {})
    plan = Plan(model=get_preset("gpt3-125m"), cluster=load_cluster("hgx-h200"), gpus=1,
                strategy=strategy_from_flat(flat))
    ranks = (RankResult(rank=0, step_time_s=(1.0, 0.05, 0.05), loss=(10.9, 10.0, 9.0), phases_s={},
                        model_state_bytes={}),)
    info = RunInfo(plan=plan, scale="as-planned", notes=(), family="data-parallel", precision="bf16-autocast",
                   steps=3, warmup=1, seed=0)
    path = tmp_path / f"{precision}.results.json"
    Results(status=RunStatus.COMPLETE, plan=plan, run=info, environment={"backend": "nccl", "device": "cuda"},
            ranks=ranks).save(path)
    return str(path)


def test_validate_resimulates_an_fp8_run_with_fp8_gemms(tmp_path, capsys):
    """The plan's ``precision fp8`` travels in the results file: the re-simulated step is the FP8 one, slower
    than the same run's bf16 estimate here: the executor runs torchao eagerly, whose separate cast kernels
    outweigh the FP8 GEMMs' gain (simulator/workload/fp8_eager.py ``eager_torchao_casts``; measured so on an H200,
    GPT-3 1.3B: 730 ms FP8 against 395 ms BF16, docs/hardware_measured.md)."""
    estimates = {}
    for precision in ("fp8", "model"):
        assert main(["validate", _results_file(tmp_path, precision), "--cluster", "hgx-h200", "--json"]) == 0
        row = json.loads(capsys.readouterr().out)["rows"][0]
        assert row["name"] == "step_time_s"
        estimates[precision] = row["analytical"]
    assert estimates["fp8"] > 1.1 * estimates["model"], estimates
