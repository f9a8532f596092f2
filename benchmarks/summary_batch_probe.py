"""What an array-compiled summary side could save: the cold call's summary CPU, and one bucket tuple's exposure asked
once over a vector of last backwards instead of once per backward.

Run by hand: ``python benchmarks/summary_batch_probe.py [--candidates 5000]`` (``bench_analytical.py``'s cold call).
Prints (1) the inclusive CPU (``time.process_time``, outermost call only) of ``closed_form_models`` and of the summary
side, ``summarize_models`` with its ``stage_answers``, ``chunk_rows`` and ``Exposure.at``; (2) every
:meth:`simulator.analytical_sync.Exposure.at` ask of that call recorded per bucket tuple, then answered again two
ways: one ask per backward (today's) and :func:`exposure_rows` (the same numpy operations on a (backwards, buckets)
array, the design of ``Structures.add_many``, docs/planner.md cold22), their CPU and how many answers differ in any
bit. Nothing here is used by the estimate; it measures a design before it is built.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

from bench_analytical import candidates
import simulator.analytical_models as models_mod
import simulator.analytical_structures as structures_mod
import simulator.analytical_sync as sync_mod
from simulator.analytical_formula import EXPOSED_KINDS
from simulator.analytical_vec import OnInvalid, estimate_many
from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.workload import get_preset


def exposure_rows(e: sync_mod.Exposure, backwards) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`Exposure.at` of each of ``backwards``: per backward (tail, exposed by category), as two arrays. Each row
    is the scalar ask's elementwise operations, accumulate and last-axis sums on the same values (checked to the bit
    by :func:`main`, not assumed)."""
    b = np.asarray(backwards, dtype=float)
    kinds = np.zeros((len(b), len(EXPOSED_KINDS)))
    if e.d.shape[-1] == 0:
        return np.zeros(len(b)), kinds
    end = e.cum + np.maximum.accumulate((e.f - 1.0) * b[:, None] - (e.cum - e.d), axis=-1)
    exposed = np.maximum(0.0, end - np.maximum(end - e.d, 0.0))
    total = exposed.sum(axis=-1)
    finite = np.isfinite(total)
    for code in range(len(EXPOSED_KINDS)):  # at(): the categories with buckets; every one where the total is not finite
        if code in e.codes:
            kinds[:, code] = (exposed * (e.k == code)).sum(axis=-1)
        elif not finite.all():
            kinds[~finite, code] = (exposed[~finite] * (e.k == code)).sum(axis=-1)
    if len(e.codes) == 1:  # Exposure.at's shortcut: one category's exposed seconds are the finite total
        kinds[finite, e.codes[0]] = total[finite]
    return np.maximum(0.0, end.max(axis=-1)), kinds


def _timed(cpu: collections.Counter, depth: collections.Counter, owner, name: str) -> None:
    f = getattr(owner, name)

    def wrapper(*args, **kwargs):
        depth[name] += 1
        start = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            depth[name] -= 1
            if depth[name] == 0:
                cpu[name] += time.process_time() - start
    setattr(owner, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=5000)
    args = ap.parse_args()
    asks: dict[int, tuple[sync_mod.Exposure, list[float]]] = {}
    at = sync_mod.Exposure.at

    def recorded(self, b_last):
        asks.setdefault(id(self), (self, []))[1].append(b_last)
        return at(self, b_last)
    sync_mod.Exposure.at = recorded
    cpu, depth = collections.Counter(), collections.Counter()
    for owner, name in ((structures_mod, "closed_form_models"), (structures_mod, "summarize_models"),
                        (models_mod, "stage_answers"), (models_mod, "chunk_rows"), (sync_mod.Exposure, "at")):
        _timed(cpu, depth, owner, name)
    cluster, model = load_preset("dgx-a100", 128), get_preset("gpt3-175b").with_seq(2048)
    start = time.process_time()
    estimate_many(cluster, model, candidates(args.candidates), cache=CostCache(cluster), on_invalid=OnInvalid.MARK)
    total = time.process_time() - start
    print(f"cold call {total:.2f} s CPU; " + ", ".join(f"{k} {v:.3f} s ({v / total:.0%})" for k, v in cpu.items()))
    sizes = [len(bs) for _, bs in asks.values()]
    buckets = [e.d.shape[-1] for e, _ in asks.values()]
    print(f"Exposure.at: {sum(sizes)} asks of {len(asks)} bucket tuples (per tuple: median {np.median(sizes):g}, max "
          f"{max(sizes)} backwards; median {np.median(buckets):g}, max {max(buckets)} buckets)")
    one_by_one = by_rows = 0.0
    differ = 0
    for e, bs in asks.values():
        start = time.process_time()
        ref = [at(e, b) for b in bs]
        one_by_one += time.process_time() - start
        start = time.process_time()
        tails, kinds = exposure_rows(e, bs)
        by_rows += time.process_time() - start
        differ += sum(np.float64(t).tobytes() != tails[j].tobytes() or k.tobytes() != kinds[j].tobytes()
                      for j, (t, k) in enumerate(ref))
    print(f"one ask per backward {one_by_one * 1e3:.1f} ms CPU, one per tuple {by_rows * 1e3:.1f} ms CPU; "
          f"answers differing in a bit: {differ}")


if __name__ == "__main__":
    main()
