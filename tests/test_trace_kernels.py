"""benchmarks/trace_kernels.py on a hand-made Chrome trace: per-class sums, the kernels' union, bad input."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import trace_kernels as tk  # noqa: E402


def _trace(tmp_path):
    events = [  # µs; two overlapping GEMMs (0-100, 50-150), a copy 200-210, a CPU op that must be ignored
        {"cat": "kernel", "name": "nvjet_sm90_tst_128x256", "ts": 0, "dur": 100},
        {"cat": "kernel", "name": "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_align1>", "ts": 50, "dur": 100},
        {"cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 200, "dur": 10},
        {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_sums_by_class_and_union(tmp_path):
    r = tk.summarise(_trace(tmp_path), steps=2)
    assert r["kernels"] == 3
    assert r["by_class_s_per_step"]["gemm"] == pytest.approx(200e-6 / 2)
    assert r["by_class_s_per_step"]["copy"] == pytest.approx(10e-6 / 2)
    assert r["busy_s_per_step"] == pytest.approx(160e-6 / 2)   # union: 0-150 and 200-210
    assert r["span_s_per_step"] == pytest.approx(210e-6 / 2)


def test_kernel_classes():
    assert tk.kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_bprop") == "attention"
    assert tk.kernel_class("multi_tensor_apply_kernel<...Adam...>") == "optimizer"
    assert tk.kernel_class("vectorized_layer_norm_kernel") == "norm"
    assert tk.kernel_class("something_new") == "other"


def test_bad_input_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        tk.main([str(tmp_path / "missing.json")])
    assert e.value.code == 2 and "trace: cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        tk.main([str(_trace(tmp_path)), "--steps", "0"])
    assert e.value.code == 2
