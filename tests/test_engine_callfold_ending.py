"""A call folds over the reservations of folded calls that end at its start (simulator/engine/callfold.py,
``CallFolder._ending_now``): a hierarchical all-reduce's replicas are plans of their own, and when the call is
played on the network their rests fold separately; they end with the representative, whose end starts the next
bucket's call before their releases (due at the same instant) have run. Their flows are gone then, as on the
network, so the next call may fold: the results must be those of the run that plays it on the network, to the
bit, with fewer flows; and a holder that ends later still keeps the call off."""

import pytest

from simulator.cluster.presets import load_preset
from simulator.compile import compile_step
from simulator.engine.callfold import CallFolder, _Folded, _Shape
from simulator.engine.step import simulate
from shortcut_runs import assert_same_run, on_and_off
from simulator.strategy.flat import strategy_from_flat
from simulator.workload.presets import get_preset

H100 = load_preset("dgx-h100").with_nodes(4)
GPT13 = get_preset("gpt3-1.3b")
HIER = dict(global_batch=32, tp=2, pp=2, placement="tp-dp-pp", allreduce_algorithm="hierarchical")
CASES = {"small-buckets": {**HIER, "bucket_bytes": 5_000_000}, "default-buckets": HIER,
         "interleaved-zero1": {**HIER, "zero": 1, "schedule": "interleaved", "virtual_stages": 2,
                               "sequence_parallel": True}}


def _work(name):
    return compile_step(H100, GPT13, strategy_from_flat(CASES[name]), memory=False)


def _spy(monkeypatch) -> list:
    answers = []
    ending = CallFolder._ending_now

    def spied(self, res):
        answers.append(ending(self, res))
        return answers[-1]

    monkeypatch.setattr(CallFolder, "_ending_now", spied)
    return answers


@pytest.mark.parametrize("name", sorted(CASES))
def test_folding_over_holders_that_end_now_changes_no_result(monkeypatch, name):
    work = _work(name)
    answers = _spy(monkeypatch)
    folded = simulate(work, H100, steps=2)
    assert any(answers)  # the case has calls that fold over a holder ending at their start
    monkeypatch.setattr(CallFolder, "_ending_now", lambda self, res: False)
    kept_off = simulate(work, H100, steps=2)
    assert_same_run(folded, kept_off, 0.0)
    assert folded.extras["flows"] < kept_off.extras["flows"]
    assert folded.extras["call_folds"] > kept_off.extras["call_folds"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_they_equal_the_network_play(monkeypatch, name):
    folded, plain = on_and_off(monkeypatch, CallFolder, _work(name), H100, steps=2)
    assert plain.extras["call_folds"] == 0
    assert_same_run(folded, plain, 1e-12)


def test_a_holder_that_ends_later_keeps_the_call_off(monkeypatch):
    """Every reservation ``_ending_now`` lets a call fold over is a folded call's whose end is not after now: the
    check reads the holders' ends (a holder ending later would contend with the new call's flows)."""
    seen = []
    ending = CallFolder._ending_now

    def checked(self, res):
        ok = ending(self, res)
        holders = self.net.holders(res)
        seen.append((ok, [type(h) is _Folded and h.end_s <= self.env.now for h in holders]))
        return ok

    monkeypatch.setattr(CallFolder, "_ending_now", checked)
    simulate(_work("small-buckets"), H100, steps=1)
    assert any(ok for ok, _ in seen) and not all(ok for ok, _ in seen)
    assert all(all(ends) for ok, ends in seen if ok)
    assert any(not all(ends) for ok, ends in seen if not ok)


def test_a_call_a_run_resumes_knows_its_end():
    """``fold_calls.resume`` makes a folded call without ``_Folded.__init__``: its end (read by ``_ending_now``) is
    the one the call folder gives the same call started at the same instant."""
    import simpy

    from simulator.engine import step as step_engine
    from simulator.engine.fold_calls import resume
    from simulator.engine.network import FlowNetwork

    work = _work("interleaved-zero1")
    ctx = step_engine._Ctx(work, H100, False, True)
    launched = [ctx.runner.launch(c, (r, "tp")) for r, sw in enumerate(work.stages) for ch in sw.chunks
                for c in ch.tp_fwd]
    plans = next(plans for delay_s, plans in launched if delay_s is None and len(plans) > 1)
    ends = []
    for how in ("start", "resume"):
        env = simpy.Environment()
        net = FlowNetwork(env)
        folder = CallFolder(env, net)

        def go():
            yield env.timeout(0.37)
            if how == "start":
                folder.start(("k",), plans)
            else:
                resume(folder, folder._shapes.setdefault(("k",), _Shape(net, plans, {})), 0.37, [])
            holders = {id(h): h for h in net.holders(range(len(net._cap)))}
            assert len(holders) == 1
            ends.append(next(iter(holders.values())).end_s)

        env.process(go())
        env.run()
    assert ends[0] == ends[1] == 0.37 + _Shape(net, plans, {}).durations(net, 0.37)[0]
