"""What one array settle of the main network costs: a fixed part per settle and a part per flow, and how many of a
settle's ended (flow, resource) pairs share a resource.

The step of ``bench_des.measure`` (GPT-3 175B, tp 8 × pp 8, 96 micro-batches, full recompute), each size in a fresh
process (from 32,768 GPUs the dp trees put ~10^6 flows on the main network, a
:class:`~simulator.engine.network_store.StoredNetwork`). Per call of ``StoredNetwork._apply_arrays``: its CPU time
(``time.process_time``), whether it was done on arrays or found small (a *try*), its due and arriving flows, the
store's pairs. The done ones' times are fitted by least squares as ``fixed + per_flow·(due + arriving) +
per_pair·pairs`` (:func:`fit_costs`): ``fixed`` is what a settle costs whatever its size (numpy calls on small arrays,
the filing loop), ``per_flow`` mostly the Python upkeep per flow (the per-resource tables ``_res_flows`` that small
settles walk, the completions).

*Pairs per resource*: for each done settle, its ended flows' pairs over the distinct resources they cross
(:func:`pairs_per_resource`). Updating the tables one resource at a time (a stable sort of the pairs by resource,
then ``dict.update`` / ``clear`` per table) pays off only if a resource carries many of them; a tree step's flows
meet ~2 per resource, so it does not (docs/engine.md, des23).

Run by hand: ``python benchmarks/bench_des_arrays.py [--gpus 32768 65536]``. Times are CPU seconds on whatever load
the machine has (the wrapper adds ~1 µs per call); the counts do not depend on it.
"""

from __future__ import annotations

import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def fit_costs(flows: np.ndarray, pairs: np.ndarray, seconds: np.ndarray) -> tuple[float, float, float]:
    """Least-squares ``(fixed_s, per_flow_s, per_pair_s)`` of ``seconds ≈ fixed + per_flow·flows + per_pair·pairs``."""
    x = np.column_stack((np.ones(len(seconds)), flows, pairs)).astype(float)
    coef, *_ = np.linalg.lstsq(x, np.asarray(seconds, dtype=float), rcond=None)
    return float(coef[0]), float(coef[1]), float(coef[2])


def pairs_per_resource(routes: list[tuple[int, ...]]) -> tuple[int, int]:
    """The pairs of ``routes`` (flows' resource tuples) and the distinct resources they cross."""
    flat = [r for route in routes for r in route]
    return len(flat), len(set(flat))


def measure(gpus: int) -> dict:
    """Simulate ``bench_des``'s step at ``gpus`` GPUs with every array settle timed and counted (module docstring)."""
    from bench_des import step_case

    from simulator.compile import compile_step
    from simulator.engine import network_store
    from simulator.engine.step import simulate

    records, ended = [], [0, 0]
    apply_arrays = network_store.StoredNetwork._apply_arrays
    complete = network_store.StoredNetwork._complete

    def timed(self, now, slack, arrivals, due, arriving, arriving_hops):
        c0 = time.process_time()
        done = apply_arrays(self, now, slack, arrivals, due, arriving, arriving_hops)
        records.append((done, len(due) + len(arrivals), self._pairs.pair_res.size, time.process_time() - c0))
        return done

    def counted(self, now, finished, slots):
        n_pairs, n_res = pairs_per_resource([f.res for f in finished])
        ended[0] += n_pairs
        ended[1] += n_res
        return complete(self, now, finished, slots)

    network_store.StoredNetwork._apply_arrays = timed
    network_store.StoredNetwork._complete = counted
    cluster, model, strategy = step_case(gpus)
    work = compile_step(cluster, model, strategy)
    gc.collect()
    c0 = time.process_time()
    res = simulate(work, cluster, trace=False)
    cpu = time.process_time() - c0
    rec = np.array(records, dtype=float).reshape(-1, 4)
    done = rec[:, 0] == 1
    fixed, per_flow, per_pair = fit_costs(rec[done, 1], rec[done, 2], rec[done, 3]) if done.sum() > 3 else (0, 0, 0)
    return {"gpus": gpus, "cpu_s": cpu, "step_s": res.step_time_s, "done": int(done.sum()),
            "done_s": float(rec[done, 3].sum()), "tries": int((~done).sum()), "tries_s": float(rec[~done, 3].sum()),
            "fixed_ms": fixed * 1e3, "per_flow_us": per_flow * 1e6, "per_pair_us": per_pair * 1e6,
            "flows_mean": float(rec[done, 1].mean()) if done.any() else 0.0,
            "pairs_mean": float(rec[done, 2].mean()) if done.any() else 0.0,
            "pairs_per_res": ended[0] / ended[1] if ended[1] else 0.0, "load_1m": os.getloadavg()[0]}


def main() -> None:
    from bench_des import child_measure, sizes_or_child

    sizes = sizes_or_child(measure, [32768, 65536])
    if sizes is None:
        return
    print("| GPUs | CPU s | array settles | their CPU s | fixed ms | per flow µs | per pair µs | flows / settle | "
          "pairs / settle | tries | their CPU s | ended pairs / resource | load |")
    print("|---:|" + "---:|" * 12)
    for gpus in sizes:
        r = child_measure(__file__, gpus)
        print(f"| {gpus:,} | {r['cpu_s']:.2f} | {r['done']:,} | {r['done_s']:.2f} | {r['fixed_ms']:.3f} | "
              f"{r['per_flow_us']:.2f} | {r['per_pair_us']:.3f} | {r['flows_mean']:.0f} | {r['pairs_mean']:.0f} | "
              f"{r['tries']:,} | {r['tries_s']:.2f} | {r['pairs_per_res']:.2f} | {r['load_1m']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
