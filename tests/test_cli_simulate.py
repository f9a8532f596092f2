"""``trainplan simulate``: flags → Strategy, outputs, and every bad input as one line with exit code 2.

Parsing and error tests need no engine; the output tests swap the engine for a hand-built result;
the end-to-end tests run the real engines (imported below, so a renamed engine module fails the
collection instead of skipping these tests).
"""

from __future__ import annotations

import json
import time

import pytest

import simulator.analytical  # noqa: F401  (the end-to-end tests need both engines: fail, never skip)
import simulator.compile  # noqa: F401
import simulator.engine.step  # noqa: F401
from simulator.schedules import ScheduleKind
from simulator.strategy import AttentionKind, ParamServerSync, ZeroStage
from simulator.errors import SpecError
from simulator.units import MiB
from trainplan import cmd_simulate, strategy_flags, stragglers
from trainplan.__main__ import build_parser, main
from argv import merged
from timeline_fixtures import step_result

SMALL = ["simulate", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--dp", "2", "--tp", "2",
         "--pp", "2", "--gbs", "16"]
DONE = ["simulate", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--nodes", "128", "--gpus", "1024",
        "--dp", "16", "--tp", "8", "--pp", "8", "--mbs", "1", "--gbs", "1536", "--seq", "2048", "--engine", "des"]


def _build(args):
    job = strategy_flags.build_job(args)
    return job.workload, job.cluster, job.strategy, job.layout


def _inputs(*extra):
    return _build(build_parser().parse_args(merged(SMALL, list(extra))))


def _fail(argv, capsys) -> str:
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own errors (a missing flag, a bad choice) exit from parse_args
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    return err


# --- flags → strategy -------------------------------------------------------------------------------


def test_small_layout():
    workload, cluster, strategy, layout = _inputs()
    assert cluster.nodes == 1 and layout.world_size == 8
    assert (layout.dp, layout.tp, layout.pp, layout.micro_batches) == (2, 2, 2, 8)  # m = 16 / (2·1)
    assert strategy.schedule is ScheduleKind.ONE_F_ONE_B and workload.name == "gpt3-125m"


def test_nodes_follow_gpus_and_seq_overrides_model():
    args = build_parser().parse_args(DONE)
    workload, cluster, _, layout = _build(args)
    assert cluster.nodes == 128 and layout.micro_batches == 96 and workload.seq_len == 2048


def test_flags_reach_the_strategy():
    _, _, s, layout = _inputs("--zero", "1", "--sp", "--recompute", "selective", "--dp-algorithm", "ring",
                              "--bucket-mb", "50", "--no-overlap", "--schedule", "interleaved", "--mbs", "2")
    assert s.zero is ZeroStage.ZERO1 and s.sequence_parallel and s.recompute.value == "selective"
    assert s.dp_sync.algorithm.value == "ring" and s.dp_sync.bucket_bytes == 50 * MiB
    assert s.dp_sync.overlap_grad_reduce is False
    assert layout.v == strategy_flags.DEFAULT_INTERLEAVED_V and layout.micro_batches == 4


def test_profile_sets_defaults_and_flags_override():
    _, _, s, _ = _inputs("--profile", "megatron")
    assert s.sequence_parallel and s.zero is ZeroStage.ZERO1 and s.profile == "megatron"
    _, _, s, _ = _inputs("--profile", "megatron", "--no-sp", "--zero", "0")
    assert not s.sequence_parallel and s.zero is ZeroStage.ZERO0


def test_attention_flag_reaches_the_strategy():
    """Flash unless asked; ``--attention eager`` also overrides a profile (none of them sets it)."""
    assert _inputs()[2].attention is AttentionKind.FLASH
    assert _inputs("--attention", "eager")[2].attention is AttentionKind.EAGER
    _, _, s, _ = _inputs("--profile", "megatron", "--attention", "eager")
    assert s.attention is AttentionKind.EAGER and s.profile == "megatron"


def test_parameter_server_flags():
    _, cluster, s, layout = _inputs("--param-server", "async", "--servers", "4", "--staleness", "3",
                                    "--server-nodes", "1")
    assert isinstance(s.dp_sync, ParamServerSync) and s.dp_sync.shards == 4 and s.dp_sync.staleness_steps == 3
    assert cluster.nodes == 2 and layout.world_size == 8  # one extra node for the servers


def test_stragglers_fixed_and_random():
    _, _, s, _ = _inputs("--straggler", "rank=3,factor=1.5", "--straggler", "prob=0.05,factor=2", "--seed", "7")
    assert s.stragglers.speed_factors == (1, 1, 1, 1.5, 1, 1, 1, 1)
    assert (s.stragglers.slowdown_prob, s.stragglers.slowdown_factor, s.stragglers.seed) == (0.05, 2.0, 7)


def test_a_straggler_rank_given_twice_is_refused():
    """The last factor used to win silently (review of issue 15)."""
    with pytest.raises(SpecError, match=r"^--straggler: rank 3 is given twice; give each rank's factor once$"):
        stragglers.straggler_keys(["rank=3,factor=1.5", "rank=3,factor=2"], 8)


def test_failure_flags():
    _, _, s, _ = _inputs("--mtbf-hours", "50000", "--checkpoint-every", "100", "--checkpoint-cost", "30",
                         "--restart-cost", "600")
    assert s.failures.mtbf_gpu_hours == 50000 and s.failures.checkpoint_interval_steps == 100


@pytest.mark.parametrize("text", ["rank=1", "factor=2", "rank=1,prob=0.1,factor=2", "rank=a,factor=2", "speed=2",
                                  "rank=1;factor=2"])
def test_bad_straggler_syntax(text):
    with pytest.raises(Exception) as info:
        stragglers.parse_straggler(text)
    assert str(info.value).startswith("--straggler:")


# --- bad inputs: one line, exit code 2, naming the flag --------------------------------------------


@pytest.mark.parametrize("extra, flag", [
    (["--dp", "3"], "--dp"),                     # 3·2·2 != 8
    (["--tp", "5", "--dp", "1", "--pp", "1"], "--tp"),  # 5 does not divide 12 heads
    (["--gbs", "15"], "--gbs"),
    (["--mbs", "3"], "--mbs"),
    (["--pp", "13", "--tp", "1", "--dp", "1"], "--pp"),  # more stages than 12 layers
    (["--model", "gpt9"], "--model"),
    (["--cluster", "dgx-z"], "--cluster"),
    (["--profile", "jax"], "--profile"),
    (["--engine", "des", "--straggler", "rank=8,factor=2"], "--straggler"),
    (["--engine", "des", "--straggler", "prob=1.5,factor=2"], "--straggler"),
    (["--servers", "2"], "--servers"),
    (["--param-server", "sync", "--staleness", "2"], "--staleness"),
    (["--param-server", "async", "--bucket-mb", "10"], "--bucket-mb"),
    (["--engine", "des", "--mtbf-hours", "100"], "--checkpoint-every"),
    (["--nodes", "3"], "--nodes"),
    (["--gpus", "4"], "--dp: dp·tp·pp = 2·2·2 = 8 does not match the 4 GPUs"),  # part of a node: the layout says
    (["--gpus", "12", "--dp", "3"], "--gpus: 12 is not a whole number of 8-GPU"),
    (["--seq", "0"], "--seq"),
    (["--virtual-stages", "2"], "--virtual-stages"),
    (["--bucket-mb", "-1"], "--bucket-mb"),
    (["--trace", "t.json"], "--engine des"),
    (["--engine", "analytical", "--plot", "t.png"], "--engine des"),
    (["--zero", "4"], "--zero"),
    (["--straggler", "rank=1,factor=2"], "--engine des"),       # the analytical engine has no stragglers
    (["--steps", "4"], "--engine des"),
    (["--engine", "des", "--steps", "0"], "--steps"),
    (["--engine", "des", "--train-steps", "100"], "--train-steps"),  # without a failure model
    (["--param-fetch", "nvme"], "--param-fetch"),
    (["--attention", "sdpa"], "--attention"),
])
def test_bad_inputs_are_one_line(extra, flag, capsys):
    err = _fail(merged(SMALL, extra), capsys)
    assert flag in err


def test_missing_required_flag(capsys):
    assert "--gbs" in _fail(SMALL[:-2], capsys)


# --- outputs with a stand-in engine -----------------------------------------------------------------


@pytest.fixture
def fake_engine(monkeypatch):
    calls = []

    def run_engine(args, job):
        calls.append(args)
        return step_result()

    monkeypatch.setattr(cmd_simulate, "run_engine", run_engine)
    return calls


def test_text_output(fake_engine, capsys):
    assert main(SMALL) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpt3-125m on 8 x ") and "dp=2 tp=2 pp=2, 1f1b m=8" in out
    assert "flash attention" in out
    assert "engine des: step 3.000 s" in out and "breakdown (slowest rank)" in out


def test_json_output_has_contract_keys(fake_engine, capsys):
    assert main(SMALL + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("step_time_s", "tokens_per_s", "mfu", "engine", "breakdown", "memory", "model", "cluster", "gpus"):
        assert key in out
    assert out["breakdown"]["forward"] == 0.8 and len(out["per_rank"]) == 4


def test_trace_and_plot_written(fake_engine, tmp_path, capsys):
    trace, plot = tmp_path / "t.json", tmp_path / "t.png"
    assert main(SMALL + ["--engine", "des", "--trace", str(trace), "--plot", str(plot)]) == 0
    assert json.loads(trace.read_text())["traceEvents"] and plot.read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {trace}" in capsys.readouterr().err


# --- end to end with the real engines ------------------------------------------------------------

SMALL_MODEL_FLOPS = 72 * 16 * 2048 * 12 * 768 ** 2 * (1 + 2048 / (6 * 768) + 50257 / (12 * 12 * 768))
"""SMALL's model FLOPs per step, Narayanan et al. SC'21 eq. 3 without recompute: 72·B·s·l·h²·(1 + s/6h + V/12lh)
with B 16, s 2048, l 12, h 768, V 50257 (gpt3-125m) = 1.669886e13 × 1.898880 = 3.17091e13."""


def _small_mfu(step_s: float) -> float:
    """MFU of SMALL: model FLOPs over step × 8 GPUs × 989e12 (H100 SXM dense BF16 peak, dgx-h100 preset)."""
    return SMALL_MODEL_FLOPS / (step_s * 8 * 989e12)


def test_end_to_end_analytical(capsys):
    assert main(SMALL + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "analytical" and out["step_time_s"] > 0
    assert SMALL_MODEL_FLOPS == pytest.approx(3.17091e13, rel=1e-5)
    assert out["mfu"] == pytest.approx(_small_mfu(out["step_time_s"]), rel=1e-9)
    assert sum(out["breakdown"].values()) == pytest.approx(out["step_time_s"], rel=1e-6)


def test_end_to_end_des(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(SMALL + ["--engine", "des", "--trace", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "des" and out["step_time_s"] > 0
    assert out["mfu"] == pytest.approx(_small_mfu(out["step_time_s"]), rel=1e-9)
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert any("stage 0" in n for n in names) and any("stage 1" in n for n in names)


def test_des_never_faster_than_analytical(capsys):
    assert main(SMALL + ["--json"]) == 0
    analytical = json.loads(capsys.readouterr().out)["step_time_s"]
    assert main(SMALL + ["--engine", "des", "--json"]) == 0
    des = json.loads(capsys.readouterr().out)["step_time_s"]
    assert des >= analytical * (1 - 1e-9)


def test_done_command_gpt3_175b_1024_gpus(tmp_path, capsys):
    """The issue's done command: runs in seconds, writes the trace and the Gantt chart."""
    trace, plot = tmp_path / "t.json", tmp_path / "t.png"
    start = time.perf_counter()
    assert main(DONE + ["--trace", str(trace), "--plot", str(plot)]) == 0
    elapsed = time.perf_counter() - start
    out = capsys.readouterr().out
    assert "engine des" in out and plot.stat().st_size > 0
    assert elapsed < 60, f"done command took {elapsed:.1f} s"
    events = json.loads(trace.read_text())["traceEvents"]
    pids = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(pids) == 8  # symmetry: one simulated rank per pipeline stage

    def actions(stage: int) -> list[str]:
        """The compute track's task names in time order, a layer-by-layer action counted once."""
        pid = next(p for name, p in pids.items() if name.endswith(f"(stage {stage})"))
        names = [e["name"] for e in sorted((e for e in events if e["ph"] == "X" and e["pid"] == pid
                                             and e["tid"] == 0 and e["cat"] in ("forward", "backward")),
                                            key=lambda e: e["ts"])]
        return [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]]

    # 1F1B (PipeDream-Flush): stage 0 warms up with p = 8 forwards, the last stage alternates at once
    assert actions(0)[:9] == [f"0F{j}" for j in range(8)] + ["0B0"]
    assert actions(7)[:4] == ["7F0", "7B0", "7F1", "7B1"]
    # MFU is model FLOPs over step × GPUs × peak: Narayanan et al. SC'21 eq. 3 without recompute,
    # 72·B·s·l·h²·(1 + s/6h + V/12lh) = 3.38598e18 FLOPs (B 1536, s 2048, l 96, h 12288, V 50257), over
    # step × 1024 × 312e12; the printed figures are rounded (step to 1 ms, MFU to 0.1 %): tolerance 0.06 %.
    step_s, mfu = _step_and_mfu(out)
    assert mfu == pytest.approx(3.38598e18 / (step_s * 1024 * 312e12), abs=6e-4)
    # Published anchors: their run of this layout (with full recompute, Table 1: 138 TFLOP/s per GPU counting
    # recompute FLOPs, 4.51075e18 per step) took 4.51075e18 / (1024 × 138e12) = 31.92 s; without recompute
    # the step does less work, so it must be faster. No step beats every GEMM at the A100's measured plateau,
    # 271.2 of 312 TFLOP/s (Bekman's MAMF table, simulator/gemm_efficiency.py).
    assert step_s < 31.92 and mfu < 271.2 / 312


def _step_and_mfu(text: str) -> tuple[float, float]:
    """Step seconds and MFU from the report's first result line (``engine des: step 17.027 s, ... MFU 62.2 %``)."""
    line = next(line for line in text.splitlines() if line.startswith("engine "))
    step_s = float(line.split("step ")[1].split(" s")[0])
    return step_s, float(line.split("MFU ")[1].split(" %")[0]) / 100


def _json(argv, capsys) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_seed_is_the_api_seed(capsys):
    """``--seed 7`` simulates what ``simulate(work, seed=0)`` does for a strategy whose straggler seed is 7
    (it used to add the seed twice: the CLI's --seed 7 was the API's seed 14)."""
    from simulator.compile import compile_step
    from simulator.engine.step import simulate

    extra = ["--engine", "des", "--steps", "4", "--straggler", "prob=0.3,factor=3", "--seed", "7"]
    cli = _json(SMALL + extra, capsys)["step_time_s"]
    workload, cluster, strategy, layout = _inputs(*extra[:-4], "--straggler", "prob=0.3,factor=3", "--seed", "7")
    work = compile_step(cluster, workload, strategy, layout=layout)
    assert strategy.stragglers.seed == 7
    assert cli == simulate(work, cluster, seed=0, steps=4, trace=False).step_time_s
    assert cli != simulate(work, cluster, seed=7, steps=4, trace=False).step_time_s


def test_des_straggler_slows_the_step_and_is_deterministic(capsys):
    base = _json(SMALL + ["--engine", "des"], capsys)["step_time_s"]
    slow = _json(SMALL + ["--engine", "des", "--straggler", "rank=3,factor=1.5"], capsys)["step_time_s"]
    assert slow > base * 1.1  # every stage waits for the slow one in each micro-batch
    random = SMALL + ["--engine", "des", "--straggler", "prob=0.3,factor=2", "--steps", "3", "--seed", "5"]
    assert _json(random, capsys)["step_time_s"] == _json(random, capsys)["step_time_s"]


def test_des_async_parameter_server_reports_staleness(capsys):
    argv = ["simulate", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "64",
            "--engine", "des", "--steps", "4", "--param-server", "async", "--servers", "2", "--staleness", "2"]
    out = _json(argv, capsys)
    assert out["staleness"]["max"] <= 2 and len(out["staleness"]["per_worker"]) == 16
    assert main(argv) == 0 and "gradient staleness (steps) per worker" in capsys.readouterr().out


def test_des_failures_give_goodput(capsys):
    out = _json(SMALL + ["--engine", "des", "--mtbf-hours", "50000", "--checkpoint-every", "1000",
                         "--checkpoint-cost", "5", "--restart-cost", "600", "--train-steps", "100000"], capsys)
    assert 0 < out["goodput"] < 1 and out["time_to_train_s"] > 100000 * out["step_time_s"]


def test_param_fetch_owner_broadcast_is_slower(tmp_path, capsys):
    """ZeRO-Infinity's partitioned fetch uses every rank's PCIe link; the owner broadcast only one."""
    from dataclasses import replace

    from simulator.cluster.io import load_cluster, save_cluster

    base = load_cluster("dgx-a100")
    host = replace(base.node.host, cpu_adam_params_per_s=1e9)  # a test value, not the preset's
    path = save_cluster(replace(base, node=replace(base.node, host=host)), tmp_path / "offload.yaml")
    argv = ["simulate", "--model", "gpt3-1.3b", "--cluster", str(path), "--gpus", "8", "--gbs", "16", "--zero", "3",
            "--offload", "params"]
    infinity = _json(argv + ["--param-fetch", "infinity"], capsys)["step_time_s"]
    owner = _json(argv + ["--param-fetch", "owner-broadcast"], capsys)["step_time_s"]
    assert owner > infinity


def test_profile_end_to_end(capsys):
    assert main(SMALL + ["--profile", "horovod"]) == 0
    assert "profile horovod" in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("extra, needle", [(["--sp", "--no-sp"], "--no-sp: given after --sp"),
                                           (["--cluster", "dgx-a100"], "--cluster: given after --cluster"),
                                           (["--gbs", "32"], "--gbs: given after --gbs"),
                                           (["--gb", "32"], "unrecognized arguments: --gb 32")])
def test_an_option_given_twice_is_refused(extra, needle, capsys):
    """Repeated or contradictory flags are refused rather than last-one-wins (issue 15); --straggler,
    which collects specs, may repeat (test_stragglers_fixed_and_random). An abbreviation (--gb for
    --gbs) is no flag at all: it slipped past the repeat check."""
    assert needle in _fail(SMALL + extra, capsys)


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("trainplan ")


def test_buckets_past_the_guard_are_refused(capsys):
    """--bucket-mb 1e-6 split a 125M model's gradients into 250 million one-byte buckets and never
    finished (issue 15); past MAX_BUCKETS it is one line naming --bucket-mb and the least size."""
    from simulator.compile.comm_part import MAX_BUCKETS, buckets

    assert len(buckets(MAX_BUCKETS * 10, 10)) == MAX_BUCKETS
    err = _fail(SMALL + ["--bucket-mb", "1e-6"], capsys)
    assert err.startswith("trainplan simulate: error: --bucket-mb: 1-byte buckets split ") and "give at least" in err
