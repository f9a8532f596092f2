"""The chunks' calls remembered per their arguments (:func:`simulator.compile.comm_part.call`,
:func:`simulator.compile.torch_tp.chunk_tp_calls`) are each asking's own answer: one cache asked over a grid where every
argument varies alone gives what a fresh cache computes for that asking. Fails if a memo key drops an argument
(the grid then asks twice with only that argument different, and the second gets the first's answer)."""

import itertools

import pytest

from simulator.cluster.presets import load_preset
from simulator.collectives.base import Op
from simulator.compile import CostCache, comm_part
from simulator.compile.torch_tp import chunk_tp_calls as _tp_calls
from simulator.work import CommKind

CLUSTER = load_preset("dgx-a100", 2)
BASE = dict(sp=False, layers=2, first=False, last=False, full_recompute=False, concurrent=2, attention_only=0,
            logits_bytes=None)
CHANGES = dict(sp=True, layers=3, first=True, last=True, full_recompute=True, concurrent=8, attention_only=1,
               logits_bytes=4_000_000.0)
GROUPS = [(0, 1), (0, 1, 2, 3), (0, 8)]


def _fresh_tp(group, nbytes, **args):
    return _tp_calls(CostCache(CLUSTER), group, nbytes, **args)


@pytest.mark.parametrize("changed", [None, *CHANGES])
def test_tp_call_pairs_differing_in_one_argument_are_each_their_own(changed):
    cache = CostCache(CLUSTER)
    for group, nbytes in itertools.product(GROUPS, (1_000_000, 3_000_000)):
        for args in (BASE, {**BASE, changed: CHANGES[changed]} if changed else BASE):
            args = {**args, "attention_only": args["attention_only"] if args["sp"] else 0}
            assert _tp_calls(cache, group, nbytes, **args) == _fresh_tp(group, nbytes, **args), (changed, group)


def test_the_grid_changes_the_answers():  # so the property above is not vacuous
    base = {**BASE, "last": True, "sp": True}
    answers = {changed: _fresh_tp((0, 1, 2, 3), 1_000_000, **{**base, changed: CHANGES[changed]})
               for changed in CHANGES if changed not in ("last", "sp")}
    answers["sp"] = _fresh_tp((0, 1, 2, 3), 1_000_000, **{**base, "sp": False, "attention_only": 0})
    answers["last"] = _fresh_tp((0, 1, 2, 3), 1_000_000, **{**base, "last": False})
    same = [changed for changed, answer in answers.items() if answer == _fresh_tp((0, 1, 2, 3), 1_000_000, **base)]
    assert same == []


CALLS = [(CommKind.TP, Op.ALL_REDUCE, (0, 1, 2, 3), 1_000_000, 2, "auto", False),
         (CommKind.DP, Op.ALL_REDUCE, (0, 1, 2, 3), 1_000_000, 2, "auto", False),
         (CommKind.TP, Op.ALL_GATHER, (0, 1, 2, 3), 1_000_000, 2, "auto", False),
         (CommKind.TP, Op.ALL_REDUCE, (0, 8), 1_000_000, 2, "auto", False),
         (CommKind.TP, Op.ALL_REDUCE, (0, 1, 2, 3), 2_000_000, 2, "auto", False),
         (CommKind.TP, Op.ALL_REDUCE, (0, 1, 2, 3), 1_000_000, 4, "auto", False),
         (CommKind.TP, Op.ALL_REDUCE, (0, 1, 2, 3), 1_000_000, 2, "tree", False),
         (CommKind.TP, Op.ALL_REDUCE, (0, 1, 2, 3), 1_000_000, 2, "ring", False),
         (CommKind.TP, Op.ALL_REDUCE, (0, 1, 2, 3), 1_000_000, 2, "ring", True),
         (CommKind.PP, Op.SEND_RECV, (0, 8), 1_000_000, 2, "auto", False),
         (CommKind.PP, Op.SEND_RECV, (8, 0), 1_000_000, 2, "auto", False)]


def test_calls_differing_in_one_argument_are_each_their_own():
    cache = CostCache(CLUSTER)
    for args in CALLS + CALLS[::-1]:
        assert comm_part.call(cache, *args) == comm_part.call(CostCache(CLUSTER), *args), args
    distinct = {comm_part.call(CostCache(CLUSTER), *args) for args in CALLS}
    assert len(distinct) == len(CALLS) - 2  # auto runs the ring here and NCCL's replay adds nothing: three agree
