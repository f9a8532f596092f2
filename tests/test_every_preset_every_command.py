"""Every cluster preset works with every command (issue 15, "done means"): cluster show and export,
model show, memory, simulate with both engines, collective and plan on a small space, each on one
node of the preset with a small model (a Llama-shaped config.json in the preset's own number
format: bf16, or fp16 on V100, fp32 on the CPU preset). "Works": exit 0 and sane ``--json`` (no NaN, infinity,
negative time or utilisation above 1: the fuzz suite's oracle). A preset whose GPU has no
published matmul measurement (``NO_MATMUL_CURVE``; none today) cannot time a step: there
``simulate`` must refuse with one line naming ``device.gemm_efficiency`` (exit 2), and ``plan`` finds
no candidate and says why (exit 1 or 2, the reason in its last line); a user cluster file without a
curve is refused the same way.
"""

from __future__ import annotations

import json

import pytest
import yaml

from simulator.cluster.presets import load_preset, preset_names
from test_fuzz_cli import bad_numbers, run
from test_preset_features import DTYPE, NO_MATMUL_CURVE

CONFIG = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 4, "intermediate_size": 688, "max_position_embeddings": 512,
          "vocab_size": 1000, "hidden_act": "silu", "tie_word_embeddings": False}


@pytest.fixture
def model(preset, tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG | {"torch_dtype": DTYPE.get(preset, "bfloat16")}))
    return str(path)


def _gpus(preset: str) -> str:
    return str(load_preset(preset).node.gpus_per_node)


def _commands(preset: str, model: str) -> dict[str, list[str]]:
    gpus = _gpus(preset)
    job = ["--model", model, "--cluster", preset, "--gpus", gpus, "--seq", "512"]
    return {
        "cluster show": ["cluster", "show", preset],
        "model show": ["model", "show", model, "--seq", "512"],
        "memory": ["memory", *job, "--gbs", gpus],
        "simulate analytical": ["simulate", *job, "--gbs", gpus],
        "simulate des": ["simulate", *job, "--gbs", gpus, "--engine", "des", "--steps", "1"],
        "collective": ["collective", "--cluster", preset, "--bytes", "1MiB..4MiB"],
        "plan": ["plan", *job, "--gbs", gpus, "--tp", "1", "--pp", "1", "--top", "1"],
    }


SIMULATE = {"simulate analytical", "simulate des"}


@pytest.mark.parametrize("command", ["cluster show", "model show", "memory", "simulate analytical", "simulate des",
                                     "collective", "plan"])
@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_works_with_every_command(preset, command, model):
    argv = _commands(preset, model)[command] + ["--json"]
    code, out, err = run(argv)
    assert "Traceback" not in err, err
    if preset in NO_MATMUL_CURVE and command in SIMULATE:
        assert code == 2 and "device.gemm_efficiency" in err and len(err.strip().splitlines()) == 1, err
        return
    if preset in NO_MATMUL_CURVE and command == "plan":
        assert code in (1, 2) and "device.gemm_efficiency" in err, err
        return
    assert code == 0, f"trainplan {' '.join(argv)}\n{err}"
    assert not bad_numbers(json.loads(out)), bad_numbers(json.loads(out))


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_exports_a_cluster_file_that_loads_back(preset, tmp_path):
    from simulator.cluster.io import load_cluster
    target = tmp_path / f"{preset}.yaml"
    code, _, err = run(["cluster", "export", preset, "--out", str(target)])
    assert code == 0, err
    assert load_cluster(str(target)) == load_cluster(preset)


@pytest.mark.parametrize("preset", ["pcie-l40s"])
def test_a_user_file_without_a_matmul_curve_is_refused_in_one_line(preset, model, tmp_path):
    """The exported L40S preset with its published plateau removed: simulate refuses (exit 2, one line naming
    device.gemm_efficiency), plan says why it has no candidate."""
    target = tmp_path / "no-curve.yaml"
    code, _, err = run(["cluster", "export", preset, "--out", str(target)])
    assert code == 0, err
    d = yaml.safe_load(target.read_text())
    del d["device"]["gemm_efficiency"]
    target.write_text(yaml.safe_dump(d))
    job = ["--model", model, "--cluster", str(target), "--gpus", _gpus(preset), "--seq", "512"]
    code, _, err = run(["simulate", *job, "--gbs", _gpus(preset), "--json"])
    assert code == 2 and "device.gemm_efficiency" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run(["plan", *job, "--gbs", _gpus(preset), "--tp", "1", "--pp", "1", "--top", "1", "--json"])
    assert "Traceback" not in err and code in (1, 2) and "device.gemm_efficiency" in err, err
