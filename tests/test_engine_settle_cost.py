"""What a settle of the flow network costs, not what it computes (simulator.engine.network, fairshare): finished flows
leave no reference cycle for the cyclic collector, and the table numbering of progressive filling's resources is
``np.unique``'s. Both change no rate or instant: the checks are on the objects and arrays themselves."""

import gc

import numpy as np
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cluster.spec import Link, LinkClass, LinkKind
from simulator.cluster.topology import Hop, Path
from simulator.engine import fairshare
from simulator.engine.flows import Flow
from simulator.engine.network import FlowNetwork


def _path(*names, bw_GBps=10.0):
    link = Link(kind=LinkKind.INFINIBAND, bw_GBps=bw_GBps, latency_us=0.0)
    return Path(tuple(Hop((n,), link) for n in names), LinkClass.NET, 1e-6)


def _steps(env, net, n_steps):
    """A chain of steps of three flows sharing a link (contended, several finish instants each)."""
    for k in range(n_steps):
        yield net.transfer_all([(_path("up", f"a{k}"), 1e6, None), (_path("up", f"b{k}"), 2e6, None),
                                (_path(f"c{k}"), 3e6, None)])


def test_finished_flows_leave_no_cycle_for_the_collector():
    """With the collector off, every flow of a finished run is freed by reference count once the network and its
    events are dropped: none is left in cyclic garbage (``gc.DEBUG_SAVEALL`` keeps what a collection finds). Before
    the flow kept its group (which lists the flows) after its end, so every finished flow waited for a pass of
    the collector (at 65,536 GPUs one full pass and 152 young ones inside the step's simulation)."""
    was_enabled, flags = gc.isenabled(), gc.get_debug()
    gc.collect()
    gc.disable()
    try:
        env = simpy.Environment()
        net = FlowNetwork(env)
        env.process(_steps(env, net, 20))
        env.run()
        assert net.stats.flows == 60
        del env, net
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [o for o in gc.garbage if type(o) is Flow]
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()
    assert left == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=400), st.integers(1, 40))
def test_numbering_is_np_unique(values, spread):
    """:func:`fairshare._numbered` returns ``np.unique(res, return_inverse=True)`` exactly, on both of its paths
    (a table up to the largest index when it is small against the pairs, else the sort)."""
    res = np.array(values, dtype=np.int64) * spread
    used, local = fairshare._numbered(res, res.size)
    ref_used, ref_local = np.unique(res, return_inverse=True)
    assert used.tolist() == ref_used.tolist() and local.tolist() == ref_local.reshape(-1).tolist()


def test_numbering_takes_the_table_where_indices_are_few():
    """The table path is the one taken on a tree step's shape (indices below ``TABLE_PER_HOP`` per pair) and the
    sort elsewhere; same arrays either way."""
    dense = np.array([7, 3, 3, 9, 0, 7], dtype=np.int64)
    sparse = dense * 10_000
    for res in (dense, sparse):
        used, local = fairshare._numbered(res, res.size)
        assert used.tolist() == sorted(set(res.tolist()))
        assert [used[i] for i in local.tolist()] == res.tolist()
    assert int(dense.max()) + 1 <= fairshare.TABLE_PER_HOP * dense.size < int(sparse.max()) + 1
