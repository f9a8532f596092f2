"""The planner's best against well-known expert layouts (issue 8 §6), recorded in docs/planner.md.

Run by hand: ``python benchmarks/expert_layouts.py [--des]``. For each published layout the whole
default space is searched (no pins, ``--refine 0``), and the expert layout is estimated with the
same closed form (and, with ``--des``, both are re-simulated by the DES). The comparison's
sentences are what ``trainplan plan --explain --against PLAN.json`` prints.

- Megatron-LM, GPT-3 175B on 1024 A100s (Narayanan et al. SC'21 [src: narayanan-2021-sc], Table 1):
  t 8, p 8, d 16, micro-batch 1, global batch 1536, sequence 2048, activation recomputation (its
  FLOPs count includes the recomputed forward); run here with the 1F1B schedule as this repository
  reads Table 1 (tests/test_analytical.py), and with the interleaved schedule (2 chunks per rank).
  Both are stated under the ``megatron`` framework profile (:mod:`simulator.profiles`: Megatron's
  framework, fused Adam and kernels, its rank order) with what the 2021 code did not have taken out, as
  the validation table's Narayanan rows state them (``benchmarks/published_runs.yaml``, group
  ``nar21-t1``): no distributed optimizer (ZeRO 0), no sequence parallelism, the gradient all-reduce
  after backward, the attention scores materialised (no FlashAttention). The planner searches the same
  profile (``--profile megatron``), so the comparison is between layouts under one framework.
- torchtitan, Llama 3.1 8B on 8 H100s ([src: torchtitan-perf], Table 1 "1D Parallelism (FSDP)"):
  FSDP over 8 GPUs, local batch 2, global batch 16, sequence 8192 (``llama3_8b.toml``), selective
  op activation checkpointing. That policy (recompute all but some matmuls) is between our
  ``none`` and ``full``; with FlashAttention our ``selective`` has nothing to drop, so the row is
  given with ``full`` (``none`` does not fit an 80 GB H100 at local batch 2). torchtitan ran on
  96 GB H100s at 500 W; our dgx-h100 has 80 GB.
"""

from __future__ import annotations

import argparse
import time

import planner
from planner.compare import against, reference_row
from planner.explain import describe
from planner.refine import des_step
from simulator.cluster.io import load_cluster
from simulator.schedules import ScheduleKind
from simulator.profiles import apply_profile
from simulator.strategy import AttentionKind, Framework, Recompute, Strategy, ZeroStage
from simulator.workload import get_preset

_GPT3 = dict(global_batch=1536, micro_batch=1, dp=16, tp=8, pp=8, recompute=Recompute.FULL,
             # Megatron-LM as of SC'21 under the megatron profile (module docstring; published_runs.yaml nar21-t1)
             zero=ZeroStage.ZERO0, sequence_parallel=False, overlap_grad_reduce=False, attention=AttentionKind.EAGER)
EXPERTS = (
    ("Megatron-LM GPT-3 175B, 1F1B", "gpt3-175b", 2048, "dgx-a100", 128, 1024,
     apply_profile("megatron", **_GPT3, schedule=ScheduleKind.ONE_F_ONE_B), "megatron"),
    ("Megatron-LM GPT-3 175B, interleaved", "gpt3-175b", 2048, "dgx-a100", 128, 1024,
     apply_profile("megatron", **_GPT3, schedule=ScheduleKind.INTERLEAVED, virtual_stages=2), "megatron"),
    ("torchtitan Llama 3.1 8B FSDP", "llama3.1-8b", 8192, "dgx-h100", 1, 8,
     Strategy(global_batch=16, micro_batch=2, dp=8, zero=ZeroStage.ZERO3, framework=Framework.FSDP2,
              recompute=Recompute.FULL), None),
)
"""(label, model preset, sequence, cluster preset, nodes, GPUs, the expert strategy, the planner profile
the search runs under: None for the default space)."""


def compare(label, model, seq, cluster, nodes, gpus, expert, profile=None, pins=None, des=False) -> dict:
    """The planner's best (searched under ``profile``) and the expert layout, both by the closed form (and
    the DES with ``des``)."""
    m, c = get_preset(model).with_seq(seq), load_cluster(cluster, nodes=nodes)
    result = planner.plan(m, c, gpus=gpus, global_batch=expert.global_batch, pins=pins or {}, refine=0,
                          profile=profile)
    best = result.frame.iloc[0]
    ref = reference_row(m, c, expert)
    out = {"label": label, "candidates": result.counts.ranked, "best": describe(best["strategy"]),
           "best_s": float(best["step_time_s"]), "expert_s": float(ref["step_time_s"]),
           "expert_gb": float(ref["memory_bytes"]) / 1e9, "why": against(result.frame, m, c, expert, label=label)}
    if des:
        out["best_des_s"] = des_step(c, m, best["strategy"]).step_time_s
        out["expert_des_s"] = des_step(c, m, expert).step_time_s
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--des", action="store_true", help="also re-simulate both with the DES")
    args = parser.parse_args()
    for case in EXPERTS:
        t0 = time.perf_counter()
        r = compare(*case, des=args.des)
        des = (f"; DES {r['best_des_s']:.4g} s vs {r['expert_des_s']:.4g} s" if args.des else "")
        print(f"{r['label']}: planner {r['best_s']:.4g} s ({r['best']}) vs expert {r['expert_s']:.4g} s "
              f"({r['expert_gb']:.1f} GB){des} [{r['candidates']} ranked, {time.perf_counter() - t0:.0f} s]")
        print("  " + "\n  ".join(r["why"]))


if __name__ == "__main__":
    main()
