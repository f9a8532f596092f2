"""Compute imbalance of a step on a cluster whose nodes differ: the fastest and slowest simulated stage.

Each simulated (pipeline, stage) spends compute seconds (forward, backward, recompute) on its
representative rank, that rank's compute multiplier included (:mod:`simulator.compile.device_factors`).
The report names the stage with the most and the least, their rank and device, and the ratio: on a
pipeline spread over two GPU generations the slow generation's stages carry the step (the others wait
in bubbles), which an uneven ``layer_split`` can even out.
"""

from __future__ import annotations

from collections import defaultdict

from simulator.results import Category

COMPUTE = (Category.FORWARD, Category.BACKWARD, Category.RECOMPUTE)


def imbalance(accounts: dict, layout, cluster) -> dict:
    """``{"fastest": {...}, "slowest": {...}, "ratio": slowest / fastest}`` over the simulated stages, each
    with its rank, stage, replica, device and mean compute seconds per step."""
    busy: dict[tuple, float] = defaultdict(float)
    steps: dict[tuple, int] = defaultdict(int)
    for (k, key, r), acc in accounts.items():
        busy[(key, r)] += sum(acc.get(c, 0.0) for c in COMPUTE)
        steps[(key, r)] += 1
    mean = {who: s / steps[who] for who, s in busy.items()}
    order = sorted(mean, key=lambda who: (mean[who], who[0].dp, who[1]))

    def row(who) -> dict:
        key, r = who
        rank = layout.rank_of(dp=key.dp, pp=r, tp=0)
        return {"rank": rank, "stage": r, "replica": str(key),
                "device": cluster.device_of_node(cluster.place(rank)[0]).name, "compute_s": mean[who]}

    fastest, slowest = row(order[0]), row(order[-1])
    ratio = slowest["compute_s"] / fastest["compute_s"] if fastest["compute_s"] > 0 else 1.0
    return {"fastest": fastest, "slowest": slowest, "ratio": ratio}
