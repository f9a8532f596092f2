"""One declaration per strategy field: every consumer's list of fields is derived from the
declarations (flat keys, CLI flags, the analytical cache key, the plan file), so adding a field
is one declaration plus the logic that uses it. These tests fail if a consumer drifts."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from simulator.analytical_structures import KEY_FIELDS as _KEY_FIELDS
from simulator.errors import SpecError
from simulator.strategy import Role, Strategy
from simulator.strategy.fields import Flag, decl_of, declare, declared, int_parser, pos_int
from simulator.strategy.flat import FLAT, flat_keys, strategy_from_flat, strategy_to_flat
from trainplan import strategy_flags
from trainplan.__main__ import build_parser

RECORDS = tuple({r for f, d in declared(Strategy) for r in d.nested})


def _option_strings(command: str) -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {s for a in sub.choices[command]._actions for s in a.option_strings}


def test_every_field_of_the_strategy_and_its_records_is_declared_once():
    keys = []
    for cls in (Strategy, *RECORDS):
        for f in dataclasses.fields(cls):
            keys.append(decl_of(f).key)  # raises TypeError for an undeclared field
    assert len(keys) == len(set(keys))
    plain = {d.key for f, d in declared(Strategy) if not d.nested} | {"dp_sync"}
    nested = {d.key for cls in RECORDS for f, d in declared(cls)}
    assert set(FLAT) == plain | nested


@pytest.mark.parametrize("command", ["simulate", "memory"])
def test_both_commands_take_every_declared_flag(command):
    declared_flags = {k.decl.flag.name for k in FLAT.values() if k.decl.flag is not None}
    options = _option_strings(command)
    assert declared_flags <= options
    switches = {k.decl.flag.name for k in FLAT.values() if k.decl.flag and k.decl.flag.kind.value == "switch"}
    assert {"--no-" + f.removeprefix("--") for f in switches} <= options


def test_flag_of_covers_every_flagged_key_and_errors_name_the_flag():
    for key, k in FLAT.items():
        if k.decl.flag is not None:
            assert strategy_flags.FLAG_OF[key] == k.decl.flag.name
    err = strategy_flags.flag_error(SpecError("global_batch", "x"))
    assert str(err) == "--gbs: x"


def test_structure_key_and_plan_file_follow_the_roles():
    # the routing skew is a what-if input the compiled step reads (analytical_structures.COMPILED_SCENARIO)
    assert set(_KEY_FIELDS) == {f.name for f, d in declared(Strategy) if d.role is Role.STRUCTURE} | {"routing_skew"}
    s = Strategy(global_batch=8)
    executable = strategy_to_flat(s, tuple(r for r in Role if r is not Role.SCENARIO))
    scenario = strategy_to_flat(s, (Role.SCENARIO,))
    assert not set(executable) & set(scenario)
    unused = {"mtbf_gpu_hours", "checkpoint_interval_steps", "checkpoint_cost_s", "restart_cost_s",  # no failures
              "ps_mode", "staleness_steps", "ps_shards", "ps_server_nodes"}  # all-reduce, not a parameter server
    assert set(executable) | set(scenario) == set(FLAT) - unused
    assert {"speed_factors", "slowdown_prob", "slowdown_factor", "seed"} <= set(scenario)


def test_a_new_field_is_one_declaration():
    """A field declared on a Strategy subclass shows up, with nothing else edited, as a flat key, a
    command-line flag with its help and default, a checked value and a member of its role."""
    knob = declare(3, key="pipeline_knob", role=Role.STRUCTURE, parse=int_parser("pipeline_knob"), check=pos_int,
                   doc="a made-up structural knob", flag=Flag("--pipeline-knob", "a made-up knob", metavar="K"))
    Plus = dataclasses.make_dataclass("Plus", [("pipeline_knob", int, knob)], bases=(Strategy,), frozen=True,
                                      kw_only=True)
    assert flat_keys(Plus)["pipeline_knob"].field == "pipeline_knob"
    parser = argparse.ArgumentParser()
    strategy_flags.add_strategy_flags(parser, cls=Plus)
    args = parser.parse_args(["--gbs", "8", "--pipeline-knob", "5"])
    assert strategy_flags.strategy_keys(args, cls=Plus)["pipeline_knob"] == "5"
    assert "default: 3" in parser.format_help()
    assert Plus(global_batch=8, pipeline_knob=5).pipeline_knob == 5
    with pytest.raises(SpecError, match="pipeline_knob: must be a positive integer"):
        Plus(global_batch=8, pipeline_knob=0)
    assert "pipeline_knob" in {f.name for f, d in declared(Plus) if d.role is Role.STRUCTURE}


def test_flat_round_trip_of_every_record_kind():
    from simulator.strategy import FailureModel, ParamServerMode, ParamServerSync, StragglerModel

    s = Strategy(global_batch=16, dp_sync=ParamServerSync(mode=ParamServerMode.ASYNC, shards=2, staleness_steps=1),
                 stragglers=StragglerModel(speed_factors=(1.0, 1.5), seed=4),
                 failures=FailureModel(mtbf_gpu_hours=1e4, checkpoint_interval_steps=10, checkpoint_cost_s=5.0,
                                       restart_cost_s=60.0))
    assert strategy_from_flat(strategy_to_flat(s)) == s


def test_validate_runs_every_declared_check_in_field_order(monkeypatch):
    """``validate`` keeps each class's checks once (``fields._CHECKS``): on the strategy and each record
    it still calls every declared check, in field order, with the field's flat key and value."""
    from simulator.strategy import fields

    for cls in (Strategy, *RECORDS):
        obj = strategy_from_flat({"global_batch": 8})
        obj = obj if cls is Strategy else next((getattr(obj, f.name) for f, _ in declared(Strategy)
                                                if isinstance(getattr(obj, f.name), cls)), None)
        if obj is None:  # a record the default strategy does not hold (another sync kind, no failure model)
            continue
        seen = []
        expected = [(d.key, getattr(obj, f.name)) for f, d in declared(cls) if d.check is not None]
        checks = fields._CHECKS.get(cls) or ()
        monkeypatch.setitem(fields._CHECKS, cls, tuple(
            (name, key, lambda k, v, check=check: (seen.append((k, v)), check(k, v))) for name, key, check in checks))
        fields.validate(obj)
        assert seen == expected
