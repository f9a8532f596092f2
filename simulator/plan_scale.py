"""Shrink a plan's model to run its strategy's structure on a small machine: pure shape logic.

``scale_plan(plan, Scale.parse("tiny"), nproc=4)`` keeps the strategy's structure — tp, pp, the
schedule and its virtual stages, ZeRO stage, offload, recompute, the gradient-sync algorithm and
buckets, the micro-batch size and the micro-batch count per replica — and shrinks:

- the model (``TransformerSpec``) by :class:`ScaleKind`:

  - ``tiny``: 2·tp query heads of width :data:`TINY_HEAD_DIM` (hidden 32·tp), key/value heads
    2·tp for multi-head attention or tp for grouped/multi-query attention (still fewer than the
    query heads, still divisible by tp), the FFN at the model's own ffn/hidden ratio (rounded up to
    a multiple of tp), max(2, pp·v) layers (one per virtual stage when the plan splits layers by
    hand), :data:`TINY_VOCAB` tokens (a multiple of tp), :data:`TINY_SEQ` tokens per sample;
  - a ratio r in (0, 1): hidden, head width, FFN, layers (at least pp·v), vocabulary and sequence
    each times r, rounded so that every divisibility rule still holds; heads are kept (tp divides
    them already);
  - ``as-planned``: unchanged.

  Norm, activation, positions, biases, tying and dtype are kept, so the model is the same kind. A
  mixture-of-experts model keeps its expert count, top-k and dense layers (those within the new
  layer count); its routed and shared experts' widths shrink at their own ratio to hidden.
  With all-to-all context parallelism, which splits the heads over tp·cp, the model is shrunk as
  for a tp degree of tp·cp (2·tp·cp query heads).
- the world, only when ``nproc`` is smaller than the plan's GPUs: dp becomes nproc ÷ (tp·pp·cp)
  (tp, pp and cp are the structure; nproc must be a multiple of tp·pp·cp), and the global batch
  becomes dp·micro_batch·m so each replica still runs the plan's m micro-batches; ep becomes
  gcd(ep, dp) (it must divide dp, and a divisor of ep still divides the experts).

The plan as run is checked as any plan is (``Plan.layout()``), and ``notes`` say in words what
changed; the results file records it, so the estimates for the run come from the same shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from simulator.enum_kind import Kind
from simulator.errors import SpecError
from simulator.plan_file import Plan
from simulator.strategy import ParamServerSync
from simulator.workload import PositionKind, TransformerSpec
from simulator.workload.context import ContextKind

TINY_HEAD_DIM = 16
"""Width of one attention head in a tiny model (even, as rotary positions need)."""
TINY_VOCAB = 128
"""Vocabulary of a tiny model (rounded up to a multiple of tp)."""
TINY_SEQ = 16
"""Tokens per sample in a tiny model."""


class ScaleKind(Kind):
    """How the model is shrunk (see the module docstring)."""

    AS_PLANNED = "as-planned"
    TINY = "tiny"
    RATIO = "ratio"


@dataclass(frozen=True)
class Scale:
    """A model scale: a kind, and the ratio when the kind is RATIO."""

    kind: ScaleKind
    ratio: float = 1.0

    @classmethod
    def parse(cls, text: str) -> "Scale":
        """``tiny``, ``as-planned``, or a ratio in (0, 1] such as ``0.25`` (1 is as-planned)."""
        text = str(text).strip().lower()
        for kind in (ScaleKind.AS_PLANNED, ScaleKind.TINY):
            if text == kind.value:
                return cls(kind)
        try:
            ratio = float(text)
        except ValueError:
            raise SpecError("scale", f"unknown scale {text!r}; use tiny, as-planned or a ratio in (0, 1] "
                            "such as 0.25") from None
        if not 0 < ratio <= 1:
            raise SpecError("scale", f"ratio {text} must be in (0, 1]; the executor shrinks models, never grows them")
        return cls(ScaleKind.AS_PLANNED) if ratio == 1 else cls(ScaleKind.RATIO, ratio)

    def __str__(self) -> str:
        return f"{self.ratio:g}" if self.kind is ScaleKind.RATIO else self.kind.value


@dataclass(frozen=True, kw_only=True)
class ScaledPlan:
    """A plan and the plan actually run."""

    planned: Plan
    run: Plan
    """Same cluster and structure; the scaled model, world and global batch; no estimates."""
    scale: Scale
    notes: tuple[str, ...]
    """What changed, in words (empty when nothing did)."""


def _up(value: float, multiple: int) -> int:
    """``value`` rounded up to a positive multiple of ``multiple``."""
    return max(multiple, math.ceil(value / multiple) * multiple)


def _moe_within(spec: TransformerSpec, layers: int, hidden: int, tp: int):
    """The spec's experts for a model cut to ``layers`` blocks of width ``hidden``: the dense layers past
    the cut dropped, the routed and shared experts' widths at the model's own expert_ffn/hidden and
    shared_ffn/hidden ratios (rounded up to a multiple of tp); the expert count and top-k are kept."""
    moe = spec.moe
    if moe is None:
        return None
    shared = None if moe.shared_ffn is None else _up(moe.shared_ffn / spec.hidden * hidden, tp)
    return replace(moe, dense_layers=tuple(i for i in moe.dense_layers if i < layers),
                   expert_ffn=_up(moe.expert_ffn / spec.hidden * hidden, tp), shared_ffn=shared)


def _tiny(spec: TransformerSpec, tp: int, stages: int, split: tuple[int, ...] | None):
    heads = 2 * tp
    kv = heads if spec.n_kv_heads == spec.heads else tp
    hidden = heads * TINY_HEAD_DIM
    layers = stages if split is not None else max(2, stages)
    new_split = None if split is None else (1,) * stages
    positions = TINY_SEQ if spec.position is PositionKind.LEARNED else None
    return replace(spec, name=f"{spec.name}-tiny", layers=layers, hidden=hidden, heads=heads, kv_heads=kv,
                   head_dim=TINY_HEAD_DIM, ffn=_up(spec.ffn_size / spec.hidden * hidden, tp),
                   vocab=_up(TINY_VOCAB, tp), seq_len=TINY_SEQ, max_positions=positions,
                   moe=_moe_within(spec, layers, hidden, tp)), new_split


def _ratio(spec: TransformerSpec, r: float, tp: int, stages: int, split: tuple[int, ...] | None):
    if split is not None:
        new_split = tuple(max(1, round(n * r)) for n in split)
        layers = sum(new_split)
    else:
        new_split, layers = None, max(stages, round(spec.layers * r))
    seq = max(1, round(spec.seq_len * r))
    positions = max(seq, round(spec.positions * r)) if spec.position is PositionKind.LEARNED else None
    hidden = max(8, round(spec.hidden * r))
    return replace(spec, name=f"{spec.name}-x{r:g}", layers=layers, hidden=hidden,
                   head_dim=max(2, 2 * round(spec.d_head * r / 2)), ffn=_up(spec.ffn_size * r, tp),
                   vocab=_up(spec.vocab * r, tp), seq_len=seq, max_positions=positions,
                   moe=_moe_within(spec, layers, hidden, tp)), new_split


def scale_model(spec: TransformerSpec, scale: Scale, *, tp: int, stages: int,
                layer_split: tuple[int, ...] | None = None) -> tuple[TransformerSpec, tuple[int, ...] | None]:
    """The model run at ``scale`` for tp degree ``tp`` and ``stages`` = pp·v, and the layer split."""
    if scale.kind is ScaleKind.AS_PLANNED:
        return spec, layer_split
    if scale.kind is ScaleKind.TINY:
        return _tiny(spec, tp, stages, layer_split)
    return _ratio(spec, scale.ratio, tp, stages, layer_split)


def _world(plan: Plan, nproc: int | None) -> int:
    s = plan.strategy
    if nproc is None or nproc == plan.gpus:
        return plan.gpus
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise SpecError("nproc", f"must be a positive integer, got {nproc!r}")
    if isinstance(s.dp_sync, ParamServerSync):
        raise SpecError("nproc", f"a parameter-server plan runs on its planned {plan.gpus} worker processes; "
                        "drop --nproc or plan for fewer GPUs")
    if nproc > plan.gpus:
        raise SpecError("nproc", f"{nproc} exceeds the plan's {plan.gpus} GPUs; the executor only shrinks dp "
                        f"(use at most {plan.gpus})")
    if nproc % (s.tp * s.pp * s.cp):
        names, values = ("tp·pp·cp", f"{s.tp}·{s.pp}·{s.cp}") if s.cp > 1 else ("tp·pp", f"{s.tp}·{s.pp}")
        raise SpecError("nproc", f"{nproc} processes cannot hold the plan's {names} = {values} = "
                        f"{s.tp * s.pp * s.cp} ranks per replica; use a multiple of {s.tp * s.pp * s.cp} "
                        f"(at most {plan.gpus})")
    return nproc


def scale_plan(plan: Plan, scale: Scale, nproc: int | None = None) -> ScaledPlan:
    """The plan as run at ``scale`` on ``nproc`` processes (None: the plan's GPUs). SpecError if it cannot."""
    if not isinstance(plan.model, TransformerSpec):
        raise SpecError("plan.model", f"the executor builds a GPT from a transformer's shapes; a "
                        f"{type(plan.model).__name__} plan cannot run (give a preset or a transformer model)")
    layout = plan.layout()
    strategy = plan.executable_strategy()
    world = _world(plan, nproc)
    notes = []
    heads_split = layout.tp * (layout.cp if strategy.cp_kind is ContextKind.ALL_TO_ALL else 1)
    spec, split = scale_model(plan.model, scale, tp=heads_split, stages=layout.pp * layout.v,
                              layer_split=strategy.layer_split)
    if spec != plan.model:
        m = plan.model
        notes.append(f"model {scale}: layers {m.layers}→{spec.layers}, hidden {m.hidden}→{spec.hidden}, heads "
                     f"{m.heads}/{m.n_kv_heads}→{spec.heads}/{spec.n_kv_heads} (query/kv), ffn {m.ffn_size}→"
                     f"{spec.ffn_size}, vocab {m.vocab}→{spec.vocab}, seq {m.seq_len}→{spec.seq_len}"
                     + (f", expert ffn {m.moe.expert_ffn}→{spec.moe.expert_ffn} ({m.moe.experts} experts, top-"
                        f"{m.moe.top_k} kept)" if m.moe is not None else ""))
    changes = {"layer_split": split}
    if world != plan.gpus:
        dp = world // (layout.tp * layout.pp * layout.cp)
        gbs = dp * strategy.micro_batch * layout.micro_batches
        changes |= {"dp": dp, "global_batch": gbs}
        kept = f"tp {layout.tp}, pp {layout.pp}" + (f", cp {layout.cp}" if layout.cp > 1 else "")
        ep = math.gcd(layout.ep, dp)  # ep divides dp (and still the experts, as a divisor of ep)
        if ep != layout.ep:
            changes["ep"] = ep
        notes.append(f"world {plan.gpus}→{world} processes: dp {layout.dp}→{dp} ({kept} "
                     f"kept{f'; ep {layout.ep}→{ep}' if ep != layout.ep else ''}); global batch "
                     f"{strategy.global_batch}→{gbs}, keeping {layout.micro_batches} "
                     f"micro-batch(es) of {strategy.micro_batch} per replica")
    run = Plan(model=spec, cluster=plan.cluster, gpus=plan.gpus if isinstance(strategy.dp_sync, ParamServerSync)
               else world, strategy=replace(strategy, **changes))
    try:
        run.layout()
    except SpecError as err:
        raise SpecError("scale", f"the plan does not lay out at scale {scale} on {world} processes "
                        f"({err}); use another --scale or --nproc") from None
    return ScaledPlan(planned=plan, run=run, scale=scale, notes=tuple(notes))
