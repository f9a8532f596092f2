"""Issue 15 cases that had no test of their own (the audit of docs/quality.md): each input of the
issue's list gives one line naming the flag and exit 2, or, where it was valid, a sane result."""

from __future__ import annotations

import json
import math

import pytest

from simulator.analytical import estimate
from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.strategy.flat import strategy_from_flat
from simulator.workload import get_preset
from test_fuzz_cli import bad_numbers, run

SIM = ["simulate", "--model", "gpt3-125m", "--cluster", "dgx-h100", "--gpus", "8", "--dp", "2", "--tp", "2", "--pp", "2",
       "--gbs", "16"]
FAILURES = ["--engine", "des", "--mtbf-hours", "100", "--checkpoint-every", "10", "--checkpoint-cost", "5"]


@pytest.mark.parametrize("argv, words", [
    (SIM + ["--seq", "-5"], "--seq: must be a positive integer, got -5"),                       # §1 negative --seq
    (["model", "show", "gpt3-125m", "--seq", "-5"], "seq: must be a positive integer, got -5"),
    (SIM + FAILURES + ["--restart-cost", "nan"], "--restart-cost: must be a number >= 0, got nan"),  # §1 NaN
    (SIM + ["--engine", "des", "--straggler", "rank=0,factor=nan"], "--straggler: must be a number > 0, got nan"),
    (SIM + ["--engine", "des", "--straggler", "rank=0,factor=inf"], "--straggler: must be a number > 0, got inf"),
    (SIM + ["--bucket-mb", "1e-6"], "--bucket-mb: 1-byte buckets"),                              # §1 one-byte buckets
    (SIM[:-1] + ["100000000000"], "micro-batches per pipeline and step is past the 65,536"),    # §2 huge batch
    (SIM + ["--sp", "--no-sp"], "--no-sp: given after --sp; give it once"),                      # §3 contradictory flags
    (SIM + ["--overlap", "--no-overlap"], "--no-overlap: given after --overlap; give it once"),
    (SIM + ["--cluster", "dgx-a100"], "--cluster: given after --cluster; give it once"),
    (["memory", "--params", "-7B", "--cluster", "dgx-a100", "--gpus", "8"],                       # §3 negative numbers
     "params: must be a positive parameter count, got '-7B'"),
    (SIM[:-1] + ["-16"], "--gbs: must be a positive integer, got -16"),
    (["collective", "--cluster", "dgx-h100", "--bytes", "-1KB"], "bytes: size must be positive, got '-1KB'"),
    (["collective", "--cluster", "dgx-h100", "--bytes", "1e24"], "more than the limit"),         # §2 beyond any message
])
def test_issue_inputs_are_one_line_errors(argv, words):
    code, _, err = run(argv)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_cluster_without_comm_section_times_a_tiny_all_to_all(tmp_path):
    """§1: a small file cluster with no `comm` section, `--op all-to-all --bytes 8`, divided by zero in
    algbw_GBps (a zero-time collective). Now a positive time or a one-line refusal, never a traceback."""
    path = tmp_path / "small.yaml"
    path.write_text("name: small\nnodes: 1\ngpus_per_node: 2\n"
                    "device: {name: X, peak_tflops: {bf16: 100}, memory_GB: 80, hbm_bw_GBps: 2000}\n"
                    "intra_node: {kind: nvswitch, bw_GBps: 100, latency_us: 1.0}\n")
    code, out, err = run(["collective", "--cluster", str(path), "--op", "all-to-all", "--bytes", "8", "--json"])
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 0:
        rows = json.loads(out)
        assert rows and not bad_numbers(rows) and all(r["time_s"] > 0 for r in rows)


def test_booleans_do_not_pass_as_numbers():
    """§1: `prefetch_batches=True` passed as the number 1."""
    with pytest.raises(SpecError) as err:
        strategy_from_flat({"global_batch": 16, "prefetch_batches": True})
    assert err.value.field == "prefetch_batches"


def test_the_closed_form_prints_no_negative_bubble():
    """§1: `-2e-16` bubbles were printed (float noise of a subtraction); every category is >= 0."""
    model = get_preset("gpt3-125m").with_seq(1024)
    for flat in ({"global_batch": 16, "dp": 8}, {"global_batch": 16, "dp": 2, "tp": 2, "pp": 2},
                 {"global_batch": 32, "dp": 1, "tp": 2, "pp": 4, "schedule": "interleaved", "virtual_stages": 2}):
        result = estimate(load_cluster("dgx-h100"), model, strategy_from_flat(flat))
        assert all(math.isfinite(s) and s >= 0 for s in result.breakdown.values()), result.breakdown


def _parsers():
    import argparse

    from trainplan.__main__ import build_parser

    def walk(parser, path=()):
        yield " ".join(path), parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, path + (name,))
    return list(walk(build_parser()))


def test_every_help_states_its_defaults_and_holds_no_rest_markup():
    """§5: defaults stated in every --help (backend, sizes, algorithms, repeats...), no reST markup."""
    import argparse
    missing, markup = [], []
    for path, parser in _parsers():
        texts = [parser.description or ""]
        for action in parser._actions:
            if not action.option_strings or action.help in (None, argparse.SUPPRESS):
                continue
            texts.append(action.help)
            if action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in action.help.lower():
                missing.append(f"{path} {action.option_strings[-1]}")
        markup += [f"{path}: {t[:60]}" for t in texts if any(m in t for m in ("``", ":func:", ":class:", ":mod:"))]
    assert not missing, missing
    assert not markup, markup


def test_algorithm_help_lists_every_name_and_the_cluster_defaults_agree():
    """§5: the list of valid names in --algorithm's help; --cluster defaulting the same way in every
    command (calibrate fits the local machine: its base is localhost-cpu, and its help says why)."""
    from simulator.collectives import registry
    from trainplan.strategy_flags import DEFAULT_CLUSTER
    defaults = {}
    for path, parser in _parsers():
        for action in parser._actions:
            if "--algorithm" in action.option_strings:
                assert all(name in action.help for name in registry.algorithm_names()), action.help
            if "--cluster" in action.option_strings:
                defaults[path] = action.default or (DEFAULT_CLUSTER if f"default: {DEFAULT_CLUSTER}" in action.help
                                                    else None)
    assert defaults.pop("calibrate") == "localhost-cpu"
    assert set(defaults.values()) == {DEFAULT_CLUSTER} or set(defaults.values()) <= {DEFAULT_CLUSTER, None} and \
        all(v == DEFAULT_CLUSTER for p, v in defaults.items() if p != "validate"), defaults


def test_des_reports_progress_per_step():
    """§2: `simulate --engine des --steps 100000` ran minutes without a word: the DES calls a progress
    callback per step (synchronous) or per worker step (asynchronous PS), ending at the total."""
    from simulator.compile import compile_step
    from simulator.engine.step import simulate
    from simulator.strategy import ParamServerMode, ParamServerSync
    cluster, model = load_cluster("dgx-h100"), get_preset("gpt3-125m").with_seq(512)
    seen = []
    simulate(compile_step(cluster, model, strategy_from_flat({"global_batch": 16, "dp": 8})), cluster, steps=3,
             trace=False, progress=lambda *a: seen.append(a))
    assert seen[0] == ("des steps", 0, 3) and seen[-1] == ("des steps", 3, 3)
    seen.clear()
    async_ps = strategy_from_flat({"global_batch": 16, "dp": 8}).__class__(
        global_batch=16, dp=8, dp_sync=ParamServerSync(mode=ParamServerMode.ASYNC))
    simulate(compile_step(cluster, model, async_ps), cluster, steps=2, trace=False, progress=lambda *a: seen.append(a))
    assert seen[-1] == ("des worker steps", 16, 16)


def test_the_cli_draws_des_progress_on_a_terminal(capsys, monkeypatch):
    import sys
    from trainplan.__main__ import main
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(SIM + ["--engine", "des", "--steps", "3"]) == 0
    err = capsys.readouterr().err
    assert "des steps: 3/3" in err and err.endswith("\r"), repr(err)


def test_a_model_file_error_names_model_not_cluster(tmp_path):
    """§3: `simulate` blamed `--cluster` for errors in the model file (`--cluster: model.kv_heads: ...`)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 128,
                                "vocab_size": 100, "max_position_embeddings": 128}))
    code, _, err = run(["simulate", "--model", str(path), "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16"])
    assert code == 2 and err.startswith("trainplan simulate: error: --model:") and "--cluster" not in err, err


@pytest.mark.parametrize("link", ["intra", "inter"])
@pytest.mark.parametrize("flat", [{"global_batch": 32, "dp": 16}, {"global_batch": 32, "dp": 2, "tp": 4, "pp": 2},
                                  {"global_batch": 32, "dp": 8, "tp": 2, "zero": 3}])
def test_a_step_never_gets_faster_when_a_link_gets_slower(flat, link):
    """§4 invariant, on both engines: halving the NVSwitch port or the NIC bandwidth never shortens a step."""
    from dataclasses import replace

    from simulator.compile import compile_step
    from simulator.engine.step import simulate
    base = load_cluster("dgx-h100", nodes=2)
    if link == "intra":
        slow = replace(base, node=replace(base.node, intra_link=replace(base.node.intra_link,
                                                                         bw_GBps=base.node.intra_link.bw_GBps / 2)))
    else:
        slow = replace(base, network=replace(base.network, link=replace(base.network.link,
                                                                         bw_GBps=base.network.link.bw_GBps / 2)))
    model, strategy = get_preset("gpt3-125m").with_seq(512), strategy_from_flat(flat)
    assert estimate(slow, model, strategy).step_time_s >= estimate(base, model, strategy).step_time_s * (1 - 1e-12)
    des = [simulate(compile_step(c, model, strategy), c, trace=False).step_time_s for c in (base, slow)]
    assert des[1] >= des[0] * (1 - 1e-12)


def test_no_library_or_notebook_switches_the_matplotlib_backend_and_dev_extras_run_notebooks():
    """§5: `matplotlib.use("Agg")` hid the notebooks' plots in Jupyter; the dev extras install what runs them."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    files = [f for d in ("simulator", "planner", "executor", "trainplan", "notebooks", "benchmarks")
             for f in (root / d).rglob("*") if f.suffix in (".py", ".ipynb")]
    assert files and not [str(f) for f in files if "matplotlib.use(" in f.read_text(encoding="utf-8")]
    dev = (root / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    assert "nbclient" in dev and "ipykernel" in dev
