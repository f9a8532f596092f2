"""The rank phase's scoring: the vectorised closed form over the candidates that fit, in chunks, in one process
or split between several (:func:`score`), and the ranking order (:func:`by_step_time`). Used by
:func:`planner.search.rank` for the base space and its variants."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from simulator.analytical_vec import OnInvalid, estimate_many
from simulator.compile import CostCache
from simulator.engine.gc_passes import frozen_heap

RANK_CHUNK = 256
"""Candidates per :func:`estimate_many` call of the rank phase (progress cadence; one cache for all)."""

RANK_PER_PROCESS = 128
"""Fewest candidates :func:`score` gives a process of the rank phase. A cold candidate of the rank phase costs
~2 ms of CPU (Llama-2-70B on 64 H100s: 453 candidates, 0.92 s in one process; its halves 0.52 and 0.41 s, each
process with its own cache), a worker's fork, the strategies' pickles and its frame's return ~0.03 s: at 128
candidates a process the split already pays (docs/planner.md, plan27). It was :data:`RANK_CHUNK` (256), which
left that search, the issue's ≤ 3 s command, in one process on two cores."""


def estimates_in_chunks(cluster, workload, gpus, strategies: list, cache: CostCache | None,
                        tick=None) -> list[pd.DataFrame]:
    """:func:`estimate_many` of ``strategies`` in chunks of :data:`RANK_CHUNK` on one cache (None: a new one)."""
    cache = cache or CostCache(cluster)
    parts = []
    for start in range(0, max(len(strategies), 1), RANK_CHUNK):
        if tick is not None:
            tick(start, len(strategies))
        parts.append(estimate_many(cluster, workload, strategies[start:start + RANK_CHUNK], cache=cache,
                                   on_invalid=OnInvalid.MARK, gpus=gpus))
    return parts


def score(fits: list, search, cache: CostCache, counts, phase: str = "rank") -> pd.DataFrame:
    """The closed form over the candidates that fit (estimate errors counted invalid). With ``search.jobs`` > 1
    and at least :data:`RANK_PER_PROCESS` candidates per process, the last parts go to worker processes (each its own
    cache; every estimate is the same whichever cache answers it) while this process estimates the first."""
    tick = search.tick(phase)
    strategies = [s for s, _ in fits]
    jobs = min(search.jobs, len(strategies) // RANK_PER_PROCESS)
    args = (search.cluster, search.workload, search.layout_gpus)
    if jobs <= 1:
        parts = estimates_in_chunks(*args, strategies, cache, tick)
    else:
        cuts = [len(strategies) * k // jobs for k in range(jobs + 1)]
        with frozen_heap(), ProcessPoolExecutor(max_workers=jobs - 1) as pool:
            rest = [pool.submit(estimates_in_chunks, *args, strategies[a:b], None)
                    for a, b in zip(cuts[1:-1], cuts[2:])]
            parts = estimates_in_chunks(*args, strategies[:cuts[1]], cache,
                                        None if tick is None else (lambda done, _total: tick(done, len(strategies))))
            for future in rest:
                parts += future.result()
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    frame["strategy"] = [s for s, _ in fits]
    frame["memory_bytes"] = [r.total_bytes for _, r in fits]
    frame["headroom_bytes"] = search.cluster.device.memory_bytes - frame["memory_bytes"]
    bad = frame["error"] != ""
    for message in frame.loc[bad, "error"]:
        counts.invalid[message.split(":")[0]] += 1
    return frame[~bad]


def by_step_time(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["step_time_s", "memory_bytes"], kind="stable").reset_index(drop=True)
