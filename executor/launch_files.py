"""Launch files for a plan on a real cluster: a torchrun command line, a SLURM sbatch script, or a
Kubeflow Training Operator ``PyTorchJob`` manifest. Pure text and data: no torch import.

It lives in ``executor/`` because what it writes starts the executor (``python -m executor.run
PLAN`` under torchrun); the simulator must not know the executor's entry point, and the CLI only
parses and prints. Every launcher starts ``gpus_per_node`` processes on each of ``nodes`` nodes,
so the world size is ``nodes × gpus_per_node``, which must equal the plan's worker ranks.

The NCCL environment comes from the plan, never from a guess:

- ``NCCL_ALGO=allreduce:<Ring|Tree|NVLS>`` when the plan names one of NCCL's own all-reduce
  algorithms; the per-collective form (NCCL ≥ 2.24) pins the all-reduce only, since a global
  ``Tree`` would also be forced on all-gather, which the tree does not implement [src: nccl-env].
  ``auto`` leaves NCCL's tuner to choose; the other algorithms (recursive doubling, direct, ...)
  are not NCCL's and are run by the executor itself as point-to-point schedules.
- Across nodes: ``NCCL_IB_DISABLE=0`` on InfiniBand or RoCE NICs, ``=1`` (sockets) on plain
  Ethernet; ``NCCL_NET_GDR_LEVEL=LOC`` (never GPUDirect RDMA) when the cluster has no GPUDirect
  RDMA [src: nccl-env]. The RoCE GID index is left to NCCL's own choice (automatic since 2.21).

Rendezvous: torchrun's c10d rendezvous on the first node, port :data:`RDZV_PORT` [src: torchrun].
SLURM runs one torchrun per node with ``srun`` [src: slurm-sbatch]; the PyTorchJob gets one
master and ``nodes − 1`` workers, whose node rank and master address the operator injects
(``PET_NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) [src: kubeflow-pytorchjob].
"""

from __future__ import annotations

import copy
import json
import shlex
from dataclasses import dataclass
from enum import Enum

from simulator.cluster.spec import CommLibrary, LinkKind
from simulator.errors import SpecError
from simulator.plan_file import Plan
from simulator.strategy import ParamServerSync
from simulator.strategy.sync import AllReduceAlgorithm

RDZV_PORT = 29500
"""torchrun's default master port (``--master-port`` default 29500) [src: torchrun]."""
PLAN_MOUNT = "/etc/trainplan"
"""Where the PyTorchJob mounts the plan (a ConfigMap) inside each container."""
ENTRY = ("-m", "executor.run")
"""The executor's entry point, shared by ``trainplan execute`` and torchrun."""

_NCCL_ALGO = {AllReduceAlgorithm.RING: "Ring", AllReduceAlgorithm.TREE: "Tree", AllReduceAlgorithm.NVLS: "NVLS"}
"""Plan all-reduce algorithm → NCCL_ALGO name (NCCL env docs) [src: nccl-env]."""


class LaunchFormat(Enum):
    """What ``trainplan launch`` writes."""

    TORCHRUN = "torchrun"
    """One torchrun command line, to run on every node."""
    SLURM = "slurm"
    """An sbatch script: ``srun`` starts one torchrun per node, rendezvous on the first node."""
    K8S = "k8s"
    """A ConfigMap holding the plan and a Kubeflow ``PyTorchJob`` (master + workers)."""

    @classmethod
    def parse(cls, text: str) -> "LaunchFormat":
        for member in cls:
            if member.value == text:
                return member
        raise SpecError("format", f"unknown format {text!r}; known: {', '.join(m.value for m in cls)}")


@dataclass(frozen=True)
class EnvVar:
    """One environment variable a launch sets, with the reason the plan implies it."""

    name: str
    value: str
    why: str


@dataclass(frozen=True, kw_only=True)
class LaunchShape:
    """Nodes, processes per node, backend and NCCL environment of one launch."""

    nodes: int
    gpus_per_node: int
    backend: str
    """``nccl`` (one GPU per process) or ``gloo`` (CPU processes)."""
    env: tuple[EnvVar, ...]

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


def launch_shape(plan: Plan, nodes: int | None = None, gpus_per_node: int | None = None) -> LaunchShape:
    """The launch of ``plan``: by default the cluster's GPUs per node (or the plan's GPUs if fewer)
    on as many nodes as the plan needs; ``nodes × gpus_per_node`` must equal the plan's ranks."""
    if isinstance(plan.strategy.dp_sync, ParamServerSync):
        raise SpecError("plan.strategy.dp_sync", "a parameter-server plan runs its server ranks as extra CPU "
                        "processes; run it with trainplan execute, launch files cover all-reduce plans")
    world = plan.layout().world_size
    for name, value in (("nodes", nodes), ("gpus-per-node", gpus_per_node)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SpecError(name, f"must be a positive integer, got {value!r}")
    if gpus_per_node is None:
        gpus_per_node = world // nodes if nodes is not None and world % nodes == 0 else \
            min(plan.cluster.node.gpus_per_node, world)
    if nodes is None:
        nodes = -(-world // gpus_per_node)
    if nodes * gpus_per_node != world:
        raise SpecError("nodes", f"{nodes} nodes × {gpus_per_node} GPUs per node = {nodes * gpus_per_node} "
                        f"processes, but the plan runs {world} ranks; give --nodes and --gpus-per-node whose "
                        f"product is {world}")
    backend = "gloo" if plan.cluster.comm.library is CommLibrary.GLOO else "nccl"
    env = nccl_env(plan, nodes) if backend == "nccl" else ()
    return LaunchShape(nodes=nodes, gpus_per_node=gpus_per_node, backend=backend, env=env)


def nccl_algo(plan: Plan) -> EnvVar | None:
    """``NCCL_ALGO=allreduce:<Ring|Tree|NVLS>`` when the plan's all-reduce algorithm is NCCL's own; None
    for ``auto`` (NCCL's tuner) and for algorithms NCCL does not have [src: nccl-env]."""
    algorithm = getattr(plan.strategy.dp_sync, "algorithm", AllReduceAlgorithm.AUTO)
    if algorithm not in _NCCL_ALGO:
        return None
    return EnvVar("NCCL_ALGO", f"allreduce:{_NCCL_ALGO[algorithm]}",
                  f"the plan's all-reduce algorithm is {algorithm.value} (needs NCCL >= 2.24)")


def nccl_env(plan: Plan, nodes: int) -> tuple[EnvVar, ...]:
    """The NCCL variables the plan implies (see the module docstring) [src: nccl-env]."""
    algo = nccl_algo(plan)
    out = [] if algo is None else [algo]
    network = plan.cluster.network
    if nodes > 1 and network is not None:
        kind = network.link.kind
        if kind in (LinkKind.INFINIBAND, LinkKind.ROCE):
            out.append(EnvVar("NCCL_IB_DISABLE", "0", f"inter-node NICs are {kind.value} (RDMA verbs)"))
        elif kind is LinkKind.ETHERNET:
            out.append(EnvVar("NCCL_IB_DISABLE", "1", "inter-node NICs are plain Ethernet: TCP sockets"))
        if not network.gpudirect_rdma:
            out.append(EnvVar("NCCL_NET_GDR_LEVEL", "LOC", "the cluster has no GPUDirect RDMA: stage through "
                              "host memory"))
    return tuple(out)


def _executor_args(plan_path: str, shape: LaunchShape) -> list[str]:
    return [*ENTRY, plan_path, "--backend", shape.backend]


def render_torchrun(plan_path: str, shape: LaunchShape) -> str:
    """The command to run on every node (``NODE_RANK`` and ``MASTER_ADDR`` set by the user)."""
    env = " ".join(f"{v.name}={shlex.quote(v.value)}" for v in shape.env)
    if shape.nodes == 1:
        where = ["--standalone", "--nnodes", "1"]
    else:
        where = ["--nnodes", str(shape.nodes), "--node-rank", "$NODE_RANK",
                 "--master-addr", "$MASTER_ADDR", "--master-port", str(RDZV_PORT)]
    args = ["torchrun", *where, "--nproc-per-node", str(shape.gpus_per_node),
            *_executor_args(shlex.quote(plan_path), shape)]
    line = " ".join(args)
    return (f"{env} {line}" if env else line) + "\n"


def render_slurm(plan_path: str, shape: LaunchShape, image: str | None = None, job_name: str = "trainplan") -> str:
    """An sbatch script: one task per node, each a torchrun of ``gpus_per_node`` processes; c10d
    rendezvous on the first node of the allocation [src: slurm-sbatch, torchrun]. With ``image``,
    srun runs in that container (the pyxis plugin's ``--container-image``) [src: pyxis]."""
    gpus = f"#SBATCH --gpus-per-node={shape.gpus_per_node}\n" if shape.backend == "nccl" else ""
    exports = "".join(f"export {v.name}={shlex.quote(v.value)}  # {v.why}\n" for v in shape.env)
    container = f" --container-image={shlex.quote(image)} --container-mounts=\"$PWD:$PWD\"" if image else ""
    run = " ".join(["torchrun", "--nnodes", "\"$SLURM_NNODES\"", "--nproc-per-node", str(shape.gpus_per_node),
                    "--rdzv-id", "\"$SLURM_JOB_ID\"", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"\"$head_node:{RDZV_PORT}\"",
                    *_executor_args(shlex.quote(plan_path), shape)])
    return (f"#!/bin/bash\n"
            f"#SBATCH --job-name={job_name}\n"
            f"#SBATCH --nodes={shape.nodes}\n"
            f"#SBATCH --ntasks-per-node=1\n"
            f"{gpus}"
            f"# world size {shape.world_size} = {shape.nodes} nodes x {shape.gpus_per_node} processes\n"
            f"set -euo pipefail\n"
            f"{exports}"
            f"head_node=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
            f"srun{container} {run}\n")


def pytorchjob(plan: Plan, plan_name: str, shape: LaunchShape, image: str, job_name: str = "trainplan") -> list[dict]:
    """A ConfigMap holding the plan and a ``kubeflow.org/v1`` PyTorchJob: 1 master + ``nodes − 1``
    workers, ``nprocPerNode`` processes and GPUs each, the NCCL environment, /dev/shm in memory
    (NCCL and DataLoader workers use shared memory) [src: kubeflow-pytorchjob]."""
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{job_name}-plan"},
              "data": {plan_name: json.dumps(plan.to_dict(), indent=2)}}
    command = ["torchrun", "--nnodes", str(shape.nodes), "--nproc-per-node", str(shape.gpus_per_node),
               "--node-rank", "$(PET_NODE_RANK)", "--master-addr", "$(MASTER_ADDR)", "--master-port",
               "$(MASTER_PORT)", *_executor_args(f"{PLAN_MOUNT}/{plan_name}", shape)]
    container = {"name": "pytorch", "image": image, "command": command,
                 "env": [{"name": v.name, "value": v.value} for v in shape.env],
                 "volumeMounts": [{"name": "plan", "mountPath": PLAN_MOUNT}, {"name": "dshm", "mountPath": "/dev/shm"}]}
    if shape.backend == "nccl":
        container["resources"] = {"limits": {"nvidia.com/gpu": shape.gpus_per_node}}
    template = {"spec": {"containers": [container],
                         "volumes": [{"name": "plan", "configMap": {"name": f"{job_name}-plan"}},
                                     {"name": "dshm", "emptyDir": {"medium": "Memory"}}]}}
    replicas = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
    if shape.nodes > 1:
        replicas["Worker"] = {"replicas": shape.nodes - 1, "restartPolicy": "Never",
                              "template": copy.deepcopy(template)}  # a copy: no YAML aliases
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": job_name},
           "spec": {"nprocPerNode": str(shape.gpus_per_node), "pytorchReplicaSpecs": replicas}}
    return [config, job]


def render_k8s(plan: Plan, plan_name: str, shape: LaunchShape, image: str, job_name: str = "trainplan") -> str:
    """:func:`pytorchjob` as a two-document YAML file (the plan as a literal block, readable)."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _text(dumper, value: str):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    _Dumper.add_representer(str, _text)
    return yaml.dump_all(pytorchjob(plan, plan_name, shape, image, job_name), Dumper=_Dumper, sort_keys=False)
