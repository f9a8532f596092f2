"""DeepSpeed 2021 ZeRO-3's reuse-distance release rule (simulator/compile/ds_zero3_reuse.py) against hand-worked
traces [src: deepspeed-zero3-reuse]: a submodule keeps its gathered tensors after a use only when fewer than
``stage3_max_reuse_distance`` = 1e9 elements are traced before its next use; full recomputation re-runs a block's
submodules inside its backward."""

import pytest

from simulator.bucket_defaults import DEEPSPEED_ZERO3, DeepSpeedZero3Config
from simulator.compile.ds_zero3_reuse import EventKind, backward_events, modules
from simulator.memory.shapes import embedding_shapes, head_shapes, layer_param_shapes, numel
from simulator.workload import get_preset

H = 12288  # GPT-3 175B (Narayanan et al. SC'21 Table 2): h = 12288, 96 blocks, biases everywhere, tied head
QKV, OUT, UP, DOWN = 3 * H * H, H * H, 4 * H * H, 4 * H * H


def _model(name):
    spec = get_preset(name)
    shapes = embedding_shapes(spec) + sum((layer_param_shapes(spec, i) for i in range(spec.layers)), [])
    shapes += head_shapes(spec)
    return spec, tuple(n for n, _ in shapes), tuple(numel(s) for _, s in shapes)


def _gathers(names, numels, recompute, tied, config=DEEPSPEED_ZERO3):
    return [names[e.tensor] for e in backward_events(names, numels, recompute, tied, config)
            if e.kind is EventKind.GATHER]


def test_gpt3_175b_block_hand_worked():
    """Full recompute, 1e9 limit: the recompute gathers Q/K/V, out, up, down (freed since the forward: the rest
    of the model lies between); in backward ``mlp.down`` is kept (nothing traced between its recompute and its
    backward), ``mlp.up`` is gathered again (2 · (4h² + h) = 1,207,984,128 ≥ 1e9), and so are ``attn.out`` and
    ``attn.qkv``: 7 gathers per block, 96 · 7 + 2 (token and position embeddings) = 674 per backward, whose
    elements are (12h² + 8h²) per block = 5/3 of the blocks' gathered elements."""
    spec, names, numels = _model("megatron-174.6b")
    got = _gathers(names, numels, True, spec.tied_embeddings)
    block = [g.split(".", 2)[2] for g in got if g.startswith("layers.0.")]
    assert block == ["attn.qkv.weight", "attn.out.weight", "mlp.up.weight", "mlp.down.weight",
                     "mlp.up.weight", "attn.out.weight", "attn.qkv.weight"]
    assert 2 * (UP + H) == 1_207_984_128 and len(got) == 96 * 7 + 2
    blocks = sum(numels[names.index(g)] for g in got if g.startswith("layers."))
    assert blocks == 96 * (QKV + OUT + UP + DOWN + UP + OUT + QKV)
    assert blocks / (96 * (QKV + OUT + UP + DOWN)) == pytest.approx(5 / 3)


def test_no_recompute_one_pass_for_gpt3_175b():
    """Without recomputation a block's forward and backward are a model apart: every tensor is freed and
    gathered once more, 4 · 96 + 2 = 386 gathers (the pre-z3big23 count)."""
    spec, names, numels = _model("megatron-174.6b")
    assert len(_gathers(names, numels, False, spec.tied_embeddings)) == 386


def test_reuse_limit_is_strict():
    """``reuse_distance < max_reuse_distance`` keeps: at 1,207,984,129 ``mlp.up`` stays (only Q/K/V and out are
    gathered again), at 1,207,984,128 it is gathered again."""
    spec, names, numels = _model("megatron-174.6b")
    above = DeepSpeedZero3Config(max_reuse_distance_elements=1_207_984_129)
    at = DeepSpeedZero3Config(max_reuse_distance_elements=1_207_984_128)
    assert len(_gathers(names, numels, True, spec.tied_embeddings, above)) == 96 * 6 + 2
    assert len(_gathers(names, numels, True, spec.tied_embeddings, at)) == 96 * 7 + 2


def test_gradients_arrive_in_reverse_trace_order():
    """One GRAD per tensor, reverse trace order, recompute or not (the reduce buckets' assumption)."""
    spec, names, numels = _model("gpt3-125m")
    for recompute in (True, False):
        grads = [e.tensor for e in backward_events(names, numels, recompute, spec.tied_embeddings)
                 if e.kind is EventKind.GRAD]
        assert grads == list(reversed(range(len(names))))


def test_tied_head_is_an_external_use():
    """The tied head adds one submodule after the final norm holding the token embedding."""
    spec, names, _ = _model("gpt3-125m")
    mods = modules(names, spec.tied_embeddings)
    assert mods[-1].external and mods[-1].tensors == (names.index("embed.tok.weight"),)
    assert not modules(names, False)[-1].external
