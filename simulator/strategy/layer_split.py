"""The layers of each (virtual) pipeline stage: a plan's explicit ``layer_split``, or the even split.

:func:`even_split` is the one home of the default split rule (⌊l/n⌋ layers each, the l mod n extra ones to
stages 1, 2, ...); :func:`split_layers` picks it or the strategy's own split for
:func:`simulator.strategy.layout.build_layout`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.errors import SpecError

if TYPE_CHECKING:
    from simulator.strategy.spec import Strategy


def even_split(layers: int, stages: int) -> tuple[int, ...]:
    """Layers per stage when none is given: ⌊l/n⌋ each, the l mod n extra ones to stages 1, 2, ... (stage 0 also
    holds the embedding), built as three runs (a search splits once per structure). The one home of this rule."""
    if stages > layers:
        raise SpecError("pp", f"pp·virtual_stages = {stages} exceeds the model's {layers} layers; "
                        f"use at most {layers} stages")
    base, extra = divmod(layers, stages)
    return (base,) + (base + 1,) * extra + (base,) * (stages - 1 - extra)  # extra < stages: stages 1..extra exist


def split_layers(s: Strategy, layers: int | None) -> tuple[int, ...]:
    """The layers of each (virtual) stage; the count rule (pp·v ≤ layers) is checked before, in RULES."""
    if layers is None:
        return (0,)
    if s.layer_split is not None:
        if sum(s.layer_split) != layers:
            raise SpecError("layer_split", f"sums to {sum(s.layer_split)}; the model has {layers} layers")
        return s.layer_split
    return even_split(layers, s.pp * s.virtual_stages)
