"""benchmarks/gpu_compare_trace.py on the committed H200 1.3B trace (docs/measured/h200-2026-11-24/call2): no GPU.

Expected numbers are counted from the model (GPT-3 1.3B: 24 blocks of four biased linears, two LayerNorms) or
hand-worked from the preset (hgx-h200: 4800 GB/s × 0.835 = 4008 GB/s achievable), so a mis-attributed kernel, a
lost step or a wrong byte count fails.
"""

import json
import re

import pytest
from benchmark_modules import load_benchmark

gct = load_benchmark("gpu_compare_trace")


@pytest.fixture(scope="module")
def classes():
    return json.loads(gct.CLASSES_FILE.read_text())


def test_the_classes_file_is_what_the_raw_trace_gives(classes):
    assert gct.classes_from_trace(gct.RAW / "trace-gpt3-1.3b.json.gz") == classes


def test_kernel_counts_per_step_follow_the_model(classes):
    c = classes["classes"]
    assert classes["steps"] == 2  # steps 2 and 3 of the three profiled
    assert c["block GEMMs"]["calls_per_step"] == 24 * 4 * 3  # each linear: forward, dgrad, wgrad
    assert c["logits GEMMs (CUTLASS align1)"]["calls_per_step"] == 3  # vocab 50257: the align1 kernels
    for cls in ("norm fwd", "norm bwd: grad-input kernel", "norm bwd: γ/β kernel"):
        assert c[cls]["calls_per_step"] == 2 * 24 + 1  # two per block and the final norm
    assert c["attention fwd"]["calls_per_step"] == 24
    assert c["grad-accumulation add (AccumulateGrad)"]["calls_per_step"] == 292  # one per parameter tensor
    # autocast's gradient casts: 4 weights, 4 biases and 2 norm outputs per block, the final norm's output and the
    # output layer's weight; the loss's own cast backward (two halves of the 823M logits) counts as loss bwd
    assert c["autocast casts bwd (ToCopyBackward)"]["calls_per_step"] == 24 * 10 + 2
    assert c["loss (cross-entropy) bwd"]["calls_per_step"] == 2 + 1 + 2 + 1  # fill (2 halves), nll, cast (2), lsm
    # torch DDP's reducer: a copy in per parameter tensor, a division per bucket, a copy back per tensor
    assert c["DDP bucket copies and division"]["calls_per_step"] == 292 + 73 + 292


def test_the_model_side_of_the_gamma_beta_kernel_is_hand_worked():
    from gpu_compare import load_results, run_cluster
    results = load_results(gct.RAW / "results-gpt3-1.3b.json")
    model = gct.model_classes(results, run_cluster(results, "hgx-h200"))
    per_norm = 2 * 16384 * 2048 * 4  # dy and x, fp32 under autocast
    assert model["norm bwd: γ/β kernel"] == pytest.approx((2 * 24 + 1) * per_norm / 4008e9, rel=1e-3)


def test_the_model_side_of_the_loss_and_the_ddp_copies_is_hand_worked():
    """Under autocast torch's loss moves 10 + 16 bytes per logit (:mod:`simulator.workload.loss`), DDP's reducer
    24 per fp32 gradient (:mod:`simulator.workload.ddp_bucket`), at 4008 GB/s."""
    from gpu_compare import load_results, run_cluster
    from simulator.workload import get_preset
    results = load_results(gct.RAW / "results-gpt3-1.3b.json")
    model = gct.model_classes(results, run_cluster(results, "hgx-h200"))
    logits = 8 * 2048 * 50257
    assert model["loss (cross-entropy) fwd"] == pytest.approx(10 * logits / 4008e9, rel=1e-3)
    assert model["loss (cross-entropy) bwd"] == pytest.approx(16 * logits / 4008e9, rel=1e-3)
    assert model["DDP bucket copies and division"] == pytest.approx(
        24 * get_preset("gpt3-1.3b").params / 4008e9, rel=1e-3)


def test_the_page_is_current(classes):
    text = (gct.RAW.parents[2] / "hardware_measured.md").read_text()
    body = gct.table_md(classes, ("hgx-h200", str(gct.CALIBRATED)))
    assert f"<!-- gpu-compare-trace:classes:start -->\n{body}\n<!-- gpu-compare-trace:classes:end -->" in text, (
        "regenerate: python benchmarks/gpu_compare_trace.py --write-md docs/hardware_measured.md")
    assert re.search(r"gpu-compare-trace:coarse:start -->\n\| trace \| class", text)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("no markers\n")
    assert gct.main(["--write-md", str(doc)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_compare_trace: error: --write-md:") and "\n" not in err


def test_the_op_tables_and_the_kernel_classes_agree_on_the_memory_bound_time():
    """gpu_compare's trace table (op tables: layer_times, edge_times with the framework's loss) and this one
    (kernels, with the chunks' loss) are two routes to the same model: their memory-bound time must agree."""
    import gpu_compare as gc
    from gpu_compare import load_results, run_cluster
    results = load_results(gct.RAW / "results-gpt3-1.3b.json")
    cluster = run_cluster(results, "hgx-h200")
    ops = gc.model_classes(results, cluster)["memory-bound"]
    compute = ("block GEMMs", "logits GEMMs (CUTLASS align1)", "attention fwd", "attention bwd",
               "optimizer (foreach AdamW)")  # DDP's bucket copies: memory-bound on both routes
    kernels = sum(t for c, t in gct.model_classes(results, cluster).items() if c not in compute)
    assert kernels == pytest.approx(ops, rel=1e-6)  # summed in another order
