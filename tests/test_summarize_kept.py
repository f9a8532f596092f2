"""summarize_stages with its bucket answers kept between calls (``kept``, as a search's structures share them)
gives each structure the arrays it gets alone, to the bit, whatever structures came before; an entry whose ids
match but whose tuples are other objects (an id reused after its tuple died) is not taken."""

from dataclasses import fields

import numpy as np

from simulator.analytical import summarize_stages
from simulator.cluster.presets import load_preset
from simulator.compile import CostCache
from simulator.compile.shared_stages import closed_form_stages
from simulator.strategy import AllReduceSync, Recompute, Strategy, ZeroStage, build_layout
from simulator.units import MiB
from simulator.workload import get_preset

CLUSTER, MODEL = load_preset("dgx-a100", 4), get_preset("gpt3-1.3b")
STRATEGIES = [Strategy(global_batch=64, tp=tp, pp=pp, micro_batch=mbs, recompute=rc, zero=zero,
                       sequence_parallel=tp > 1, dp_sync=AllReduceSync(bucket_bytes=bucket * MiB))
              for tp, pp in ((1, 4), (2, 2), (4, 1)) for mbs in (1, 2) for rc in (Recompute.NONE, Recompute.FULL)
              for zero in (ZeroStage.ZERO0, ZeroStage.ZERO1) for bucket in (1, 25)]


def _equal(a, b) -> bool:
    return all(np.array_equal(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))


def test_kept_answers_give_each_structure_its_own_arrays():
    cache, kept, hits = CostCache(CLUSTER), {}, 0
    for s in STRATEGIES + STRATEGIES[::-1]:
        stages = closed_form_stages(cache, MODEL, build_layout(s, CLUSTER, MODEL))
        before = len(kept)
        shared = summarize_stages(stages, 1, 0.1, kept=kept)
        hits += len(kept) == before
        assert _equal(shared, summarize_stages(stages, 1, 0.1))
    assert hits >= len(STRATEGIES)  # the second pass takes every answer from the kept ones


def test_an_entry_for_other_objects_with_the_same_ids_is_not_taken():
    cache = CostCache(CLUSTER)
    stages = closed_form_stages(cache, MODEL, build_layout(STRATEGIES[0], CLUSTER, MODEL))
    kept: dict = {}
    right = summarize_stages(stages, 1, 0.1, kept=kept)
    for key, (held, *answer) in list(kept.items()):  # the same ids, other (equal) tuples, a wrong answer
        kept[key] = (tuple(list(x) for x in held), 99.0, *answer[1:])
    assert _equal(summarize_stages(stages, 1, 0.1, kept=kept), right)
