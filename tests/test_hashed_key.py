"""A :class:`simulator.hashed_key.HashedKey` is its plain tuple to a dict (equal, same hash, found either way), over
generated tuples of the kinds a structure key holds (enum members, numbers, None, nested tuples, types); a structure
key wrapped in it finds the structure a plain one stored, and the reverse."""

from hypothesis import given, strategies as st

from simulator.analytical_structures import stages_key, structure_key
from simulator.hashed_key import HashedKey
from simulator.schedules import ScheduleKind
from simulator.strategy import AllReduceSync, Recompute, Strategy, ZeroStage

_ITEMS = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                                st.sampled_from(tuple(Recompute) + tuple(ZeroStage)), st.just(AllReduceSync)),
                      lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=20)


@given(st.lists(_ITEMS, max_size=12))
def test_hashed_key_is_its_tuple(items):
    plain, hashed = tuple(items), HashedKey(items)
    assert hashed == plain and plain == hashed and hash(hashed) == hash(plain)
    assert {plain: 1}[hashed] == 1 and {hashed: 2}[plain] == 2 and len({plain: 0, hashed: 0}) == 1


def test_structure_keys_either_way():
    a = Strategy(global_batch=64, tp=2, pp=4, schedule=ScheduleKind.GPIPE, zero=ZeroStage.ZERO1)
    b = Strategy(global_batch=64, tp=2, pp=4, schedule=ScheduleKind.ONE_F_ONE_B, zero=ZeroStage.ZERO1)
    index = {HashedKey(structure_key(a)): 0}
    assert index[structure_key(a)] == 0 and structure_key(b) not in index
    shared = {stages_key(HashedKey(structure_key(a)), False): "compiled"}
    assert shared.get(stages_key(structure_key(b), False)) == "compiled"  # GPipe and 1F1B share their stages
    assert stages_key(structure_key(b), True) not in shared


def test_pickled_key_hashes_again():
    import pickle

    key = HashedKey((Recompute.FULL, 3, None))
    key._hash = 12345  # as another process's seed would have left it
    back = pickle.loads(pickle.dumps(key))
    assert type(back) is HashedKey and back == key and hash(back) == hash(tuple(key))
