"""Compare trainplan's estimates with published training runs (``benchmarks/published_runs.yaml``).

Each row's strategy, model and cluster as run go through the current model (the analytical engine;
``--des`` adds the discrete-event engine for the single-node rows). The estimated step time is turned
into the published figure's unit with that source's own definition:

- ``tflops_per_gpu_megatron``: F / (t · n) with F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs per
  iteration, which counts the recompute forward (Narayanan et al. SC'21 eq. 3) [src: narayanan-2021-sc];
- ``tokens_per_s_per_gpu``: B·s / (t · n), torchtitan's WPS / TPS-per-GPU [src: torchtitan-perf-h100]
  and llm-foundry's Throughput (T/s/GPU) [src: llm-foundry-bench]; NeMo's, Megatron-Bridge's and NeMo
  AutoModel's Tokens / sec / GPU [src: nemo-perf-2407, megatron-bridge-perf, automodel-perf].

Errors are signed, (estimate − published) / published, both in the figure's unit and as step time
(the step time the published figure implies, by the same definition). MAPE is the mean of |step-time
error| over the rows, per source, overall, held-in and held-out, and per issue-14 category (MoE,
long-context, FP8: rows the data file marks with ``category``, all held out). Published peak memory (GiB = 2^30
bytes) is compared with the memory model's busiest rank. The rows only MEASURE: no parameter is ever
fitted to them (issue 9 §5). ``--write-md`` regenerates the table section of docs/validation.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "published_runs.yaml"
DOC = ROOT / "docs" / "validation.md"
START, END = "<!-- validation-table:start -->", "<!-- validation-table:end -->"
GIB = 2 ** 30
if str(ROOT) not in sys.path:  # run as a script: this checkout's simulator, not an installed one
    sys.path.insert(0, str(ROOT))


class Category(Enum):
    """The workload families of issue 14 a row stands for; every row with a category is held out
    (added after the model of these features was written, to measure it, never to tune it)."""

    MOE = "moe"
    """A mixture-of-experts model with expert parallelism."""
    LONG_CONTEXT = "long-context"
    """Sequences of 32k tokens or more, with or without context parallelism."""
    FP8 = "fp8"
    """FP8 linear layers (Transformer Engine or torchao float8) on a dense model."""


class Metric(Enum):
    """The unit a published figure is in (each definition cited in the module docstring)."""

    TFLOPS_PER_GPU_MEGATRON = "tflops_per_gpu_megatron"
    TOKENS_PER_S_PER_GPU = "tokens_per_s_per_gpu"


@dataclass(frozen=True)
class Run:
    """One published row, its group's fields merged in (row over group)."""

    id: str
    source: str
    where: str
    hardware: str
    model: str
    seq: int
    gpus: int
    preset: str
    overrides: dict
    strategy: dict
    metric: Metric
    published: float
    held_out: bool
    memory_gib: float | None = None
    mfu_percent: float | None = None
    checks: dict = dataclasses.field(default_factory=dict)
    """Columns printed next to the figure (aggregate_pflops, train_days_300b, step_time_s, grad_accum), for
    consistency tests."""
    unsupported: str | None = None
    assumed: dict = dataclasses.field(default_factory=dict)
    category: Category | None = None
    """Issue 14's MoE / long-context / FP8 rows; None for the dense BF16 rows of issue 9."""


def held_out_rule(row_id: str, category: Category | None = None) -> bool:
    """The hold-out rule stated in the data file: every row with a category; the others by
    sha256(id) % 10 < 3 (first 8 hex digits)."""
    return category is not None or int(hashlib.sha256(row_id.encode()).hexdigest()[:8], 16) % 10 < 3


def load_runs(path: Path = RUNS) -> list[Run]:
    data = yaml.safe_load(path.read_text())
    groups, runs = data["groups"], []
    for row in data["rows"]:
        g = groups[row["group"]]
        merged = {**g, **row}
        cluster = merged["cluster"]
        runs.append(Run(
            id=row["id"], source=merged["source"], where=merged["where"], hardware=merged["hardware"],
            model=merged["model"], seq=int(merged["seq"]), gpus=int(merged["gpus"]), preset=cluster["preset"],
            overrides=dict(cluster.get("overrides", {})), strategy={**g.get("strategy", {}), **row.get("strategy", {})},
            metric=Metric(merged["metric"]), published=float(merged["published"]), held_out=bool(row["held_out"]),
            memory_gib=row.get("memory_gib"), mfu_percent=row.get("mfu_percent"),
            checks={k: row[k] for k in ("aggregate_pflops", "train_days_300b", "step_time_s", "grad_accum") if k in row}, unsupported=row.get("unsupported"),
            assumed={**g.get("assumed", {}), **row.get("assumed", {})},
            category=Category(merged["category"]) if merged.get("category") else None))
    return runs


def megatron_flops_per_iteration(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. SC'21 eq. 3: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (recompute included)."""
    return 96.0 * batch * seq * layers * hidden ** 2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def mfu_6n_attention(spec, seq: int, tokens_per_s_per_gpu: float, peak_flops_per_gpu: float) -> float:
    """MFU as torchtitan (``train.py``: 6·N + 12·l·h·s FLOPs per token, N all parameters)
    [src: torchtitan-perf-a100] and llm-foundry (3·(2·N·s + 4·l·h·s²) per sequence, its README's MFU
    section) [src: llm-foundry-bench] both define it: (6·N + 12·l·h·s) · tokens/s/GPU / peak."""
    return (6 * spec.params + 12 * spec.layers * spec.hidden * seq) * tokens_per_s_per_gpu / peak_flops_per_gpu


def figure_from_step_time(run: Run, spec, step_time_s: float) -> float:
    """The published figure's value for a step time, by the source's definition."""
    batch = run.strategy["global_batch"]
    if run.metric is Metric.TFLOPS_PER_GPU_MEGATRON:
        flops = megatron_flops_per_iteration(batch, run.seq, spec.layers, spec.hidden, spec.vocab)
        return flops / (step_time_s * run.gpus) / 1e12
    return batch * run.seq / (step_time_s * run.gpus)


def step_time_from_figure(run: Run, spec, figure: float) -> float:
    """The step time a published figure implies (the inverse of :func:`figure_from_step_time`)."""
    return figure_from_step_time(run, spec, 1.0) / figure


def workload_of(run: Run):
    """The preset at the run's sequence length; a learned position table as long as the run's sequence
    (MPT's max_seq_len = seq, as llm-foundry's NumParams column shows)."""
    from simulator.workload import get_preset
    from simulator.workload.transformer import PositionKind
    spec = get_preset(run.model)
    if run.seq == spec.seq_len:
        return spec
    if spec.position is PositionKind.LEARNED:
        return dataclasses.replace(spec, seq_len=run.seq, max_positions=run.seq)
    return spec.with_seq(run.seq)


def cluster_of(run: Run):
    """The preset with the run's node count and device overrides (a cluster-file override)."""
    from simulator.cluster.io import cluster_from_dict, cluster_to_dict, load_cluster
    cluster = load_cluster(run.preset)
    nodes = run.gpus // cluster.node.gpus_per_node
    cluster = load_cluster(run.preset, nodes=max(nodes, 1))
    if not run.overrides:
        return cluster
    d = cluster_to_dict(cluster)
    d["device"].update(run.overrides)
    return cluster_from_dict(d)


def model_parallel(run: Run) -> int:
    """GPUs per data-parallel replica: tp·pp·cp (the experts' ep is carved out of dp)."""
    s = run.strategy
    return s.get("tp", 1) * s.get("pp", 1) * s.get("cp", 1)


def strategy_of(run: Run):
    from simulator.strategy.flat import strategy_from_flat
    keys = dict(run.strategy)
    keys["dp"] = run.gpus // model_parallel(run)
    return strategy_from_flat(keys)


def _causes(breakdown: dict) -> dict[str, float]:
    """Step-time shares: compute (forward, backward, recompute, optimizer), exposed comm, bubble, other."""
    total = sum(breakdown.values()) or 1.0
    compute = sum(v for c, v in breakdown.items() if c.value in ("forward", "backward", "recompute", "optimizer"))
    comm = sum(v for c, v in breakdown.items() if c.is_comm)
    bubble = sum(v for c, v in breakdown.items() if c.value == "bubble")
    return {"compute": compute / total, "comm": comm / total, "bubble": bubble / total,
            "other": max(0.0, 1 - (compute + comm + bubble) / total)}


def _memory_bytes(result) -> float | None:
    """The busiest rank's bytes: reserved where the memory model reports it, else its total."""
    if result.memory is None:
        return None
    worst = result.memory.worst
    return float(getattr(worst, "reserved_bytes", worst.total_bytes))


def evaluate(run: Run, des: bool = False) -> dict:
    """One row's result: estimate, errors and causes; or why it cannot be estimated."""
    from simulator.errors import SpecError
    out = {"run": run, "status": "ok"}
    if run.unsupported:
        return {**out, "status": "unsupported", "reason": run.unsupported}
    try:
        spec, cluster, strategy = workload_of(run), cluster_of(run), strategy_of(run)
        from simulator.analytical import estimate
        result = estimate(cluster, spec, strategy)
    except SpecError as exc:
        return {**out, "status": "unsupported", "reason": f"simulator refuses it: {str(exc).split(';')[0]}"}
    t_pub = step_time_from_figure(run, spec, run.published)
    out.update(spec=spec, step_time_s=result.step_time_s, published_step_time_s=t_pub,
               estimate=figure_from_step_time(run, spec, result.step_time_s), causes=_causes(result.breakdown))
    out["figure_error"] = out["estimate"] / run.published - 1
    out["time_error"] = result.step_time_s / t_pub - 1
    mem = _memory_bytes(result)
    if run.memory_gib is not None and mem is not None:
        out["memory_gib_est"] = mem / GIB
        out["memory_error"] = mem / GIB / run.memory_gib - 1
    if des and run.gpus <= cluster.node.gpus_per_node:
        from simulator.compile import compile_step
        from simulator.engine.step import simulate
        sim = simulate(compile_step(cluster, spec, strategy), cluster, seed=0, steps=1)
        out["des_time_error"] = sim.step_time_s / t_pub - 1
    return out


def mape(values: list[float]) -> float | None:
    return sum(abs(v) for v in values) / len(values) if values else None


def summary(results: list[dict]) -> dict[str, dict]:
    """{label: {"n", "mape"}} of |step-time error|: per source, per GPU, held-in, held-out, overall; and memory."""
    ok = [r for r in results if r["status"] == "ok"]
    groups = {f"source {s}": [r for r in ok if r["run"].source == s] for s in sorted({r["run"].source for r in ok})}
    for gpu in ("A100", "H100", "B200"):
        groups[f"GPU {gpu}"] = [r for r in ok if gpu.lower() in r["run"].preset]
    groups["held-in"] = [r for r in ok if not r["run"].held_out]
    groups["held-out"] = [r for r in ok if r["run"].held_out]
    groups["dense BF16 (no category)"] = [r for r in ok if r["run"].category is None]
    for cat in Category:
        groups[f"category {cat.value}"] = [r for r in ok if r["run"].category is cat]
    groups["overall"] = ok
    out = {k: {"n": len(v), "mape": mape([r["time_error"] for r in v])} for k, v in groups.items()}
    mem = [r["memory_error"] for r in ok if "memory_error" in r]
    out["peak memory"] = {"n": len(mem), "mape": mape(mem)}
    return out


def evaluate_all(runs: list[Run] | None = None, des: bool = False) -> list[dict]:
    return [evaluate(r, des=des) for r in (runs if runs is not None else load_runs())]


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f} %"


def _abs_pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def _strategy_text(run: Run) -> str:
    s = run.strategy
    parts = [f"dp{run.gpus // model_parallel(run)}", f"tp{s.get('tp', 1)}", f"pp{s.get('pp', 1)}"]
    parts += [f"{k}{s[k]}" for k in ("cp", "ep") if s.get(k, 1) > 1]
    if s.get("sequence_parallel"):
        parts.append("sp")
    if s.get("zero"):
        parts.append(f"zero{s['zero']}")
    if s.get("pp", 1) > 1:
        parts.append(s.get("schedule", "1f1b") + (f" v{s['virtual_stages']}" if s.get("virtual_stages", 1) > 1 else ""))
    if s.get("precision") == "fp8":
        parts.append("fp8" + (f"-{s['fp8_recipe']}" if s.get("fp8_recipe") else ""))
    if s.get("kernel_fusion") == "compiled":
        parts.append("compiled")
    if s.get("schedules_per_step", 1) > 1:
        parts.append(f"{s['schedules_per_step']} schedules")
    parts += [f"mbs{s.get('micro_batch', 1)}", f"gbs{s['global_batch']}", f"rc-{s.get('recompute', 'none')}"]
    return " ".join(parts)


def _held_text(run: Run) -> str:
    return f"yes ({run.category.value})" if run.category else ("yes" if run.held_out else "")


def _hardware_text(run: Run) -> str:
    extra = ", ".join(f"{k} {v}" for k, v in run.overrides.items() if k != "name")
    return f"{run.preset}{f' ({extra})' if extra else ''} ×{run.gpus}"


def _dominant(r: dict) -> str:
    c = r["causes"]
    return ", ".join(f"{k} {abs(100 * v):.0f} %" for k, v in c.items() if k != "other")


def markdown(results: list[dict]) -> str:
    """The generated section of docs/validation.md: summary, the table, the rows not estimated."""
    summ = summary(results)
    lines = [START, "", "| set | rows | step-time MAPE |", "|---|---|---|"]
    lines += [f"| {k} | {v['n']} | {_abs_pct(v['mape'])} |" for k, v in summ.items()]
    lines += ["", f"<!-- mape: overall={summ['overall']['mape']:.6f} held_out={summ['held-out']['mape']:.6f} "
              f"memory={summ['peak memory']['mape'] or 0:.6f} -->", "",
              "| row | held out | source | hardware | model, seq | strategy | published | estimate | figure err | "
              "step-time err | memory GiB pub / est | where the estimate's time goes |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in (r for r in results if r["status"] == "ok"):
        run = r["run"]
        mem = (f"{run.memory_gib:.1f} / {r['memory_gib_est']:.1f} ({_pct(r['memory_error'])})"
               if "memory_error" in r else "—")
        lines.append(f"| {run.id} | {_held_text(run)} | `{run.source}` {run.where} | {_hardware_text(run)} | {run.model}, {run.seq} | {_strategy_text(run)} | {run.published:g} "
                     f"{run.metric.value} | {r['estimate']:.4g} | {_pct(r['figure_error'])} | "
                     f"{_pct(r['time_error'])} | {mem} | {_dominant(r)} |")
    des = [r for r in results if "des_time_error" in r]
    if des:
        lines += ["", "DES cross-check (single-node rows, `--des`): step-time error, DES vs analytical:", ""]
        lines += [f"- {r['run'].id}: {_pct(r['des_time_error'])} vs {_pct(r['time_error'])}" for r in des]
    lines += ["", "Rows not estimated (listed, not dropped):", "", "| row | category | source | published | why |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['run'].id} | {r['run'].category.value if r['run'].category else ''} | `{r['run'].source}` | "
              f"{r['run'].published:g} {r['run'].metric.value} | {r['reason']} |"
              for r in results if r["status"] != "ok"]
    return "\n".join(lines + ["", END])


def documented_mape(doc: Path = DOC) -> dict[str, float]:
    """The figures the doc states, from its ``<!-- mape: ... -->`` line."""
    m = re.search(r"<!-- mape: ((?:\w+=[0-9.]+ ?)+) -->", doc.read_text())
    if not m:
        raise ValueError(f"{doc}: no '<!-- mape: ... -->' line; run benchmarks/validate_published.py --write-md")
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def write_md(text: str, doc: Path = DOC) -> None:
    old = doc.read_text()
    if START not in old or END not in old:
        raise ValueError(f"{doc} has no {START} ... {END} section to replace")
    head, rest = old.split(START, 1)
    doc.write_text(head + text + rest.split(END, 1)[1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-md", action="store_true", help=f"regenerate the table section of {DOC.name}")
    parser.add_argument("--des", action="store_true", help="also run the DES on the single-node rows")
    args = parser.parse_args(argv)
    results = evaluate_all(des=args.des)
    text = markdown(results)
    if args.write_md:
        write_md(text)
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
