"""How long a pipeline transfer keeps a waiting receiver blocked, per transfer, in the executor's own pipeline.

Runs the executor's stages of the suite's tiny model (``executor.pipeline_host_bench._gpt_stages``) on 2 gloo
processes under torch's ``_PipelineScheduleRuntime`` (the executor's ``load_schedule``, the simulator's lists),
GPipe, 1F1B and interleaved 1F1B in turn, and stamps on the system-wide monotonic clock, per rank and step: each
``forward_one_chunk`` / ``backward_one_chunk``, each posting of a send or receive (``_batch_p2p``, labelled by the
stage's ``get_*_ops`` call just before it) and each receive wait (``_wait_batch_p2p``). Per transfer
(stage, F/B, micro-batch) it pairs the sender's post with the receiver's wait and prints, over the timed steps:

- ``latency``: wait end − the latest of the wait's start, the send's posting start and the receive's posting end,
  apart for transfers whose receive was posted before the send and the others (the time a transfer keeps a blocked
  receiver: what the simulator charges per send as hop + ``W``, ``comm.blocking_wait_us``); median, p10, p90, mean;
- ``late``: the transfers whose data had arrived before the wait began (wait < 50 µs), and their share;
- per step (medians): the step, the sum of waits, the sum of posts, and the counts;
- per boundary: the share of its transfers after micro-batch 0 whose send was posted before their receive, beside
  the share the model's list walk (:func:`simulator.receive_first.expected_prices`) gives on the run's own median
  forward, backward and latencies: whether the model classifies the transfers as the run does (docs/validation.md,
  pipe19);
- send-first transfers apart by whether the receiver waited at once after posting or computed in between, and per
  transfer the margin (receive posting − send posting) run vs the walk's, its spread over steps and the shares run
  vs Φ(walk margin / spread) (``benchmarks/pipeline_p2p_order.py``; docs/validation.md, pipe21).

Usage: ``PYTHONPATH=. python benchmarks/pipeline_p2p_stamps.py --steps 60 --rounds 3``. Results: docs/validation.md
(pipe16) [src: own-pipeline-p2p-latency-2026-11-25].
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

WARMUP = 5
ARRIVED_NS = 50_000
"""A receive wait shorter than this found its data already there (not a blocked receiver)."""


def _rank(rank: int, world: int, kind_value: str, m: int, v: int, steps: int):
    import torch
    from torch.distributed.pipelining import PipelineStage, schedules

    from executor.pipeline_host_bench import _gpt_stages
    from executor.strategies.pipeline import load_schedule
    from simulator.schedules import ScheduleKind, make_schedule

    spec = tiny_spec(world * v)
    schedule = make_schedule(ScheduleKind(kind_value), world, m, v)
    modules, x, target, loss = _gpt_stages(spec, world, v, rank, 2, m)
    n = world * v
    stages = [PipelineStage(mod, s, n, torch.device("cpu")) for mod, s in modules]
    runner = load_schedule(schedule, stages, m)
    events: list[tuple] = []
    label: list = [None]

    def wrap_compute(stage, name, tag):
        fn = getattr(stage, name)

        def timed(mb, *a, **k):
            t0 = time.monotonic_ns()
            try:
                return fn(mb, *a, **k)
            finally:
                events.append((tag, stage.stage_index, mb, t0, time.monotonic_ns()))
        setattr(stage, name, timed)

    def wrap_label(stage, name, tag):
        fn = getattr(stage, name)

        def labelled(mb, *a, **k):
            label[0] = (tag, stage.stage_index, mb)
            return fn(mb, *a, **k)
        setattr(stage, name, labelled)

    for st in stages:
        wrap_compute(st, "forward_one_chunk", "F")
        wrap_compute(st, "backward_one_chunk", "B")
        for name, tag in (("get_fwd_send_ops", "SF"), ("get_bwd_send_ops", "SB"),
                          ("get_fwd_recv_ops", "RF"), ("get_bwd_recv_ops", "RB")):
            wrap_label(st, name, tag)
    batch, wait = schedules._batch_p2p, schedules._wait_batch_p2p
    works: dict[int, tuple] = {}

    def post(ops, *a, **k):
        t0 = time.monotonic_ns()
        out = batch(ops, *a, **k)
        t1 = time.monotonic_ns()
        tag, s, mb = label[0]
        events.append(("post" + tag, s, mb, t0, t1))
        works[id(out)] = (tag, s, mb)
        return out

    def waited(work):
        t0 = time.monotonic_ns()
        wait(work)
        tag, s, mb = works.get(id(work), ("?", -1, -1))
        events.append(("wait" + tag, s, mb, t0, time.monotonic_ns()))

    schedules._batch_p2p, schedules._wait_batch_p2p = post, waited
    first, last = rank == 0, (n - 1) in range(rank, n, world)
    out = []
    for i in range(WARMUP + steps):
        events.clear()
        kwargs = {"target": target, "losses": []} if last else {}
        t0 = time.monotonic_ns()
        runner.step(*((x,) if first else ()), **kwargs)
        t1 = time.monotonic_ns()
        torch.distributed.barrier()
        if i >= WARMUP:
            out.append((t0, t1, list(events)))
    return out


def tiny_spec(stages: int):
    """The suite's pipeline model as run (``--scale tiny``, gpt3-125m over ``stages`` stages, no dropout)."""
    from dataclasses import replace

    from simulator.plan_scale import Scale, scale_model
    from simulator.workload.presets import get_preset

    spec, _ = scale_model(get_preset("gpt3-125m"), Scale.parse("tiny"), tp=1, stages=stages)
    return replace(spec, dropout=0.0)


def transfers(ranks: list, step: int) -> list[tuple[str, float, float]]:
    """(kind, latency_ns or None, wait_ns) per transfer of one step: a transfer is the sender's ``postS*`` and the
    receiver's ``postR*`` / ``waitR*`` of the same (stage pair, mb)."""
    sends, recvs, waits = {}, {}, {}
    for r in ranks:
        for tag, s, mb, t0, t1 in r[step][2]:
            if tag in ("postSF", "postSB"):
                sends[(tag[-1], s + (1 if tag[-1] == "F" else -1), mb)] = t0
            elif tag in ("postRF", "postRB"):
                recvs[(tag[-1], s, mb)] = t1
            elif tag in ("waitRF", "waitRB"):
                waits[(tag[-1], s, mb)] = (t0, t1)
    rows = []
    for key, (w0, w1) in waits.items():
        send, recv = sends.get(key, w0), recvs.get(key, w0)
        rows.append((recv <= send, w1 - max(w0, send, recv), w1 - w0))
    return rows


def send_first_shares(ranks: list) -> dict[tuple[str, int], tuple[float, int]]:
    """Per boundary and direction (``"F"``/``"B"``, sending stage): the share of its transfers after micro-batch 0
    whose send was posted before their receive, over the timed steps, and their count: what the model's
    :func:`simulator.receive_first.expected_prices` calls the serial share."""
    out: dict[tuple[str, int], list[int]] = {}
    for k in range(len(ranks[0])):
        sends, recvs = {}, {}
        for r in ranks:
            for tag, s, mb, t0, t1 in r[k][2]:
                if tag in ("postSF", "postSB") and mb > 0:
                    sends[(tag[-1], s, mb)] = t0
                elif tag in ("postRF", "postRB") and mb > 0:
                    sender = s - 1 if tag[-1] == "F" else s + 1
                    recvs[(tag[-1], sender, mb)] = t1
        for key, t_send in sends.items():
            if key in recvs:
                out.setdefault(key[:2], []).append(int(recvs[key] > t_send))
    return {key: (sum(v) / len(v), len(v)) for key, v in sorted(out.items())}


def model_shares(kind: str, v: int, ranks: list) -> dict[tuple[str, int], float]:
    """The model's serial share per boundary (:func:`simulator.receive_first.expected_prices`) on this run's own
    medians: each stage's forward and backward, and the blocked-receiver latencies of the two classes as prices."""
    from simulator.receive_first import expected_prices
    from simulator.schedules import ActionKind

    schedule, fwd, bwd, full, first = _walk_inputs(kind, v, ranks)
    n = schedule.n_stages
    keys = [(s, ActionKind.F) for s in range(n - 1)] + [(s, ActionKind.B) for s in range(1, n)]
    shares = expected_prices(schedule, fwd, bwd, {key: full for key in keys}, {key: first for key in keys})
    return {(key[1].value, key[0]): shares[key][2] for key in keys if key in shares}


def _walk_inputs(kind: str, v: int, ranks: list) -> tuple:
    """(schedule, forward and backward seconds per stage, send-first and receive-first prices): this run's medians."""
    from simulator.schedules import ScheduleKind, make_schedule

    schedule = make_schedule(ScheduleKind(kind), len(ranks), 4, v)
    times: dict[tuple[str, int], list[float]] = {}
    for r in ranks:
        for step in r:
            for tag, s, _mb, t0, t1 in step[2]:
                if tag in ("F", "B"):
                    times.setdefault((tag, s), []).append((t1 - t0) / 1e9)
    n = schedule.n_stages
    fwd = [statistics.median(times.get(("F", s), [0.0])) for s in range(n)]
    bwd = [statistics.median(times.get(("B", s), [0.0])) for s in range(n)]
    lat = {True: [], False: []}
    for k in range(len(ranks[0])):
        for recv_first, latency, w in transfers(ranks, k):
            if w >= ARRIVED_NS:
                lat[recv_first].append(latency / 1e9)
    first = statistics.median(lat[True]) if lat[True] else 0.0
    full = statistics.median(lat[False]) if lat[False] else first
    return schedule, fwd, bwd, full, first


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def _dist(xs) -> str:
    if not xs:
        return "none"
    return (f"median {statistics.median(xs):.0f} p10 {_pct(xs, .1):.0f} p90 {_pct(xs, .9):.0f} "
            f"mean {statistics.fmean(xs):.0f} (n={len(xs)})")


def summarise(kind: str, ranks: list) -> str:
    lat, late, total = {True: [], False: []}, 0, 0
    step_ms, wait_ms, post_ms = [], [], []
    posts = {"S": [], "R": []}
    for k in range(len(ranks[0])):
        for recv_first, latency, w in transfers(ranks, k):
            total += 1
            if w < ARRIVED_NS:
                late += 1
            elif latency is not None:
                lat[recv_first].append(latency / 1e3)
        for r in ranks:
            for tag, *_, t0, t1 in r[k][2]:
                if tag.startswith("post"):
                    posts[tag[4]].append((t1 - t0) / 1e3)
        step_ms.append(max((r[k][1] - r[k][0]) for r in ranks) / 1e6)
        wait_ms.append(statistics.fmean(sum(t1 - t0 for tag, *_, t0, t1 in r[k][2] if tag.startswith("wait"))
                                        for r in ranks) / 1e6)
        post_ms.append(statistics.fmean(sum(t1 - t0 for tag, *_, t0, t1 in r[k][2] if tag.startswith("post"))
                                        for r in ranks) / 1e6)
    s = (f"{kind}: blocked-receiver latency us, receive posted first: {_dist(lat[True])}; send posted first: "
         f"{_dist(lat[False])}; data there before the wait "
         f"{late}/{total}; per step ms: step {statistics.median(step_ms):.2f}, waits/rank "
         f"{statistics.median(wait_ms):.2f}, posts/rank {statistics.median(post_ms):.2f}; one post us median send "
         f"{statistics.median(posts['S']):.0f} (p90 "
         f"{_pct(posts['S'], .9):.0f}), receive {statistics.median(posts['R']):.0f} (p90 {_pct(posts['R'], .9):.0f})")
    from benchmarks.pipeline_p2p_order import send_first_split

    split = send_first_split(ranks)
    s += (f"\n    send-first transfers, us: receiver blocked at once (receive posting's start to the wait's end) "
          f"{_dist(split['blocked'])}; receiver computing in between (its wait) {_dist(split['computing'])}")
    return s


def timeline(ranks: list) -> str:
    """The events of the step whose (slowest rank's) length is the median, per rank, in ms from its start."""
    lengths = [max(r[k][1] - r[k][0] for r in ranks) for k in range(len(ranks[0]))]
    k = sorted(range(len(lengths)), key=lengths.__getitem__)[len(lengths) // 2]
    t0 = min(r[k][0] for r in ranks)
    lines = [f"    median step {lengths[k] / 1e6:.2f} ms"]
    for i, r in enumerate(ranks):
        ev = sorted(r[k][2], key=lambda e: e[3])
        lines.append(f"    rank {i} ends {(r[k][1] - t0) / 1e6:.2f}: " + " ".join(
            f"{tag}{s}.{mb}[{(a - t0) / 1e6:.2f}-{(b - t0) / 1e6:.2f}]" for tag, s, mb, a, b in ev))
    return "\n".join(lines)


def main(argv=None) -> int:
    from benchmarks.pipeline_p2p_order import order_report
    from executor import launch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeline", action="store_true", help="print the median step's events")
    parser.add_argument("--schedules", nargs="+", default=["gpipe", "1f1b", "interleaved"])
    args = parser.parse_args(argv)
    for rnd in range(args.rounds):
        print(f"round {rnd}, load {os.getloadavg()[0]:.2f}", flush=True)
        for kind in args.schedules:
            v = 2 if kind == "interleaved" else 1
            ranks = launch.run(_rank, 2, args=(kind, 4, v, args.steps), num_threads=1)
            print("  " + summarise(kind, ranks), flush=True)
            model = model_shares(kind, v, ranks)
            print("    send-first share after micro-batch 0, run (model's walk on the run's medians): " + "; ".join(
                f"{d}{s} {share:.2f} ({model.get((d, s), float('nan')):.2f}, n={n})"
                for (d, s), (share, n) in send_first_shares(ranks).items()), flush=True)
            print(order_report(kind, v, ranks), flush=True)
            if args.timeline:
                print(timeline(ranks), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
