"""``trainplan model list|show``: output, JSON, and one-line errors with exit code 2."""

import json
from pathlib import Path


from trainplan.__main__ import main

DATA = Path(__file__).parent / "data"


def test_list_json_has_every_preset(capsys):
    assert main(["model", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    names = {r["name"] for r in rows}
    assert {"gpt3-175b", "llama2-7b", "llama3.1-405b", "megatron-1t"} <= names


def test_show_preset_json(capsys):
    assert main(["model", "show", "llama3-8b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"]["total"] == 8_030_261_248
    assert out["shape"]["kv_heads"] == 8
    assert out["flops_per_token"]["train"] > 6 * 8_030_261_248 * 0.9


def test_show_seq_changes_attention_flops(capsys):
    main(["model", "show", "gpt3-175b", "--json", "--seq", "4096"])
    a4096 = json.loads(capsys.readouterr().out)["flops_per_token"]["forward_per_layer"]["attention"]
    main(["model", "show", "gpt3-175b", "--json"])
    a2048 = json.loads(capsys.readouterr().out)["flops_per_token"]["forward_per_layer"]["attention"]
    assert a4096 == 2 * a2048


def test_show_config_text(capsys):
    assert main(["model", "show", str(DATA / "gpt2.config.json")]) == 0
    assert "124,439,808" in capsys.readouterr().out


def test_show_params_only(capsys):
    assert main(["model", "show", "--params", "7.5e9", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"] == 7_500_000_000


def _one_line_error(capsys, argv, *needles):
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in err
    return err


def test_unknown_model_lists_known(capsys):
    _one_line_error(capsys, ["model", "show", "gpt5"], "unknown model", "llama2-7b")


def test_malformed_config_names_field(capsys, tmp_path):
    cfg = json.loads((DATA / "mistral-7b.config.json").read_text())
    del cfg["num_hidden_layers"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    _one_line_error(capsys, ["model", "show", str(path)], "num_hidden_layers")


def test_model_and_params_together_is_usage_error(capsys):
    _one_line_error(capsys, ["model", "show", "gpt3-175b", "--params", "1e9"], "one of them")


def test_bad_seq(capsys):
    _one_line_error(capsys, ["model", "show", "gpt3-175b", "--seq", "0"], "seq")
