"""Flags of ``trainplan simulate`` → the checked inputs (workload, cluster, strategy, layout).

Flags become flat strategy keys (:mod:`simulator.strategy.flat`); a ``--profile`` supplies defaults
and every flag given overrides it. ``--gpus`` counts worker GPUs (dp·tp·pp); the cluster gets
``--nodes`` nodes, or just enough for the workers plus any dedicated parameter-server nodes.
Every error names the flag the user typed (``global_batch`` → ``--gbs``).

``--straggler`` takes ``rank=R,factor=F`` (rank R computes F× slower; repeatable) or
``prob=P,factor=F`` (each rank slowed F× in a step with probability P, seeded by ``--seed``).
"""

from __future__ import annotations

from simulator.cluster.io import load_cluster
from simulator.errors import SpecError
from simulator.profiles import apply_profile
from simulator.schedules import ScheduleKind
from simulator.strategy import Strategy, build_layout
from simulator.strategy.flat import strategy_from_flat
from simulator.strategy.sync import ParamServerSync
from simulator.workload import load_model
from trainplan import cli_common

MiB = 1024 * 1024
"""``--bucket-mb`` counts MiB, as torch's ``bucket_cap_mb`` (bucket_cap_mb · 1024 · 1024 bytes)."""

DEFAULT_INTERLEAVED_V = 2
"""Virtual stages per rank when ``--schedule interleaved`` comes without ``--virtual-stages`` (as ``memory``)."""

FLAG_OF = {
    "global_batch": "--gbs", "micro_batch": "--mbs", "dp": "--dp", "tp": "--tp", "pp": "--pp", "zero": "--zero",
    "offload": "--offload", "placement": "--placement", "schedule": "--schedule",
    "virtual_stages": "--virtual-stages", "layer_split": "--pp", "recompute": "--recompute", "attention": "--attention",
    "sequence_parallel": "--sp", "allreduce_algorithm": "--dp-algorithm", "bucket_bytes": "--bucket-mb",
    "bucket_params": "--bucket-mb", "overlap_grad_reduce": "--no-overlap", "ps_mode": "--param-server",
    "staleness_steps": "--staleness", "ps_shards": "--servers", "ps_server_nodes": "--server-nodes",
    "speed_factors": "--straggler", "slowdown_prob": "--straggler", "slowdown_factor": "--straggler",
    "seed": "--seed", "mtbf_gpu_hours": "--mtbf-hours", "checkpoint_interval_steps": "--checkpoint-every",
    "checkpoint_cost_s": "--checkpoint-cost", "restart_cost_s": "--restart-cost",
    "bytes_per_sample": "--bytes-per-sample", "data_source": "--data-source", "model": "--model", "seq": "--seq",
    "nodes": "--nodes", "gpus": "--gpus", "profile": "--profile", "cluster": "--cluster",
}
"""Strategy field → the flag that sets it, so an error names what the user typed."""

FAILURE_FLAGS = {"mtbf_hours": ("--mtbf-hours", "mtbf_gpu_hours"),
                 "checkpoint_every": ("--checkpoint-every", "checkpoint_interval_steps"),
                 "checkpoint_cost": ("--checkpoint-cost", "checkpoint_cost_s"),
                 "restart_cost": ("--restart-cost", "restart_cost_s")}
"""argparse dest → (flag, flat strategy key) of the failure model; all four or none."""


def _flag_error(err: SpecError) -> SpecError:
    """``err`` with its field replaced by the flag that sets it (``global_batch`` → ``--gbs``)."""
    base = err.field.split("[")[0].split(".")[0]
    if base in FLAG_OF:
        return SpecError(FLAG_OF[base], err.problem)
    return err


def parse_straggler(text: str) -> dict[str, float]:
    """``rank=3,factor=1.5`` → {"rank": 3, "factor": 1.5}; ``prob=0.05,factor=2`` → {"prob": .05, "factor": 2}."""
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("rank", "factor", "prob"):
            raise SpecError("--straggler", f"cannot read {part!r} in {text!r}; write rank=R,factor=F or "
                            "prob=P,factor=F")
        try:
            out[key] = int(value) if key == "rank" else float(value)
        except ValueError:
            raise SpecError("--straggler", f"{key}={value!r} is not a number; write rank=3,factor=1.5") from None
    if "factor" not in out or ("rank" in out) == ("prob" in out):
        raise SpecError("--straggler", f"{text!r} needs factor=F and exactly one of rank=R or prob=P")
    return out


def straggler_keys(specs: list[str], world: int, seed: int | None) -> dict:
    """Flat straggler keys from ``--straggler`` specs: fixed per-rank factors and/or one random slowdown."""
    factors = [1.0] * world
    keys: dict = {} if seed is None else {"seed": seed}
    for spec in map(parse_straggler, specs):
        if "rank" in spec:
            rank = int(spec["rank"])
            if not 0 <= rank < world:
                raise SpecError("--straggler", f"rank {rank} is outside the {world} worker GPUs (0..{world - 1})")
            factors[rank] = spec["factor"]
        elif "slowdown_prob" in keys:
            raise SpecError("--straggler", "give one prob=P,factor=F random slowdown, not several")
        else:
            keys.update(slowdown_prob=spec["prob"], slowdown_factor=spec["factor"])
    if any(f != 1.0 for f in factors):
        keys["speed_factors"] = tuple(factors)
    return keys


def _failure_keys(args) -> dict:
    given = {dest: getattr(args, dest) for dest in FAILURE_FLAGS if getattr(args, dest) is not None}
    if given and len(given) < len(FAILURE_FLAGS):
        missing = [FAILURE_FLAGS[d][0] for d in FAILURE_FLAGS if d not in given]
        raise SpecError(missing[0], f"the failure model needs {', '.join(f for f, _ in FAILURE_FLAGS.values())} "
                        f"together; missing {', '.join(missing)}")
    return {FAILURE_FLAGS[d][1]: v for d, v in given.items()}


def strategy_keys(args) -> dict:
    """The flat strategy keys of the flags the user gave (a flag left out leaves the key to the profile)."""
    keys: dict = {"global_batch": args.gbs}
    for flag, key in (("mbs", "micro_batch"), ("dp", "dp"), ("tp", "tp"), ("pp", "pp"), ("zero", "zero"),
                      ("placement", "placement"), ("schedule", "schedule"), ("virtual_stages", "virtual_stages"),
                      ("offload", "offload"), ("recompute", "recompute"), ("attention", "attention"),
                      ("sp", "sequence_parallel"),
                      ("dp_algorithm", "allreduce_algorithm"), ("overlap", "overlap_grad_reduce"),
                      ("servers", "ps_shards"), ("server_nodes", "ps_server_nodes"),
                      ("staleness", "staleness_steps"), ("bytes_per_sample", "bytes_per_sample"),
                      ("data_source", "data_source")):
        if getattr(args, flag) is not None:
            keys[key] = getattr(args, flag)
    if args.schedule == ScheduleKind.INTERLEAVED.value and args.virtual_stages is None:
        keys["virtual_stages"] = DEFAULT_INTERLEAVED_V
    if args.bucket_mb is not None:
        if args.bucket_mb <= 0:
            raise SpecError("--bucket-mb", f"must be positive, got {args.bucket_mb:g}")
        keys["bucket_bytes"] = round(args.bucket_mb * MiB)
    if args.param_server is not None:
        for flag, value in (("--dp-algorithm", args.dp_algorithm), ("--bucket-mb", args.bucket_mb),
                            ("--no-overlap", args.overlap)):
            if value is not None:
                raise SpecError(flag, "applies to all-reduce, not to --param-server; drop one of them")
        keys.update(dp_sync="param-server", ps_mode=args.param_server)
    elif args.profile != "tf-ps":
        for flag, dest in (("--servers", "servers"), ("--server-nodes", "server_nodes"), ("--staleness", "staleness")):
            if getattr(args, dest) is not None:
                raise SpecError(flag, "applies to a parameter server: add --param-server sync|async")
    keys.update(_failure_keys(args))
    return keys


def build_strategy(args, world: int) -> Strategy:
    """The :class:`Strategy` of the parsed flags over ``world`` worker GPUs (profile defaults underneath)."""
    keys = strategy_keys(args) | straggler_keys(args.straggler, world, args.seed)
    try:
        return apply_profile(args.profile, **keys) if args.profile else strategy_from_flat(keys)
    except SpecError as err:
        raise _flag_error(err) from None


def build_inputs(args):
    """(workload, cluster, strategy, layout) from the parsed flags, checked; errors name the flag."""
    try:
        workload = load_model(args.model)
        if args.seq is not None:
            if not hasattr(workload, "with_seq"):
                raise SpecError("seq", "this workload has no sequence length to change; leave --seq out")
            workload = workload.with_seq(args.seq)
        base = load_cluster(args.cluster)
    except SpecError as err:
        raise _flag_error(err) if err.field in FLAG_OF else SpecError("--cluster", str(err)) from None
    if args.gpus < 1:
        raise SpecError("--gpus", f"must be a positive integer, got {args.gpus}")
    strategy = build_strategy(args, args.gpus)
    cluster = _sized_cluster(base, args, strategy)
    try:
        layout = build_layout(strategy, cluster, workload)
    except SpecError as err:
        raise _flag_error(err) from None
    return workload, cluster, strategy, layout


def _sized_cluster(base, args, strategy: Strategy):
    gpn = base.node.gpus_per_node
    server_nodes = strategy.dp_sync.server_nodes if isinstance(strategy.dp_sync, ParamServerSync) else 0
    if args.gpus % gpn:
        raise SpecError("--gpus", f"{args.gpus} is not a whole number of {gpn}-GPU {base.name} nodes; use a "
                        f"multiple of {gpn}")
    nodes = args.nodes if args.nodes is not None else args.gpus // gpn + server_nodes
    if nodes < 1:
        raise SpecError("--nodes", f"must be a positive integer, got {nodes}")
    if (nodes - server_nodes) * gpn != args.gpus:
        extra = f" less {server_nodes} server node(s)" if server_nodes else ""
        raise SpecError("--nodes", f"{nodes} nodes{extra} hold {(nodes - server_nodes) * gpn} worker GPUs, not "
                        f"--gpus {args.gpus}; use --nodes {args.gpus // gpn + server_nodes} or leave it out")
    return base.with_nodes(nodes)


def check_engine_flags(args) -> None:
    """Refuse what the analytical engine cannot do rather than ignore it silently."""
    if args.engine == "analytical":
        for flag, value in (("--trace", args.trace), ("--plot", args.plot)):
            if value is not None:
                raise cli_common.UsageError(f"{flag} needs the discrete-event timeline: add --engine des")
        for flag, value in (("--steps", args.steps), ("--train-steps", args.train_steps),
                            ("--straggler", args.straggler or None), ("--mtbf-hours", args.mtbf_hours)):
            if value is not None:
                raise cli_common.UsageError(f"{flag}: the analytical engine assumes identical ranks and single "
                                            "steps without failures; add --engine des")
    for flag, value in (("--steps", args.steps), ("--train-steps", args.train_steps)):
        if value is not None and value < 1:
            raise SpecError(flag, f"must be a positive integer, got {value}")
    if args.train_steps is not None and args.mtbf_hours is None:
        raise SpecError("--train-steps", "sets the horizon of the failure model: add --mtbf-hours and the "
                        "checkpoint and restart flags")
