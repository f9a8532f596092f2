"""``plan()``: the planner's entry point, its objectives and its result."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

import numpy as np
import pandas as pd

from simulator.errors import SpecError
from simulator.plan_file import Estimate, Plan
from simulator.strategy.flat import strategy_to_flat
from simulator.strategy.rules import moe_fields_problem

from planner.frameworks import capability
from planner.placement import NodeShape
from planner.refine import refine as des_refine
from planner.search import Counts, Search, rank, server_nodes
from planner.space import DEFAULT_MAX_MBS, Problem
from planner.variants import notes as variant_notes

SECONDS_PER_HOUR = 3600.0


class Objective(Enum):
    """What the ranking minimises."""

    TIME = "time"
    """Step time (the default)."""
    THROUGHPUT = "throughput"
    """Tokens per second per GPU, highest first (the same order as time for one GPU count)."""
    COST = "cost"
    """GPU-hours to train ``tokens`` tokens (times the price per GPU-hour, when given)."""


@dataclass(frozen=True)
class PlanResult:
    """What a search found: counts by outcome, every ranked candidate, and the best as a plan."""

    counts: Counts
    frame: pd.DataFrame
    """One row per ranked candidate, best first: the estimate's columns, ``strategy`` (the object),
    ``memory_bytes``, ``headroom_bytes`` and, for refined rows, ``des_step_time_s``. In the refined
    rows ``step_time_s``, ``tokens_per_s`` and ``mfu`` are the DES's (the closed form's step time is
    kept in ``step_time_s_analytical``); ``hfu``, ``slowest_stage`` and the breakdown columns stay the
    closed form's in every row."""
    best: Plan | None
    """None when nothing fits."""
    notes: tuple[str, ...] = ()
    """What the search left out and why (offload the cluster cannot time, dominated algorithms)."""

    def top(self, k: int) -> pd.DataFrame:
        return self.frame.head(k)

    def pareto(self) -> pd.DataFrame:
        """The plans no other beats on both step time and memory per GPU (most headroom), fastest first:
        the trade-off between speed and room to spare (``--pareto``). Step times are the table's, the
        DES's for refined rows."""
        return self.frame[pareto_mask(self.frame["step_time_s"].to_numpy(), self.frame["memory_bytes"].to_numpy())]

    def row_dict(self, i: int) -> dict:
        """One ranked row as plain data: the strategy's flat keys and the headline numbers."""
        r = self.frame.iloc[i]
        keys = strategy_to_flat(r["strategy"])
        return {"strategy": {k: v for k, v in keys.items() if k not in ("speed_factors",)},
                "step_time_s": float(r["step_time_s"]), "tokens_per_s": float(r["tokens_per_s"]),
                "tokens_per_s_per_gpu": float(r["tokens_per_s_per_gpu"]), "mfu": float(r["mfu"]),
                "des_step_time_s": None if pd.isna(r.get("des_step_time_s")) else float(r["des_step_time_s"]),
                "memory": {"total_bytes": float(r["memory_bytes"]), "headroom_bytes": float(r["headroom_bytes"])}}

    def to_dict(self, top: int, pareto: bool = False) -> dict:
        out = {"candidates": self.counts.to_dict(), "best": self.row_dict(0) if len(self.frame) else None,
               "top": [self.row_dict(i) for i in range(min(top, len(self.frame)))]}
        if pareto:
            out["pareto"] = [self.row_dict(i) for i in self.pareto().index]
        return out


def pareto_mask(step_s: np.ndarray, memory_bytes: np.ndarray) -> np.ndarray:
    """True where no other plan is at least as fast and as small and strictly better in one: after
    sorting by (step, memory), a plan is on the front iff it needs strictly less memory than every
    plan before it."""
    order = np.lexsort((memory_bytes, step_s))
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], memory_bytes[order][:-1])))
    mask = np.zeros(len(step_s), dtype=bool)
    mask[order] = memory_bytes[order] < best_before
    return mask


def _objective_columns(frame: pd.DataFrame, gpus: int, tokens: float | None, price: float | None) -> None:
    frame["tokens_per_s_per_gpu"] = frame["tokens_per_s"] / gpus
    if tokens:
        frame["time_to_train_s"] = tokens / frame["tokens_per_s"]
        frame["gpu_hours"] = frame["time_to_train_s"] * gpus / SECONDS_PER_HOUR
        if price is not None:
            frame["cost"] = frame["gpu_hours"] * price


def _order(frame: pd.DataFrame, objective: Objective) -> pd.DataFrame:
    """Best first. Within one search (one cluster, one GPU count) the three objectives give the same
    order — tokens/s per GPU and GPU-hours to train are both monotone in the step time — so they
    differ only in the columns shown; they part ways across GPU counts and clusters (planner.sweep)."""
    if objective is Objective.THROUGHPUT:
        return frame.sort_values(["tokens_per_s_per_gpu", "memory_bytes"], ascending=[False, True], kind="stable")
    return frame.sort_values(["step_time_s", "memory_bytes"], kind="stable")


def plan(workload, cluster, *, gpus: int, global_batch: int, pins: dict | None = None,
         objective: Objective = Objective.TIME, refine: int = 8, jobs: int = 1, reserve_gb: float = 0.0,
         max_mbs: int = DEFAULT_MAX_MBS, allow_cross_node_tp: bool = False, profile: str | None = None,
         tokens: float | None = None, price_per_gpu_hour: float | None = None, progress=None) -> PlanResult:
    """Search the strategies for ``workload`` on ``gpus`` GPUs of ``cluster`` (module docstrings);
    ``progress(phase, done, total)`` is called as it advances (:data:`planner.search.Progress`)."""
    gpn, servers = cluster.node.gpus_per_node, server_nodes(pins or {})
    if gpus != cluster.world_size - servers * gpn and not (
            cluster.nodes == 1 and isinstance(gpus, int) and 1 <= gpus < gpn and not servers):
        extra = f" plus {servers} parameter-server node(s)" if servers else ""
        raise SpecError("gpus", f"{gpus} GPUs{extra} but the cluster has {cluster.world_size}; size the cluster to the "
                        f"job (whole nodes, or one node for a job of fewer than {gpn} GPUs)")
    moe_problem = moe_fields_problem(workload, pins or {})  # before the search: no candidate could take them
    if moe_problem is not None:
        raise SpecError(*moe_problem)
    if objective is Objective.COST and not tokens:
        raise SpecError("tokens", "the cost objective needs the tokens to train (--tokens)")
    problem = Problem(gpus=gpus, global_batch=global_batch, gpus_per_node=cluster.node.gpus_per_node,
                      layers=workload.layer_count, check_tp=workload.check_tp, max_mbs=max_mbs,
                      allow_cross_node_tp=allow_cross_node_tp,
                      check_ep=workload.check_ep if getattr(workload, "moe", None) is not None else None,
                      seq_len=workload.seq_len if getattr(workload, "has_activation_shapes", False) else None,
                      uniform_node=NodeShape.of(cluster).uniform)
    counts = Counts()
    search = Search(workload, cluster, problem, pins or {}, capability(profile), reserve_gb, progress, jobs)
    frame = rank(search, counts)
    _objective_columns(frame, gpus, tokens, price_per_gpu_hour)
    frame = _order(frame, objective).reset_index(drop=True)
    t0 = time.perf_counter()
    k = min(refine, len(frame))
    if k:
        results = des_refine(cluster, workload, list(frame["strategy"][:k]), jobs, search.layout_gpus,
                             search.tick("refine"))
        frame["des_step_time_s"] = [r.step_time_s for r in results] + [float("nan")] * (len(frame) - k)
        head = frame.head(k).copy()
        head["step_time_s_analytical"] = head["step_time_s"]
        head["step_time_s"], head["tokens_per_s"] = head["des_step_time_s"], [r.tokens_per_s for r in results]
        head["mfu"] = [r.mfu for r in results]
        _objective_columns(head, gpus, tokens, price_per_gpu_hour)
        frame = pd.concat([_order(head, objective), frame.iloc[k:]], ignore_index=True)
        counts.refined = k
    counts.seconds["refine"] = time.perf_counter() - t0
    best = None
    if len(frame):
        r = frame.iloc[0]
        best = Plan(model=workload, cluster=cluster, gpus=gpus, strategy=r["strategy"],
                    estimates=(Estimate(engine="analytical" if pd.isna(r.get("des_step_time_s")) else "des",
                                        step_time_s=float(r["step_time_s"]), tokens_per_s=float(r["tokens_per_s"]),
                                        mfu=float(r["mfu"]), memory={"total_bytes": float(r["memory_bytes"])}),))
    return PlanResult(counts=counts, frame=frame, best=best, notes=tuple(variant_notes(cluster, pins or {})))
