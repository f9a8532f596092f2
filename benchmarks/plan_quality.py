"""How far the planner's analytical ranking is from an exhaustive discrete-event search.

Run by hand: ``python benchmarks/plan_quality.py``. For each small space, every candidate that
fits is simulated by the DES; the report gives the DES step time of the analytical top-1, the
DES best, the gap, and where the DES best sits in the analytical ranking. Recorded in
docs/planner.md.
"""

from __future__ import annotations

import time

import numpy as np

import planner
from planner.explain import describe
from planner.refine import des_step
from simulator.cluster.io import load_cluster
from simulator.strategy import Recompute, ZeroStage
from simulator.workload import get_preset

CASES = (
    ("gpt3-125m", 512, "dgx-h100", 1, 8, 16, {"zero": (ZeroStage.ZERO1,), "recompute": (Recompute.NONE,)}),
    ("gpt3-1.3b", 2048, "dgx-a100", 2, 16, 64, {"zero": (ZeroStage.ZERO1, ZeroStage.ZERO3),
                                                "recompute": (Recompute.NONE,), "micro_batch": (1, 2)}),
    ("llama2-7b", 4096, "h100-roce", 2, 16, 64, {"zero": (ZeroStage.ZERO1,), "micro_batch": (1,),
                                                 "recompute": (Recompute.NONE, Recompute.FULL)}),
    # ZeRO-0 only: the parameter-server variants (sync/async, shard counts) join the space
    ("gpt3-350m", 1024, "dgx-a100", 2, 16, 32, {"zero": (ZeroStage.ZERO0,), "recompute": (Recompute.NONE,),
                                                "micro_batch": (1, 2)}),
    # four nodes over RoCE: pipelines and data parallelism share the network
    ("gpt3-1.3b", 2048, "h100-roce", 4, 32, 64, {"zero": (ZeroStage.ZERO1,), "recompute": (Recompute.NONE,),
                                                 "micro_batch": (1,)}),
)


def gap(model, seq, cluster, nodes, gpus, gbs, pins) -> dict:
    """The exhaustive DES over the space against the analytical ranking."""
    m, c = get_preset(model).with_seq(seq), load_cluster(cluster, nodes=nodes)
    result = planner.plan(m, c, gpus=gpus, global_batch=gbs, pins=pins, refine=0)
    des = np.array([des_step(c, m, s).step_time_s for s in result.frame["strategy"]])
    best = int(np.argmin(des))
    return {"candidates": len(des), "top1_des_s": float(des[0]), "des_best_s": float(des[best]),
            "gap": float(des[0] / des[best] - 1), "des_best_rank": best + 1,
            "best": describe(result.frame["strategy"][best])}


def main() -> None:
    import sys

    chosen = [int(a) for a in sys.argv[1:]] or range(len(CASES))  # case numbers to run (default: all)
    for case in (CASES[i] for i in chosen):
        t0 = time.perf_counter()
        g = gap(*case)
        print(f"{case[0]} on {case[4]} x {case[2]}: {g['candidates']} candidates, analytical top-1 {g['top1_des_s']:.5g} "
              f"s in the DES, DES best {g['des_best_s']:.5g} s (gap {g['gap']:+.2%}, analytical rank "
              f"{g['des_best_rank']}): {g['best']} [{time.perf_counter() - t0:.0f} s]")


if __name__ == "__main__":
    main()
