"""The files of examples/ that the README's commands use load and run (so the README's paths exist)."""

from pathlib import Path

from trainplan.__main__ import main

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_files_exist_and_run(capsys):
    readme = (ROOT / "README.md").read_text()
    for name in ("examples/my-cluster.yaml", "examples/llama-2-7b.config.json"):
        assert name in readme and (ROOT / name).is_file()
    assert main(["cluster", "show", str(ROOT / "examples/my-cluster.yaml"), "--json"]) == 0
    assert main(["model", "show", str(ROOT / "examples/llama-2-7b.config.json")]) == 0
    assert main(["simulate", "--model", "llama2-7b", "--cluster", str(ROOT / "examples/my-cluster.yaml"), "--gpus",
                 "8", "--gbs", "16", "--zero", "1"]) == 0
    assert main(["model", "show", str(ROOT / "examples/small-mlp.layers.json")]) == 0
    capsys.readouterr()
