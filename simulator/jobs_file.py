"""The jobs file of ``trainplan simulate --jobs``: several training jobs on one cluster (docs/engine.md).

    cluster: dgx-h100          # a preset name or a cluster file (a path relative to this file)
    nodes: 16                  # the cluster's node count (default: the preset's or the file's)
    network:                   # optional: replaces these keys of the cluster's inter_node section
      oversubscription: 4.0
      nodes_per_leaf: 4
      leaf_uplinks: shared
    job_placement: packed      # packed | scattered: where jobs that give a node count go
    jobs:
      - name: a
        model: gpt3-1.3b       # a model preset, or a config.json / layer-list file (relative to this file)
        nodes: 4               # a node count (placed by `job_placement`), or a list of node indices
        seq: 2048              # optional: the sequence length
        global_batch: 64       # every other key: a strategy flat key (docs/strategy.md)
        tp: 8

Every job gives a node count, or every job lists its nodes. A job uses all GPUs of its nodes. Errors
name the key as ``jobs[1].tp`` or ``network.oversubscription``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from simulator.checks import positive_int
from simulator.cluster._fields import Section
from simulator.cluster._files import parse_yaml
from simulator.cluster.io import load_cluster
from simulator.cluster.placement import PlacementPolicy, check_nodes, place_jobs
from simulator.cluster.spec import Cluster, LeafUplinks
from simulator.engine.jobs import Job
from simulator.errors import SpecError
from simulator.jsonio import read_text
from simulator.strategy.flat import strategy_from_flat

TOP_KEYS = ("cluster", "nodes", "network", "job_placement", "jobs")
NETWORK_KEYS = ("oversubscription", "nodes_per_leaf", "leaf_uplinks", "rail_optimized")
JOB_KEYS = ("name", "model", "nodes", "seq")
"""A job's own keys; the others are strategy flat keys."""


@dataclass(frozen=True)
class JobsFile:
    """A jobs file, read and checked: the shared cluster and each job on its nodes."""

    cluster: Cluster
    jobs: tuple[Job, ...]
    placement: PlacementPolicy | None
    """The policy that placed the jobs; None when every job lists its nodes."""


def load_jobs(path: str | Path, placement: PlacementPolicy | None = None) -> JobsFile:
    """Read a jobs file; ``placement`` replaces the file's policy (``--job-placement``)."""
    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise SpecError(str(p), "a jobs file must end in .yaml or .yml")
    data = parse_yaml(read_text(p, "jobs"), str(p))
    return jobs_from_dict(data, p.parent, placement)


def jobs_from_dict(data, base: Path, placement: PlacementPolicy | None = None) -> JobsFile:
    """The checked jobs of a parsed file; relative paths are taken from ``base``."""
    top = Section(data, "", TOP_KEYS)
    cluster = _cluster(top, base)
    entries = top.raw("jobs")
    if not isinstance(entries, list) or not entries:
        raise SpecError("jobs", "must be a list of jobs (name, model, nodes and strategy keys)")
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise SpecError(f"jobs[{i}]", "must be a mapping (name, model, nodes and strategy keys)")
    sections = entries
    counts = [_nodes(i, e.get("nodes"), cluster.nodes) for i, e in enumerate(sections)]
    kinds = {isinstance(c, int) for c in counts}
    if len(kinds) > 1:
        raise SpecError("jobs[].nodes", "give every job a node count (placed by `job_placement`) or every job a "
                        "list of nodes, not both")
    policy = None
    if kinds == {True}:
        policy = placement or _policy(top)
        hosts = place_jobs(cluster, counts, policy)
    else:
        for field, value in (("job_placement", top.data.get("job_placement")), ("--job-placement", placement)):
            if value is not None:
                raise SpecError(field, "every job lists its nodes; give node counts to place them by a policy")
        hosts = counts
    jobs = tuple(_job(i, e, hosts[i], base) for i, e in enumerate(sections))
    return JobsFile(cluster, jobs, policy)


def _cluster(top: Section, base: Path) -> Cluster:
    name = top.string("cluster")
    local = base / name
    ref = str(local) if name.lower().endswith((".yaml", ".yml", ".json")) and local.exists() else name
    nodes = top.raw("nodes", None)
    try:
        cluster = load_cluster(ref, nodes=None if nodes is None else positive_int("nodes", nodes))
    except SpecError as err:
        raise SpecError("cluster" if err.field != "nodes" else "nodes", str(err)) from None
    if not top.has("network"):
        return cluster
    if cluster.network is None:
        raise SpecError("network", f"cluster {cluster.name!r} has no inter-node network to change (one node)")
    s = Section(top.raw("network"), "network", NETWORK_KEYS)
    net = cluster.network
    try:
        net = replace(net, oversubscription=s.number("oversubscription", net.oversubscription),
                      nodes_per_leaf=s.integer("nodes_per_leaf", net.nodes_per_leaf, minimum=0),
                      leaf_uplinks=s.choice("leaf_uplinks", LeafUplinks, net.leaf_uplinks),
                      rail_optimized=s.boolean("rail_optimized", net.rail_optimized))
    except SpecError as err:
        raise SpecError(err.field.replace("inter_node.", "network."), err.problem) from None
    return replace(cluster, network=net)


def _policy(top: Section) -> PlacementPolicy:
    return top.choice("job_placement", PlacementPolicy, PlacementPolicy.PACKED.value)


def _nodes(i: int, value, cluster_nodes: int) -> int | tuple[int, ...]:
    field = f"jobs[{i}].nodes"
    if isinstance(value, list):
        check_nodes(field, tuple(value), cluster_nodes)
        if not value:
            raise SpecError(field, "lists no node")
        return tuple(value)
    if value is None:
        raise SpecError(field, "missing; give a node count or a list of node indices")
    return positive_int(field, value)


def _job(i: int, entry: dict, nodes: tuple[int, ...], base: Path) -> Job:
    from simulator.workload import load_model

    where = f"jobs[{i}]"
    name = entry.get("name", f"job{i}")
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"{where}.name", f"must be a non-empty string, got {name!r}")
    model = entry.get("model")
    if not isinstance(model, str) or not model.strip():
        raise SpecError(f"{where}.model", "missing; give a model preset or a config.json / layer-list file")
    local = base / model
    try:
        workload = load_model(str(local) if local.is_file() else model)
    except SpecError as err:
        raise SpecError(f"{where}.model", str(err)) from None
    if entry.get("seq") is not None:
        seq = positive_int(f"{where}.seq", entry["seq"])
        if not hasattr(workload, "with_seq"):
            raise SpecError(f"{where}.seq", "this workload has no sequence length to change; leave seq out")
        workload = workload.with_seq(seq)
    try:
        strategy = strategy_from_flat({k: v for k, v in entry.items() if k not in JOB_KEYS})
    except SpecError as err:
        raise SpecError(f"{where}.{err.field}", err.problem) from None
    return Job(name, workload, strategy, nodes)
