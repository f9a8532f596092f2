"""``trainplan launch``: torchrun line, sbatch script (bash -n) and PyTorchJob (YAML) for a plan, with the
world size, replica counts, GPU resources and NCCL environment the plan implies; bad input is one line."""

import json
import shutil
import subprocess

import pytest
import yaml

from executor.launch_files import launch_shape, nccl_env
from simulator.plan_file import load_plan
from trainplan.__main__ import main


def _plan(tmp_path, name="plan.json", *extra, cluster="dgx-h100", nodes="2", gpus="16"):
    path = tmp_path / name
    argv = ["simulate", "--model", "gpt3-125m", "--cluster", cluster, "--nodes", nodes, "--gpus", gpus,
            "--tp", "2", "--pp", "2", "--gbs", "16", *extra, "--save-plan", str(path)]
    assert main(argv) == 0
    return path


def _launch(capsys, *argv):
    assert main(["launch", *map(str, argv)]) == 0
    return capsys.readouterr().out


def test_torchrun_line_names_nodes_processes_and_algorithm(tmp_path, capsys):
    plan = _plan(tmp_path, "plan.json", "--dp-algorithm", "ring")
    capsys.readouterr()
    line = _launch(capsys, plan, "--format", "torchrun")
    assert line.startswith("NCCL_ALGO=allreduce:Ring NCCL_IB_DISABLE=0 torchrun ")
    words = line.split()
    assert words[words.index("--nnodes") + 1] == "2" and words[words.index("--nproc-per-node") + 1] == "8"
    assert "-m executor.run" in line and "--backend nccl" in line


def test_sbatch_script_is_valid_bash_with_world_size(tmp_path, capsys):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    plan = _plan(tmp_path)
    capsys.readouterr()
    out = tmp_path / "job.sbatch"
    assert main(["launch", str(plan), "--format", "slurm", "--nodes", "4", "--gpus-per-node", "4",
                 "--out", str(out)]) == 0
    text = out.read_text()
    subprocess.run(["bash", "-n", str(out)], check=True)
    assert "#SBATCH --nodes=4" in text and "#SBATCH --gpus-per-node=4" in text
    assert "--nproc-per-node 4" in text and "--rdzv-endpoint \"$head_node:29500\"" in text
    assert "NCCL_ALGO" not in text  # auto: NCCL's tuner chooses


def test_pytorchjob_parses_with_master_workers_and_gpus(tmp_path, capsys):
    plan = _plan(tmp_path, "p.json", "--dp-algorithm", "tree")
    capsys.readouterr()
    docs = list(yaml.safe_load_all(_launch(capsys, plan, "--format", "k8s", "--image", "reg/tp:1")))
    config, job = docs
    assert config["kind"] == "ConfigMap"
    assert json.loads(config["data"]["p.json"])["gpus"] == 16  # the plan travels with the job
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1
    per_node = int(job["spec"]["nprocPerNode"])
    assert per_node * (specs["Master"]["replicas"] + specs["Worker"]["replicas"]) == 16
    container = specs["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reg/tp:1" and container["resources"]["limits"]["nvidia.com/gpu"] == per_node
    assert {"name": "NCCL_ALGO", "value": "allreduce:Tree"} in container["env"]
    assert container["command"][container["command"].index("--nnodes") + 1] == "2"


def test_single_node_job_has_no_workers_and_no_network_env(tmp_path, capsys):
    plan = _plan(tmp_path, "one.json", nodes="1", gpus="8")
    capsys.readouterr()
    job = list(yaml.safe_load_all(_launch(capsys, plan, "--format", "k8s", "--image", "x")))[1]
    assert set(job["spec"]["pytorchReplicaSpecs"]) == {"Master"}
    assert "--standalone" in _launch(capsys, plan, "--format", "torchrun")
    assert nccl_env(load_plan(plan), 1) == ()


def test_cluster_network_sets_ib_and_gpudirect(tmp_path):
    plan = load_plan(_plan(tmp_path, "roce.json", cluster="h100-roce"))
    assert {(v.name, v.value) for v in launch_shape(plan).env} == {("NCCL_IB_DISABLE", "0")}
    from dataclasses import replace

    no_gdr = replace(plan, cluster=replace(plan.cluster, network=replace(plan.cluster.network, gpudirect_rdma=False)))
    assert ("NCCL_NET_GDR_LEVEL", "LOC") in {(v.name, v.value) for v in nccl_env(no_gdr, 2)}


def _one_line_error(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in err


def test_bad_input_is_one_line(tmp_path, capsys):
    plan = str(_plan(tmp_path))
    capsys.readouterr()
    _one_line_error(capsys, ["launch", plan, "--format", "k8s"], "image")
    _one_line_error(capsys, ["launch", plan, "--format", "slurm", "--nodes", "3"], "product is 16")
    _one_line_error(capsys, ["launch", plan, "--format", "slurm", "--nodes", "0"], "positive")
    _one_line_error(capsys, ["launch", str(tmp_path / "none.json"), "--format", "slurm"], "no such file")
    _one_line_error(capsys, ["launch", plan, "--format", "slurm", "--out", str(tmp_path / "no" / "x.sh")],
                    "does not exist")
    _one_line_error(capsys, ["launch", plan, "--format", "k8s", "--image", "x", "--job-name", "Bad_Name"],
                    "job-name")
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", plan, "--format", "pbs"])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err
