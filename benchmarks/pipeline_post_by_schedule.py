"""Does a pipeline's p2p post cost the same in every schedule? The calibration's pipeline probe, alternated.

``trainplan calibrate --compute`` measures ``host.pipeline_p2p_post_us`` (the host time inside ``_batch_p2p`` per
send or receive) on GPipe only, and the model charges it to 1F1B and interleaved by count. What a post does depends
on the order (gloo's ``tcp::Pair::send`` writes the data on the posting thread when the peer's receive is already
posted, and only queues a notice when it is not), so this runs the same probe
(:func:`executor.pipeline_host_bench.time_pipeline_actions`: 2 gloo processes, the suite's tiny pipeline model, m = 4)
on GPipe, 1F1B and interleaved (v = 2) in turn, ``--rounds`` times, and prints per round the per-action, per-post and
per-chunk terms and each schedule's post over GPipe's in the same round; at the end the median ratio. Alternation
is the point: the post follows the machine's load (docs/validation.md, pipe13), so only rounds taken minutes apart
compare.

Usage: ``PYTHONPATH=. python benchmarks/pipeline_post_by_schedule.py --rounds 5 --steps 100``. Results:
docs/validation.md (pipe19) [src: own-pipeline-post-by-schedule].
"""

from __future__ import annotations

import argparse
import os
import statistics

SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved", 2))
"""(schedule, stages per rank): the suite's three pipelines (``pp-gpipe``, ``pp-1f1b``, ``pp-interleaved``)."""


def one_round(steps: int) -> dict[str, object]:
    """The probe on each of :data:`SCHEDULES`, in order: schedule → its :class:`PipelineActionTiming`."""
    from benchmarks.pipeline_p2p_stamps import tiny_spec
    from executor.pipeline_host_bench import time_pipeline_actions
    from simulator.schedules import ScheduleKind

    return {kind: time_pipeline_actions(pp=2, micro_batches=4, kind=ScheduleKind(kind), v=v, repeats=steps,
                                        warmup=5, spec=tiny_spec(2 * v), micro_batch=2)
            for kind, v in SCHEDULES}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="timed steps per schedule and round")
    args = parser.parse_args(argv)
    ratios: dict[str, list[float]] = {kind: [] for kind, _ in SCHEDULES[1:]}
    for rnd in range(args.rounds):
        load = os.getloadavg()[0]
        timings = one_round(args.steps)
        base = timings["gpipe"].post_us
        for kind, t in timings.items():
            print(f"round {rnd} load {load:.1f} {kind:12s} action {t.action_us:6.0f} post {t.post_us:6.0f} "
                  f"chunk {t.chunk_us:5.0f} us (p2p per rank {t.p2p})", flush=True)
            if kind in ratios and base > 0:
                ratios[kind].append(t.post_us / base)
    for kind, xs in ratios.items():
        if xs:
            print(f"{kind} post / gpipe post: median {statistics.median(xs):.2f}, rounds " +
                  " ".join(f"{x:.2f}" for x in xs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
