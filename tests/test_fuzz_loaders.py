"""Fuzzing the file loaders (issue 15, part 4): whatever a cluster file or a config.json holds, the
only exception that may come out is :class:`SpecError`, and what loads can be described.

Inputs: random bytes and random text as a file; random JSON-like nested structures; the valid
minimal cluster file and Llama/GPT-2 configs with one field set to a random value of any type
(huge and tiny numbers, NaN, infinity, lists, mappings, text). The default run is quick
(150 examples per test); ``pytest --hypothesis-profile long`` runs 10,000 in all (``fuzz_budget.py``),
``TRAINPLAN_FUZZ_EXAMPLES=N`` any number per test, ``TRAINPLAN_FUZZ_LOG=path`` records every case.
"""

import copy
import json
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from simulator.cluster.describe import cluster_summary_dict, describe_cluster
from simulator.cluster.io import cluster_from_dict, load_cluster
from simulator.errors import SpecError
from simulator.workload import load_model, spec_from_hf_config
from fuzz_budget import fuzz_settings
from fuzz_budget import spec_errors_only as shared_spec_errors_only

FUZZ = fuzz_settings(quick=150, tests=7)
CASE_LIMIT_S = 20
"""CPU seconds after which one load counts as hung."""

MINIMAL = yaml.safe_load((Path(__file__).parent / "data" / "minimal_cluster.yaml").read_text())
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 4096,
         "num_key_value_heads": 8, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
        "vocab_size": 50257, "n_inner": None, "resid_pdrop": 0.1}
HF_KEYS = sorted(set(LLAMA) | set(GPT2) | {"head_dim", "attention_bias", "attention_dropout", "dtype",
                                             "hidden_dropout", "_name_or_path"})

EXTREMES = st.sampled_from([0, -1, 1, 3, 2**31, 2**63, 10**20, 10**400, 0.5, 1e300, -1e300, 5e-324, 1e-9, 1e15,
                            1e16, float("inf"), float("nan"), True, "", "8", None, [], {}, [1], {"a": 1}])
"""Values at and past every limit, and of every wrong type, drawn often (random ones rarely hit them)."""
numbers = st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), EXTREMES)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
field_values = st.one_of(EXTREMES, scalars, values)
LAYER = {"name": "fc", "params": 10, "fwd_flops": 20.0, "activation_bytes": 40, "output_bytes": 8}


def only_spec_errors(load):
    """``load()``, or None when it raised SpecError; any other exception fails the test (shared helper)."""
    return shared_spec_errors_only("loaders", load, CASE_LIMIT_S)


def paths_of(d, prefix=()):
    """Every key path of a nested dict (lists are leaves)."""
    for key, value in d.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from paths_of(value, prefix + (key,))


CLUSTER_PATHS = list(paths_of(MINIMAL))


def file_with(data: bytes, suffix: str) -> str:
    fd, name = tempfile.mkstemp(suffix=suffix)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return name


@FUZZ
@given(data=st.one_of(st.binary(max_size=400), st.text(max_size=400).map(str.encode)),
       suffix=st.sampled_from([".yaml", ".json"]))
def test_cluster_file_of_random_bytes(data, suffix):
    path = file_with(data, suffix)
    try:
        only_spec_errors(lambda: load_cluster(path))
    finally:
        os.unlink(path)


@FUZZ
@given(doc=values)
def test_cluster_of_random_structure(doc):
    path = file_with(json.dumps(doc).encode(), ".json")
    try:
        only_spec_errors(lambda: load_cluster(path))
    finally:
        os.unlink(path)


@FUZZ
@given(where=st.sampled_from(CLUSTER_PATHS), value=field_values, also_unknown=st.booleans())
def test_cluster_with_one_field_of_any_value(where, value, also_unknown):
    d = copy.deepcopy(MINIMAL)
    node = d
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    if also_unknown and isinstance(value, dict):
        node.update(value)
    cluster = only_spec_errors(lambda: cluster_from_dict(d))
    if cluster is not None:   # what loads can be shown, as `cluster show` does
        assert describe_cluster(cluster) and cluster_summary_dict(cluster)
        assert 0 < cluster.world_size <= 100_000


@FUZZ
@given(base=st.sampled_from([LLAMA, GPT2]), key=st.sampled_from(HF_KEYS), value=field_values)
def test_hf_config_with_one_field_of_any_value(base, key, value):
    cfg = dict(base, **{key: value})
    spec = only_spec_errors(lambda: spec_from_hf_config(cfg, "fuzz", "config.json"))
    if spec is not None:
        assert spec.params > 0 and spec.summary() and spec.describe()


@FUZZ
@given(key=st.sampled_from(sorted(LAYER) + ["dtype", "name!"]), value=field_values)
def test_layer_list_with_one_field_of_any_value(tmp_path, key, value):
    layer = dict(LAYER)
    doc = {"name": "m", "layers": [layer, dict(LAYER, name="out")]}
    if key == "dtype":
        doc["dtype"] = value
    elif key == "name!":
        doc["name"] = value
    else:
        layer[key] = value
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    model = only_spec_errors(lambda: load_model(str(path)))
    if model is not None:
        assert model.summary() and model.describe()


@FUZZ
@given(cfg=values)
def test_hf_config_of_random_structure(cfg):
    only_spec_errors(lambda: spec_from_hf_config(cfg, "fuzz", "config.json"))


@FUZZ
@given(data=st.one_of(st.binary(max_size=400), values.map(lambda v: json.dumps(v).encode())))
def test_model_file_of_random_content(data):
    path = file_with(data, ".json")
    try:
        only_spec_errors(lambda: load_model(path))
    finally:
        os.unlink(path)
