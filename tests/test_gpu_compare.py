"""benchmarks/gpu_compare.py on the committed H200 measurements (docs/measured/h200-2026-11-24): no GPU needed.

The expected numbers are worked by hand from the raw files (a square's TFLOP/s = 2n³ / median_s; a kernel's
GB/s = bytes / median_s; the trace's align1 kernels summed), or taken from the logs the GPU session printed
when it measured (measure-gemm.log: "8192: 779"), so a parsing or grouping mistake fails here. The model's
side is recomputed from the same preset, not pinned: the preset and the GEMM model may change.
"""

import json
import statistics
import sys
from pathlib import Path

import pytest
from benchmark_modules import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "docs" / "measured" / "h200-2026-11-24"




gc = load_benchmark("gpu_compare")


@pytest.fixture(scope="module")
def measured():
    return gc.load_measured(RAW)


@pytest.fixture(scope="module")
def device():
    from simulator.cluster.io import load_cluster
    return load_cluster("hgx-h200").device


@pytest.fixture(scope="module")
def tables():
    return gc.sections(RAW, "hgx-h200")


def test_square_tflops_is_2n3_over_median_and_model_is_the_rates_time(measured, device):
    from simulator.compute import rates_for
    from simulator.workload.kinds import DtypePolicy
    from simulator.workload.ops import gemm
    points = {p["m"]: p for p in gc.gemm_points(measured["gemm"], device, fp8=False) if p["square"]}
    raw = next(r for r in measured["gemm"] if r["rows"] == ["square"] and r["m"] == 8192)
    p = points[8192]
    assert p["flops"] == 2 * 8192 ** 3
    assert p["flops"] / p["measured_s"] / 1e12 == pytest.approx(2 * 8192 ** 3 / raw["median_s"] / 1e12)
    assert round(p["flops"] / p["measured_s"] / 1e12) == 779  # measure-gemm.log: squares {..., 8192: 779, ...}
    model_s = rates_for(DtypePolicy.BF16_MIXED, device).time(gemm("g", 8192, 8192, 8192, 2))[0]
    assert p["model_s"] == model_s and p["error"] == pytest.approx(model_s / raw["median_s"] - 1)
    assert sorted(points) == [256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384]


def test_table_shapes_group_into_decades_and_misaligned_apart(measured, device):
    bf16 = gc.gemm_points(measured["gemm"], device, fp8=False)
    rows = gc.decade_rows(bf16)
    assert [r[1] for r in rows] == [42, 177, 292, 61, 572, 6]  # 578 table shapes = 572 aligned + 6
    odd = [p for p in bf16 if p["misaligned"]]
    assert all(12564 in (p["m"], p["n"], p["k"]) for p in odd)  # GPT-3's 50257 vocab over tp 4: 12564
    e = [p["error"] for p in odd]
    assert rows[-1][2] == f"{statistics.fmean(abs(x) for x in e) * 100:.1f} %"
    fp8 = gc.decade_rows(gc.gemm_points(measured["fp8"], device, fp8=True))
    assert fp8[-2][1] == 572 and fp8[-1][1:] == [0, "-", "-"]  # _scaled_mm skipped every misaligned shape


def test_attention_rate_and_paper_bar(measured):
    from simulator.cluster.io import load_cluster
    paper = load_cluster("dgx-h100").device.attention_efficiency
    points = gc.attention_points(measured["attention"], paper, None)
    assert len(points) == 48

    def find(rows, *key):
        return next(p for p in rows if (p["backend"], p["head_dim"], p["causal"], p["seq"]) == key)
    raw = find(measured["attention"], "FLASH_ATTENTION", 128, False, 16384)
    point, f = find(points, "FLASH_ATTENTION", 128, False, 16384), 4 * 1 * 16384 ** 2 * 16 * 128  # b 1, 16 heads of 128
    fwd, bwd = point["fwd"], point["bwd"]
    assert fwd["measured"] == pytest.approx(f / raw["fwd"]["median_s"] / 1e12)
    assert bwd["measured"] == pytest.approx(2.5 * f / (raw["fwd_bwd"]["median_s"] - raw["fwd"]["median_s"]) / 1e12)
    assert fwd["paper"] == 370 and not fwd["read"]  # FA3 paper Fig. 5, FA2, head dim 128, 16k
    assert bwd["paper"] == 322 and not bwd["read"]  # Fig. 6
    assert find(points, "FLASH_ATTENTION", 128, True, 4096)["bwd"]["read"]  # causal bwd: no bar, the non-causal curve
    cudnn_512 = find(points, "CUDNN_ATTENTION", 128, False, 512)["fwd"]
    assert cudnn_512["read"] and cudnn_512["paper"] == 574  # left out of the preset: flat from 1024


def test_memory_bandwidth_on_model_bytes(tables):
    # copy: 2^28 bf16 elements read and written = 1073.7 MB in 256 µs = 4196 GB/s (measure-core.log: 4196)
    assert "| copy | 1074 | 256 | 4196 |" in tables["memory"]
    # AdamW: 2^26 fp32 parameters × 28 B = 1879 MB; foreach 1561 µs = 1204 GB/s
    assert "| adamw_foreach | 1879 | 1561 | 1204 |" in tables["memory"]


def test_trace_classes_split_the_align1_logits_gemms():
    trace = json.loads((RAW / "call2" / "trace-kernels-gpt3-1.3b.json").read_text())
    classes = gc.trace_classes(trace)
    assert classes["logits GEMM"] == pytest.approx(0.037633 + 0.024062 + 0.023156, abs=1e-5)  # three align1 kernels
    assert classes["layer GEMMs"] == pytest.approx(0.234890 - classes["logits GEMM"], abs=1e-5)
    assert classes["memory-bound"] == pytest.approx(0.03213 + 0.02919 + 0.01131 + 0.00759 + 0.00488 + 0.00262
                                                    + 0.00004, abs=1e-4)
    assert sum(classes.values()) == pytest.approx(trace["busy_s_per_step"], rel=1e-3)  # one stream: no overlap


def test_model_classes_add_up_to_the_analytical_step():
    """The trace table's model side is the same model as `trainplan validate`: on this single-GPU plan
    (no communication, one micro-batch, device-bound) its classes add up to the analytical step, to 2 %
    (what a host-bound phase would change). The op table has no power-limit stretch (simulator/power.py: a
    mix's term, not a kernel's), so the sum is checked on the cluster without its power draw."""
    from dataclasses import replace
    from simulator.run_results import load_results
    from simulator.validate import run_cluster, validate
    results = load_results(RAW / "call2" / "results-gpt3-1.3b.json")
    cluster = run_cluster(results, "hgx-h200")
    cluster = replace(cluster, device=replace(cluster.device, power_draw=None))
    model = gc.model_classes(results, cluster)
    assert set(model) == {"layer GEMMs", "logits GEMM", "attention", "memory-bound", "optimizer"}
    assert sum(model.values()) == pytest.approx(validate(results, cluster).analytical.step_time_s, rel=0.02)


def test_runs_table(tables):
    steps = json.loads((RAW / "call1" / "results-gpt3-1.3b.json").read_text())["ranks"][0]["step_time_s"]
    median_ms = statistics.median(steps[1:]) * 1e3  # warm-up 1 step
    assert f"| call1/results-gpt3-1.3b.json | {median_ms:.1f} / " in tables["runs"]
    assert "| call2/results-llama2-7b.json | no step: OutOfMemoryError" in tables["runs"]
    assert "(planned 126.2 GB)" in tables["runs"]
    assert tables["runs"].count("\n| call") == len(list(RAW.glob("call*/results-*.json")))


def test_write_md_replaces_only_the_sections(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    body = "".join(f"prose {n}\n{gc.marker(n)}\nold\n{gc.marker(n, end=True)}\n" for n in gc.SECTIONS)
    doc.write_text("# title\n" + body + "tail\n")
    assert gc.main(["--write-md", str(doc)]) == 0
    first = doc.read_text()
    assert "old" not in first and first.startswith("# title\nprose setup\n") and first.endswith("tail\n")
    assert "| 8192 | 779 |" in first
    assert gc.main(["--write-md", str(doc)]) == 0 and doc.read_text() == first
    capsys.readouterr()


@pytest.mark.parametrize("argv, field", [(["--cluster", "dgx-h10"], "--cluster"), (["--raw", "/nonexistent"], "--raw"),
                                         (["--write-md", "/nonexistent/doc.md"], "--write-md")])
def test_bad_input_is_one_line_exit_2(argv, field, capsys):
    assert gc.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu_compare: error: {field}:") and err.count("\n") == 1
