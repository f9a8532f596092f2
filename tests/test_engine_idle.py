"""``FlowNetwork.idle`` answers without reading resources when no flow is active: its count of active flows
(``_active``) must then be the number of flows filed on resources, through settles, folded calls put back on the
network (``callfold._move_flows``) and folded runs undone (``fold_run.adopt``)."""

import pytest
import simpy

from simulator.engine import network_store
from simulator.engine.network import FlowNetwork
from simulator.engine.network_store import StoredNetwork
from simulator.engine.step import simulate
from test_engine_callfold import CASES, _work
from test_engine_network import path


def _filed(net: FlowNetwork) -> int:
    return len({f.fid for flows in net._res_flows for f in flows.values()})


def test_idle_sees_an_active_flow_and_its_end():
    """One 1 MB flow on r0 at 1 GB/s: r0 busy while it runs (r1 idle), both idle after it; a reservation makes
    a resource busy with no flow active."""
    env = simpy.Environment()
    net = FlowNetwork(env)
    p, q = path(("r0", 1)), path(("r1", 1))
    r0, r1 = net.resources(p)[0], net.resources(q)[0]
    assert net.idle([r0, r1])
    net.transfer(p, 1e6)
    env.run(until=0.5e-3)
    assert not net.idle([r0]) and net.idle([r1]) and net.active_flows == 1
    env.run()
    assert net.idle([r0, r1]) and net.active_flows == 0
    net.reserve("holder", [r1])
    assert not net.idle([r1]) and net.idle([r0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_active_count_is_the_flows_filed_at_every_settle(monkeypatch, name):
    """The shortcut-10 cases (calls folded, put back mid-replay, rests folded again): after every settle of the
    main network, its active count equals the flows on its resources and the flows its store marks active."""
    seen = []
    settle = FlowNetwork._settle

    def checked(self, event):
        settle(self, event)
        if type(self) is StoredNetwork:  # the main network (the scratch ones are FlowNetworks)
            store = self._store
            seen.append((self._active, _filed(self)))
            seen.append((self._active, int(store.active[:store.size].sum())))  # the store's flags agree

    monkeypatch.setattr(FlowNetwork, "_settle", checked)
    monkeypatch.setattr(network_store, "STORE_MIN_RANKS", 0)  # these small cases' main network a store too
    cluster, work = _work(name)
    res = simulate(work, cluster, trace=False)
    assert seen and all(a == b for a, b in seen)
    assert any(a > 0 for a, _ in seen) and res.extras["call_folds"] > 0
