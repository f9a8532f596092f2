""":func:`simulator.hashed_key.kept_hash`: the workload's and the compute options' hash, computed once per object, is
the value ``@dataclass(frozen=True)`` generates (the tuple of every compared field: fails if a field is left out or
an unhashed one added), equal objects hash equal, a replaced copy hashes its own fields, and the kept value is never
pickled (another process's hash seed gives enum members and strings other hashes)."""

import pickle
from dataclasses import fields, replace

from hypothesis import given, strategies as st

from simulator.hashed_key import kept_hash
from simulator.workload import get_preset
from simulator.workload.kinds import KernelFusion
from simulator.workload.protocol import ComputeOptions
from simulator.workload.transformer import TransformerSpec
from simulator.workload.flops import Recompute

_OPTIONS = st.builds(ComputeOptions, micro_batch=st.integers(1, 64), tp=st.sampled_from((1, 2, 4, 8)),
                     recompute=st.sampled_from(tuple(Recompute)), sequence_parallel=st.booleans(),
                     fusion=st.sampled_from(tuple(KernelFusion)), ep=st.sampled_from((1, 2, 8)),
                     routing_skew=st.floats(1.0, 4.0), autocast=st.booleans(), vocab_multiple=st.sampled_from((1, 128)))


def _generated(obj) -> int:
    """What ``@dataclass(frozen=True)``'s own ``__hash__`` gives: every field with ``compare`` (none sets ``hash``)."""
    assert all(f.hash is None for f in fields(obj))
    return hash(tuple(getattr(obj, f.name) for f in fields(obj) if f.compare))


def test_the_classes_keep_their_hash_and_are_frozen():
    for cls in (TransformerSpec, ComputeOptions):
        assert cls.__hash__ is kept_hash and cls.__dataclass_params__.frozen


@given(_OPTIONS, _OPTIONS)
def test_options_hash_is_the_generated_one(one, two):
    assert hash(one) == _generated(one) and hash(one) == hash(one)
    assert hash(two) == _generated(two)
    if one == two:
        assert hash(one) == hash(two)
    copy = replace(one, tp=two.tp, micro_batch=two.micro_batch)
    assert hash(copy) == _generated(copy)


@given(st.sampled_from(("gpt3-175b", "llama2-70b", "gpt3-1.3b")), st.sampled_from((1024, 2048, 4096)))
def test_workload_hash_is_the_generated_one(name, seq):
    model = get_preset(name)
    hash(model)
    longer = model.with_seq(seq)
    assert hash(longer) == _generated(longer) and hash(model) == _generated(model)


def test_the_kept_hash_is_not_pickled():
    for obj in (get_preset("gpt3-175b"), ComputeOptions(micro_batch=2, recompute=Recompute.FULL)):
        hash(obj)
        obj.__dict__["_kept_hash"] = 12345  # as another process's hash seed would have left it
        back = pickle.loads(pickle.dumps(obj))
        assert back == obj and "_kept_hash" not in back.__dict__ and hash(back) == _generated(back)
