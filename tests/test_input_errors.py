"""Issue 15: input that used to end in a traceback (or a hang) is one line on stderr and exit code 2.

Each case is run as the user ran it (``trainplan ...`` in process) and, where a library entry point
is behind it, called directly: only :class:`SpecError` may come out, and it names the field.
"""

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.cluster.io import load_cluster, read_cluster_file
from simulator.cluster._files import parse_yaml
from simulator.errors import SpecError
from simulator.workload import load_model, spec_from_hf_config
from trainplan.__main__ import main

MINIMAL_YAML = (Path(__file__).parent / "data" / "minimal_cluster.yaml").read_text()
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096}
"""Llama-2-7B's config.json shape keys (meta-llama/Llama-2-7b-hf, config.json)."""

DEEP = 100_000
"""Nesting depth past Python's recursion limit (1000) in both the JSON and the YAML parser."""


def one_line_error(capsys, argv: list[str], command: str) -> str:
    """Run ``trainplan argv``; assert exit 2 and one ``trainplan CMD: error: ...`` line; return it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"trainplan {command}: error: "), err
    return err


def unreadable_files(tmp_path: Path, suffix: str) -> dict[str, Path]:
    """Files no loader can read, each named for what is wrong with it."""
    files = {"binary": tmp_path / f"binary{suffix}", "latin1": tmp_path / f"latin1{suffix}",
             "directory": tmp_path / f"folder{suffix}", "deep": tmp_path / f"deep{suffix}"}
    files["binary"].write_bytes(bytes(range(256)) * 4)
    files["latin1"].write_bytes("name: caf\u00e9\n".encode("latin-1"))
    files["directory"].mkdir()
    files["deep"].write_text("[" * DEEP + "]" * DEEP if suffix == ".json" else "a: " + "[" * DEEP)
    return files


EXPECTED = {"binary": "is not UTF-8 text", "latin1": "is not UTF-8 text", "directory": "is a directory",
            "deep": "nested too deeply"}


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_unreadable_cluster_file(tmp_path, capsys, suffix, kind):
    path = unreadable_files(tmp_path, suffix)[kind]
    err = one_line_error(capsys, ["cluster", "show", str(path)], "cluster")
    assert EXPECTED[kind] in err and str(path) in err
    with pytest.raises(SpecError, match=EXPECTED[kind]):
        read_cluster_file(path)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_unreadable_model_file(tmp_path, capsys, kind):
    path = unreadable_files(tmp_path, ".json")[kind]
    err = one_line_error(capsys, ["model", "show", str(path)], "model")
    assert EXPECTED[kind] in err and str(path) in err
    with pytest.raises(SpecError, match=EXPECTED[kind]):
        load_model(str(path))


def test_missing_files_say_so(tmp_path, capsys):
    missing = tmp_path / "nope.json"
    assert "no such file" in one_line_error(capsys, ["model", "show", str(missing)], "model")
    assert "no such file" in one_line_error(capsys, ["cluster", "show", str(missing)], "cluster")


def test_calibrate_refuses_an_unreadable_base_cluster_before_measuring(tmp_path, capsys):
    path = unreadable_files(tmp_path, ".yaml")["binary"]
    err = one_line_error(capsys, ["calibrate", "--cluster", str(path), "--out", str(tmp_path / "o.yaml")],
                         "calibrate")
    assert "is not UTF-8 text" in err
    assert not (tmp_path / "o.yaml").exists()


@pytest.mark.parametrize("text, message", [
    ("a: 2024-13-45\n", "month must be in 1..12"),   # PyYAML builds a date and datetime raises ValueError
    ("? [a, b]\n: 1\n", "a list cannot be a key"),   # unhashable key: TypeError in the duplicate-key check
    ("? {a: 1}\n: 1\n", "a dict cannot be a key"),
    ("a: " + "9" * 5000 + "\n", "4300 digits"),      # Python's int-from-text limit (a ValueError)
])
def test_yaml_that_pyyaml_cannot_build_is_one_error(text, message):
    with pytest.raises(SpecError, match=message) as err:
        parse_yaml(text, "x.yaml")
    assert err.value.field == "x.yaml"


def test_json_integer_over_the_digit_limit(tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"nodes": ' + "9" * 5000 + "}")
    with pytest.raises(SpecError, match="4300 digits"):
        load_cluster(str(path))
    with pytest.raises(SpecError, match="4300 digits"):
        load_model(str(path))


@pytest.mark.parametrize("key, value", [
    ("torch_dtype", ["bfloat16"]),        # unhashable: TypeError in the dtype lookup before
    ("torch_dtype", {"a": 1}),
    ("model_type", ["llama"]),
    ("model_type", 7),
    ("hidden_size", "4096"),
    ("hidden_size", 4096.0),
    ("hidden_size", True),
    ("num_key_value_heads", [8]),
    ("tie_word_embeddings", "false"),     # bool("false") was True: silently tied
    ("attention_bias", 1),
    ("attention_dropout", "0.1"),
])
def test_hf_config_wrongly_typed_field_is_named(key, value):
    cfg = dict(LLAMA, **{key: value})
    with pytest.raises(SpecError) as err:
        spec_from_hf_config(cfg, "llama", "cfg.json")
    assert err.value.field == f"cfg.json: {key}"


def test_hf_config_flags_still_read_as_before():
    assert spec_from_hf_config(dict(LLAMA, tie_word_embeddings=True), "m").tied_embeddings is True
    assert spec_from_hf_config(dict(LLAMA, tie_word_embeddings=None), "m").tied_embeddings is False
    assert spec_from_hf_config(LLAMA, "m").tied_embeddings is False   # transformers' LlamaConfig default
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
            "vocab_size": 50257}
    assert spec_from_hf_config(gpt2, "gpt2").tied_embeddings is True  # GPT2Config default


def test_hf_config_name_from_file(tmp_path):
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(dict(LLAMA, _name_or_path=["not", "a", "name"])))
    assert load_model(str(folder / "config.json")).name == "my-llama"
    (folder / "config.json").write_text(json.dumps(dict(LLAMA, _name_or_path="org/llama")))
    assert load_model(str(folder / "config.json")).name == "org/llama"


@pytest.mark.parametrize("field, value", [("params", "Infinity"), ("fwd_flops", "Infinity"),
                                          ("fwd_flops", "NaN"), ("activation_bytes", "-Infinity")])
def test_layer_list_non_finite_values(tmp_path, field, value):
    layer = {"name": "fc", "params": 10, "fwd_flops": 20.0, "activation_bytes": 40}
    text = json.dumps({"name": "m", "layers": [layer]}).replace(f'"{field}": {layer[field]}', f'"{field}": {value}')
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_model(str(path))
    assert err.value.field == f"layers[fc].{field}"


# --- numbers: sizes and parameter counts ---------------------------------------------------------------

@pytest.mark.parametrize("argv", [["model", "show", "--params", "1e400"],
                                  ["memory", "--params", "1e400", "--gpus", "8"],
                                  ["model", "show", "--params", "2e15"]])
def test_params_beyond_the_limit(capsys, argv):
    err = one_line_error(capsys, argv, argv[0])
    assert "params: " in err and "limit of 1e+15 parameters" in err


def test_params_at_the_limit_still_load():
    from simulator.workload import parse_param_count
    assert parse_param_count("1e15") == 10**15
    assert parse_param_count("1000T") == 10**15


@pytest.mark.parametrize("text, message", [
    ("1e400", "more than the limit of 1TiB"),        # inf as a float: OverflowError in int() before
    ("1e24", "more than the limit of 1TiB"),         # printed as 953674316406249984MB before
    ("2TB", "more than the limit"),
    ("1.1TiB", "more than the limit"),
    ("0.4", "at least 1 byte"),                      # rounded to 0 before
    ("0.5", "at least 1 byte"),                      # round-half-even: round(0.5) == 0
    ("1e-9KB", "at least 1 byte"),
])
def test_parse_size_limits(text, message):
    from simulator.units import parse_size
    with pytest.raises(SpecError, match=message):
        parse_size(text)


def test_parse_size_bounds_are_inclusive():
    from simulator.units import MAX_MESSAGE_BYTES, parse_size
    assert parse_size("1TiB") == MAX_MESSAGE_BYTES == 1_099_511_627_776 and parse_size("1TB") == 10**12
    assert parse_size("0.6") == 1 and parse_size("1") == 1


@pytest.mark.parametrize("text, message", [
    ("1KB...1GB", "two dots"),          # read as 1KB..0.1GB before
    ("0.4..1GB", "at least 1 byte"),    # lo rounded to 0 doubled 0 forever before
    ("1..1e24", "more than the limit"),
    ("1KB..2KB..4KB", "cannot read size"),
])
def test_parse_size_range_refuses(text, message):
    from simulator.units import parse_size_range
    with pytest.raises(SpecError, match=message):
        parse_size_range(text)


def test_widest_range_is_41_sizes():
    from simulator.units import parse_size_range
    sizes = parse_size_range("1..1TiB")         # 2**0 .. 2**40
    assert len(sizes) == 41 and sizes[-1] == 2**40
    decimal = parse_size_range("1..1TB")        # 2**0 .. 2**39, then 10**12 itself
    assert len(decimal) == 41 and decimal[-2:] == [2**39, 10**12]


@pytest.mark.parametrize("text, nbytes", [("64KB", 64_000), ("64KiB", 65_536), ("1.5MB", 1_500_000),
                                          ("1MiB", 2**20), ("2GB", 2 * 10**9), ("2gib", 2 * 2**30), ("512B", 512),
                                          ("4096", 4096)])
def test_sizes_are_decimal_unless_they_say_binary(text, nbytes):
    """Issue 15 §3: ``--bytes 64KB`` was 65,536 bytes while docs/cli.md said sizes are decimal. One
    convention now: KB/MB/GB/TB are powers of 10, KiB/MiB/GiB/TiB powers of 2 (IEC 80000-13)."""
    from simulator.units import parse_size
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["1K", "64M", "1G", "2t"])
def test_one_letter_units_are_refused_as_ambiguous(text):
    from simulator.units import parse_size
    with pytest.raises(SpecError, match=r"is ambiguous: write [KMGT]B \(10\^\d+ bytes\) or [KMGT]iB"):
        parse_size(text)


@given(st.integers(1, 2**40))
def test_printed_sizes_read_back_exactly(nbytes):
    """What format_size prints is exact and in parse_size's units, so no printed size is ambiguous."""
    from simulator.units import format_size, parse_size
    assert parse_size(format_size(nbytes)) == nbytes


def test_printed_units_tell_decimal_from_binary():
    from simulator.units import format_size
    assert [format_size(n) for n in (64_000, 65_536, 10**9, 2**30, 1500)] == ["64KB", "64KiB", "1GB", "1GiB", "1500B"]


def test_ranges_end_with_their_upper_bound():
    from simulator.units import parse_size_range
    assert parse_size_range("1KB..1MB") == [1000 * 2**k for k in range(10)] + [10**6]
    assert parse_size_range("1KiB..1MiB") == [2**k for k in range(10, 21)]


@pytest.mark.parametrize("value, message", [("1e24", "more than the limit"), ("1KB...1GB", "two dots"),
                                            ("0.4", "at least 1 byte")])
def test_collective_bytes_refused(capsys, value, message):
    err = one_line_error(capsys, ["collective", "--cluster", "dgx-h100", "--bytes", value], "collective")
    assert "bytes: " in err and message in err


# --- cluster numbers the schema used to accept ---------------------------------------------------------

def minimal_with(old: str, new: str) -> str:
    assert old in MINIMAL_YAML
    return MINIMAL_YAML.replace(old, new, 1)


@pytest.mark.parametrize("old, new, field, message", [
    ("memory_GB: 80", "memory_GB: 1.0e+300", "device.memory_GB", "at most 1e\\+15"),   # OverflowError in _bytes
    ("memory_GB: 80", "memory_GB: .inf", "device.memory_GB", "at most 1e\\+15"),
    ("bw_GBps: 450", "bw_GBps: .inf", "intra_node.bw_GBps", "at most 1e\\+15"),    # printed as inf GB/s
    ("bw_GBps: 450", "bw_GBps: .nan", "intra_node.bw_GBps", "positive number"),
    ("bw_GBps: 450", "bw_GBps: 5.0e-324", "intra_node.bw_GBps", "at least 1e-09"),  # times of inf
    ("latency_us: 0.6", "latency_us: .inf", "intra_node.latency_us", "at most 1e\\+15"),
    ("nodes: 4", "nodes: 10000000000000000", "nodes", "at most 1e\\+15"),
])
def test_cluster_file_numbers_out_of_range(tmp_path, capsys, old, new, field, message):
    path = tmp_path / "c.yaml"
    path.write_text(minimal_with(old, new))
    with pytest.raises(SpecError, match=message) as err:
        load_cluster(str(path))
    assert err.value.field == field
    one_line_error(capsys, ["cluster", "show", str(path)], "cluster")


def test_cluster_number_limits_are_inclusive(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(minimal_with("memory_GB: 80", "memory_GB: 1.0e+15"))
    assert load_cluster(str(path)).device.memory_bytes == int(1e15 * 1e9)   # 1e15 GB, in bytes
    path.write_text(minimal_with("bw_GBps: 450", "bw_GBps: 1.0e-9"))
    assert load_cluster(str(path)).node.intra_link.bw_GBps == 1e-9


def test_world_size_limit(capsys):
    err = one_line_error(capsys, ["cluster", "show", "dgx-h100", "--nodes", "1000000000"], "cluster")
    assert "nodes: 1000000000 nodes × 8 GPUs = 8,000,000,000 GPUs, more than the limit of 100,000" in err
    one_line_error(capsys, ["cluster", "show", "dgx-h100", "--nodes", "12501"], "cluster")   # 100,008 GPUs
    assert load_cluster("dgx-h100", nodes=12_500).world_size == 100_000                     # at the limit


def test_collective_rank_count_beyond_the_world_is_refused_without_building_it(capsys):
    # a list of 8e9 ranks was a MemoryError; the cluster is refused before any list is built
    err = one_line_error(capsys, ["collective", "--cluster", "dgx-h100", "--nodes", "1000000000"], "collective")
    assert "more than the limit of 100,000" in err
    err = one_line_error(capsys, ["collective", "--cluster", "dgx-h100", "--ranks", "10000000000000"], "collective")
    assert "ranks: 10000000000000 ranks but the cluster has 8 GPUs" in err


# --- output paths, checked before the work starts -----------------------------------------------------

def bad_outputs(tmp_path: Path, suffix: str) -> dict[str, tuple[Path, str]]:
    """Output paths that cannot be written, with the words of the error each must give."""
    folder = tmp_path / f"folder{suffix}"
    folder.mkdir()
    return {"wrong suffix": (tmp_path / "out.txt", "must end in"),
            "missing folder": (tmp_path / "no" / "such" / f"x{suffix}", "does not exist"),
            "directory": (folder, "is a directory")}


@pytest.mark.parametrize("case", ["wrong suffix", "missing folder", "directory"])
def test_collective_plot_path_checked_before_estimating(tmp_path, capsys, monkeypatch, case):
    import trainplan.cmd_collective as cmd
    path, words = bad_outputs(tmp_path, ".png")[case]
    monkeypatch.setattr(cmd, "load_cluster", lambda *a, **k: pytest.fail("the cluster was loaded first"))
    err = one_line_error(capsys, ["collective", "--cluster", "dgx-h100", "--plot", str(path)], "collective")
    assert err.startswith("trainplan collective: error: plot: ") and words in err
    assert not (tmp_path / "no").exists()          # no folders created


def test_collective_plot_still_written(tmp_path, capsys):
    path = tmp_path / "c.svg"
    assert main(["collective", "--cluster", "dgx-h100", "--bytes", "1MB", "--plot", str(path)]) == 0
    assert path.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize("case", ["wrong suffix", "missing folder", "directory"])
def test_calibrate_out_checked_before_measuring(tmp_path, capsys, monkeypatch, case):
    import executor.calibrate
    path, words = bad_outputs(tmp_path, ".yaml")[case]
    monkeypatch.setattr(executor.calibrate, "calibrate", lambda **k: pytest.fail("measured before checking --out"))
    err = one_line_error(capsys, ["calibrate", "--out", str(path)], "calibrate")
    assert err.startswith("trainplan calibrate: error: out: ") and words in err


# --- sizes in model files: finite FLOPs and bytes ------------------------------------------------------

@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size",
                                 "max_position_embeddings"])
def test_hf_config_dimension_limit(key):
    # vocab_size 10**400 loaded, then `model show` overflowed in logits_fwd_flops (2.0 * h * vocab)
    with pytest.raises(SpecError, match="must be at most 2,147,483,647") as err:
        spec_from_hf_config(dict(LLAMA, **{key: 10**400}), "m", "cfg.json")
    assert err.value.field == f"cfg.json: {key}"


def test_hf_config_parameter_limit():
    # 2**20 hidden × 2**16 layers: 12·h²·l ≈ 8.6e17 parameters, past the 1e15 limit
    cfg = dict(LLAMA, hidden_size=2**20, num_attention_heads=2**10, intermediate_size=2**22,
               num_hidden_layers=2**16)
    with pytest.raises(SpecError, match="more than the limit of 1e\\+15") as err:
        spec_from_hf_config(cfg, "m", "cfg.json")
    assert err.value.field == "cfg.json"


@pytest.mark.parametrize("field, value, message", [
    ("params", 10**400, "at most 1e\\+15$"),
    ("params", 2e15, "at most 1e\\+15, got 2000000000000000.0"),
    ("fwd_flops", 1e19, "at most 1e\\+18, got 1e\\+19"),
    ("activation_bytes", 10**400, "at most 1e\\+18$"),
])
def test_layer_list_limits(tmp_path, capsys, field, value, message):
    layer = {"name": "fc", "params": 10, "fwd_flops": 20.0, "activation_bytes": 40, field: value}
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"name": "m", "layers": [layer]}))
    with pytest.raises(SpecError, match=message) as err:
        load_model(str(path))
    assert err.value.field == f"layers[fc].{field}"
    one_line_error(capsys, ["model", "show", str(path)], "model")
