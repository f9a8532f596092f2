"""Every preset × every `simulate` feature that needs a preset number: compute (matmul curve), optimizer and
parameter offload (cpu_adam_params_per_s, NVMe), the input pipeline (storage_read_GBps), both engines.

A tiny Llama-shaped model in the dtype the preset's device has (fp16 on V100, fp32 on the CPU preset, bf16
elsewhere). Every preset's GPU has a published matmul measurement: a MAMF row [src: bekman-mle], or a
published plateau (V100 [src: nvidia-forum-v100-gemm], L40S [src: zzc-torch-perf-l40s]); a preset without
one (``NO_MATMUL_CURVE``, none today) must fail with the one-line error naming device.gemm_efficiency, never
a traceback or a made-up curve; every other preset must estimate every feature.
"""

from __future__ import annotations

import math

import pytest

from simulator.analytical import estimate
from simulator.cluster.presets import load_preset, preset_names
from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.errors import SpecError
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.hf import spec_from_hf_config

NO_MATMUL_CURVE: set[str] = set()
"""Presets whose GPU has no published matmul measurement to time GEMMs with: none since pcie-l40s took a
published plateau [src: zzc-torch-perf-l40s] (the refusal itself: tests/test_plateau_curve.py and
tests/test_every_preset_every_command.py, on a user file)."""

DTYPE = {"dgx-v100": "float16", "localhost-cpu": "float32"}

FEATURES = {
    "plain": {},
    "zero2-offload-optimizer": {"zero": 2, "offload": "optimizer"},
    "zero3-offload-params": {"zero": 3, "offload": "params"},
    "zero3-offload-nvme": {"zero": 3, "offload": "nvme"},
    "data-local": {"bytes_per_sample": 8192, "data_source": "local"},
    "data-shared": {"bytes_per_sample": 8192, "data_source": "shared"},
    "pp2-recompute": {"pp": 2, "recompute": "full"},
}


def _model(preset: str):
    cfg = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 688, "max_position_embeddings": 512,
           "vocab_size": 1000, "hidden_act": "silu", "tie_word_embeddings": False,
           "torch_dtype": DTYPE.get(preset, "bfloat16")}
    return spec_from_hf_config(cfg, "tiny-llama")


def _run(preset: str, keys: dict, des: bool = False):
    cluster = load_preset(preset)
    gpus = cluster.world_size  # one node: all its GPUs, dp over what pp leaves
    strategy = strategy_from_flat({"global_batch": 2 * gpus, "dp": gpus // keys.get("pp", 1), **keys})
    if des:
        return simulate(compile_step(cluster, _model(preset), strategy), cluster, seed=0, steps=1)
    return estimate(cluster, _model(preset), strategy)


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_estimates_every_feature(preset, feature):
    if preset in NO_MATMUL_CURVE:
        with pytest.raises(SpecError) as err:
            _run(preset, FEATURES[feature])
        assert err.value.field == "device.gemm_efficiency"
        return
    result = _run(preset, FEATURES[feature])
    assert math.isfinite(result.step_time_s) and result.step_time_s > 0


@pytest.mark.parametrize("preset", sorted(set(preset_names()) - NO_MATMUL_CURVE))
def test_every_preset_runs_the_des_with_offload_and_data(preset):
    result = _run(preset, {"zero": 2, "offload": "optimizer", "bytes_per_sample": 8192, "data_source": "local"},
                  des=True)
    assert math.isfinite(result.step_time_s) and result.step_time_s > 0


def test_offload_and_data_cost_time_on_a_preset():
    # The features do something: optimizer offload and reading samples add time over the plain step.
    plain = _run("dgx-h100", {"zero": 2})
    assert _run("dgx-h100", {"zero": 2, "offload": "optimizer"}).step_time_s > plain.step_time_s
    assert _run("dgx-h100", {"zero": 2, "bytes_per_sample": 10**8, "data_source": "local"}).step_time_s > \
        plain.step_time_s
