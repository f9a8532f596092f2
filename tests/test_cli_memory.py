"""``trainplan memory``: the table, --json, --plot, and every bad input as one line with exit code 2."""

import json
from pathlib import Path

import pytest

from argv import merged

from trainplan.__main__ import main

DATA = Path(__file__).parent / "data"
DONE = ["memory", "--model", "llama2-7b", "--gpus", "8", "--zero", "3", "--mbs", "1", "--seq", "4096"]


def test_done_means_command_prints_breakdown(capsys):
    """With FlashAttention (the default) llama2-7b at s = 4096, mbs 1, ZeRO-3 fits on 80 GB."""
    assert main(DONE) == 0
    out = capsys.readouterr().out
    for needle in ("llama2-7b on 8 x A100-SXM-80GB (dgx-a100): dp=8 tp=1 pp=1", "ZeRO-3", "deepspeed (flat)",
                   "flash attention", "parameters", "gradients", "optimizer states", "activations", "buffers",
                   "allocated (max_memory_allocated)", "reserved (max_memory_reserved)", "NCCL buffers",
                   "CUDA context (assumed)", "total on the device", "verdict: fits"):
        assert needle in out, needle
    assert "note:" not in out


def test_eager_attention_keeps_scores_and_says_so(capsys):
    assert main(merged(DONE, ["--attention", "eager", "--mbs", "2"])) == 0
    out = capsys.readouterr().out
    assert "eager attention" in out and "verdict: DOES NOT FIT" in out and "attention scores" in out


def test_fsdp2_zero2_shows_peak_and_after_step(capsys):
    """FSDP2 reshard_after_forward=False: the bf16 unsharded copy (padded) is the peak; after the step
    only the ZeRO-3 shard is left (2 B x ceil-padded shard)."""
    assert main(["memory", "--model", "llama2-7b", "--gpus", "8", "--zero", "2", "--framework", "fsdp2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["strategy"]["framework"] == "fsdp2" and out["strategy"]["partitioning"] == "dim0-padded"
    assert out["params_bytes"] == pytest.approx(8 * out["params_after_step_bytes"])
    assert out["params_bytes"] >= 2 * 6_738_415_616 and out["stages"][0]["buffers"]["grad_buckets_bytes"] == 0


def test_torch_ddp_bucket_view(capsys):
    assert main(["memory", "--model", "llama2-7b", "--gpus", "8", "--json"]) == 0
    copy = json.loads(capsys.readouterr().out)["stages"][0]["buffers"]["grad_buckets_bytes"]
    # torch DDP's default: a bucket copy of every gradient, fp32 under autocast (simulator.memory.autocast)
    assert copy == 4 * 6_738_415_616
    assert main(["memory", "--model", "llama2-7b", "--gpus", "8", "--bucket-view", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stages"][0]["buffers"]["grad_buckets_bytes"] == 0


def test_json_has_contract_keys(capsys):
    assert main(DONE + ["--recompute", "selective", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "buffers_bytes",
                "allocated_bytes", "reserved_bytes", "runtime_bytes", "total_bytes", "host_bytes", "fits"):
        assert key in out
    assert out["fits"] is True
    # Psi/8 in bf16, plus the 65 RMSNorm weights (4096) DeepSpeed's ZeRO-3 keeps whole (under 1e5 elements)
    assert out["params_bytes"] == 2 * -(-6_738_415_616 // 8) + 2 * 65 * 4096
    parts = sum(out[k] for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                                 "buffers_bytes", "runtime_bytes"))
    assert out["total_bytes"] == pytest.approx(parts)
    runtime = out["stages"][0]["runtime"]
    assert out["allocated_bytes"] == pytest.approx(parts - out["runtime_bytes"] + runtime["cublas_workspace_bytes"])
    assert out["reserved_bytes"] == pytest.approx(out["allocated_bytes"] + runtime["allocator_slack_bytes"])
    assert out["total_bytes"] == pytest.approx(out["reserved_bytes"] + runtime["cuda_context_bytes"]
                                               + runtime["nccl_buffers_bytes"])


def test_params_only_zero_paper(capsys):
    """--params 7.5e9 on 64 GPUs, ZeRO-1: 31.4 GB of model states (ZeRO paper, Figure 1)."""
    assert main(["memory", "--params", "7.5e9", "--gpus", "64", "--zero", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["params_bytes"] + out["grads_bytes"] + out["optimizer_bytes"]) / 1e9 == pytest.approx(31.4, abs=0.05)
    assert out["activations_bytes"] == 0 and out["ranks_per_node"] == 8


def test_pipeline_table_lists_stages(capsys):
    assert main(["memory", "--model", "llama2-70b", "--gpus", "64", "--tp", "8", "--pp", "4", "--zero", "1",
                 "--sp", "--recompute", "selective", "--gbs", "16"]) == 0  # dp 2 · mbs 1 · m 8
    out = capsys.readouterr().out
    assert "per stage" in out and "stage 3" in out and "verdict: fits" in out


def test_offload_reports_host(capsys):
    assert main(["memory", "--model", "llama2-7b", "--gpus", "8", "--zero", "3", "--offload", "params",
                 "--recompute", "full", "--offload-activations", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params_bytes"] == 0 and out["host_bytes"] > 18 * 6.7e9 / 8


def test_config_json_model(capsys):
    assert main(["memory", "--model", str(DATA / "gpt2.config.json"), "--gpus", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]


def test_plot_writes_png(tmp_path, capsys):
    path = tmp_path / "zero.png"
    assert main(DONE + ["--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {path}" in capsys.readouterr().out


def _run(argv) -> int:
    try:
        return main(argv)
    except SystemExit as stop:  # argparse's own errors (an invalid choice) exit from the parser
        return stop.code


def _one_line_error(capsys, argv, *needles):
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def test_tp_not_dividing_heads(capsys):
    _one_line_error(capsys, ["memory", "--model", "gpt3-125m", "--gpus", "5", "--tp", "5"], "tp", "12 attention heads")


def test_pp_larger_than_layers(capsys):
    _one_line_error(capsys, ["memory", "--model", "gpt3-125m", "--gpus", "16", "--pp", "16"], "pp", "12 layers")


def test_degrees_not_matching_gpus(capsys):
    _one_line_error(capsys, ["memory", "--model", "llama2-7b", "--gpus", "8", "--dp", "2", "--tp", "2"],
                    "--dp: dp·tp·pp = 2·2·1 = 4 does not match the 8 GPUs")


def test_unknown_model_lists_known(capsys):
    _one_line_error(capsys, ["memory", "--model", "gpt5", "--gpus", "8"], "unknown model", "llama2-7b")


def test_malformed_config_names_field(capsys, tmp_path):
    cfg = json.loads((DATA / "llama-2-7b.config.json").read_text())
    del cfg["num_attention_heads"]
    path = tmp_path / "bad.config.json"
    path.write_text(json.dumps(cfg))
    _one_line_error(capsys, ["memory", "--model", str(path), "--gpus", "8"], "num_attention_heads")


def test_offload_without_host_section(capsys):
    # examples/my-cluster.yaml, a user's minimal file, has no host section (every preset has one)
    cluster = str(Path(__file__).resolve().parents[1] / "examples" / "my-cluster.yaml")
    _one_line_error(capsys, ["memory", "--params", "1e9", "--cluster", cluster, "--gpus", "2",
                             "--zero", "2", "--offload", "optimizer"], "host")


@pytest.mark.parametrize("argv, needle", [
    (["--zero", "1", "--offload", "params"], "needs zero 3"),
    (["--offload-activations"], "use recompute full"),
    (["--zero", "4"], "invalid choice"),
    (["--zero", "1", "--framework", "fsdp2"], "does not implement ZeRO-1"),
    (["--zero", "3", "--framework", "fsdp2", "--partitioning", "flat"], "partitioning"),
    (["--zero", "3", "--bucket-view"], "--bucket-view: is a torch DDP option"),
])
def test_inconsistent_options(capsys, argv, needle):
    _one_line_error(capsys, ["memory", "--model", "llama2-7b", "--gpus", "8"] + argv, needle)


def test_sp_at_tp_1_is_a_no_op_as_in_megatron(capsys):
    """Megatron-LM turns --sequence-parallel off at tp = 1; memory and simulate both accept it as a no-op."""
    assert main(["memory", "--model", "llama2-7b", "--gpus", "8", "--sp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["strategy"]["sp"] is False


def test_model_and_params_together(capsys):
    _one_line_error(capsys, ["memory", "--model", "llama2-7b", "--params", "7e9", "--gpus", "8"], "one of them")


def test_seq_with_a_bare_parameter_count_is_refused(capsys):
    """--seq was silently ignored with --params (issue 15 review): a bare count has no activations."""
    _one_line_error(capsys, ["memory", "--params", "7e9", "--seq", "8192", "--gpus", "8"], "--seq: a bare --params")


def test_layer_list_workload_is_refused(capsys):
    _one_line_error(capsys, ["memory", "--model", str(DATA / "small-mlp.layers.json"), "--gpus", "2"],
                    "model", "--params")


def test_plot_with_fsdp2_drops_it_where_it_cannot_run(tmp_path, capsys):
    """The ZeRO 0-3 sweep keeps --framework fsdp2 for ZeRO 2-3 and uses the default framework for 0-1."""
    path = tmp_path / "fsdp2.png"
    assert main(["memory", "--model", "llama2-7b", "--gpus", "8", "--zero", "2", "--framework", "fsdp2",
                 "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, flag", [(["--straggler", "rank=1,factor=2"], "--straggler"),
                                        (["--mtbf-hours", "100"], "--mtbf-hours")])
def test_scenario_flags_are_refused(capsys, argv, flag):
    _one_line_error(capsys, ["memory", "--model", "llama2-7b", "--gpus", "8"] + argv, f"{flag}: stragglers and failures")


def test_plot_path_checked_before_the_work_and_no_folder_created(tmp_path, capsys):
    target = tmp_path / "missing" / "x.png"
    _one_line_error(capsys, DONE + ["--plot", str(target)], "--plot", "does not exist")
    assert not (tmp_path / "missing").exists()
    _one_line_error(capsys, DONE + ["--plot", str(tmp_path / "x.txt")], "--plot", "must end in .png")
