"""``trainplan calibrate``'s output shows the written file's fields measured apart from the fit, in the table and
in ``--json`` (a field the file holds but the output drops is one a user cannot check)."""

from __future__ import annotations

from types import SimpleNamespace

from trainplan.calibrate_output import as_dict, print_table

ROW = SimpleNamespace(ranks=2, op="all-reduce", algorithm="native", nbytes=4096, measured_s=1e-3, median_s=1e-3,
                      p10_s=9e-4, p90_s=1.1e-3, estimate_s=1.1e-3, error_pct=10.0, times_s=(1e-3,))
FIT = SimpleNamespace(rows=(ROW,), probes=(), call_latency_us=30.0, latency_us=120.0, bw_GBps=8.0, hbm_bw_GBps=20.0,
                      fitted=("call_latency_us",), replay_step_us=None, spread=None, median_abs_error_pct=9.0,
                      relinearised=False, machine="quiet", blocking_wait_us=None, wait_spread=None,
                      op_wait_us=None, op_wait_spread=None, wait_moments=None, op_wait_moments=None)
APART = (((2, 330.0),), ((2, ((4, 2246.0),)),), ((2, 829.0), (4, 1066.0)), ((2, 673.0),), ((2, 1378.0),))


def test_json_carries_the_dtensor_waits_by_process_count():
    d = as_dict(FIT, "c.yaml", None, *APART)
    assert d["dtensor_wait_us"] == {"2": 829.0, "4": 1066.0}
    assert d["dtensor_sp_wait_us"] == {"2": 673.0}
    assert d["group_wait_us"] == {"2": {"4": 2246.0}} and d["async_broadcast_us"] == {"2": 330.0}
    assert d["fsdp2_wait_us"] == {"2": 1378.0}


def test_json_without_the_probe_has_empty_tables():
    d = as_dict(FIT, "c.yaml")
    assert d["dtensor_wait_us"] == {} and d["dtensor_sp_wait_us"] == {} and d["fsdp2_wait_us"] == {}


def test_table_prints_each_dtensor_wait(capsys):
    print_table(FIT, None, *APART)
    out = capsys.readouterr().out
    assert "DTensor call  829 us at 2, 1066 us at 4" in out
    assert "  with SP     673 us at 2" in out
    assert "FSDP2 call    1378 us at 2" in out


def test_waits_taken_at_several_moments_are_shown_with_every_moment(capsys):
    """The median is what the file holds; each moment's value is printed and in ``--json`` beside it."""
    from executor.calibrate_moments import Moments
    from simulator.collectives.base import Op

    fit = SimpleNamespace(**{**vars(FIT), "blocking_wait_us": {2: 800.0}, "wait_spread": {},
                             "op_wait_us": {Op.ALL_REDUCE: {2: 900.0}}, "op_wait_spread": {},
                             "wait_moments": {2: Moments((400.0, 800.0, 2400.0))},
                             "op_wait_moments": {Op.ALL_REDUCE: {2: Moments((900.0, 300.0, 1000.0))}}})
    d = as_dict(fit, "c.yaml")
    assert d["blocking_wait_moments_us"] == {"2": [400.0, 800.0, 2400.0]}
    assert d["op_wait_moments_us"] == {"all-reduce": {"2": [900.0, 300.0, 1000.0]}}
    print_table(fit)
    out = capsys.readouterr().out
    assert "at several moments (median written): 2 processes 800 us (moments 400, 800, 2400; min..max 400..2400)" in out
    assert "all-reduce 2 processes 900 us (moments 900, 300, 1000" in out
