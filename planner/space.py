"""The search space: every strategy a practitioner would consider, as typed axes over flat keys.

A space is an ordered tuple of :class:`Axis`. Each axis sets one flat strategy key
(:mod:`simulator.strategy.flat`) to each of its values, where it applies given the keys set before
it (sequence parallelism only where tp > 1, a schedule only where pp > 1); the degrees are one
axis of (dp, tp, pp) factorisations of the GPU count. A new dimension joins by adding one axis to
:func:`default_axes`, not by editing loops. Context parallelism is the one axis that shares the
degrees: a (d, tp, pp) factorisation and a cp dividing d make dp = d ÷ cp (:func:`enumerate_keys`).
The expert-parallel degree ep is an axis of its own over the divisors of dp that divide the model's
experts, with cp 1 only (:mod:`simulator.strategy.rules`, rule ``cp``).
The placement order is searched per candidate over the orders whose tp, pp, dp, cp and ep groups
differ in shape (nodes spanned, ranks per node), keeping tp within a node
(:mod:`planner.placement`; the others are ranked in the second phase, :mod:`planner.variants`).
FP8 (``precision``) is searched only when asked (``--precision model,fp8``): it changes the
numerics, a recipe the user adopts, not a layout choice.

Pins (``--tp 8``, ``--zero 1,2``, ``--recompute none,full``) restrict an axis to the pinned
values; a pin no candidate can honour is a one-line error naming the flag
(:func:`planner.search.rank` checks every pinned value reaches some candidate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from simulator.errors import SpecError
from simulator.schedules import ScheduleKind
from simulator.strategy import AttentionKind, Offload, PlacementOrder, Recompute, ZeroStage
from simulator.strategy.spec import DEFAULT_INTERLEAVED_V
from simulator.workload.context import ContextKind
from simulator.workload.protocol import divisors

from planner.placement import NodeShape, split_orders

DEFAULT_MAX_MBS = 8
"""Largest micro-batch tried unless ``--max-mbs`` says otherwise: a bound on the search, not a
measured figure (larger micro-batches are searched when the flag raises it)."""
LONG_CONTEXT_TOKENS = 32768
"""Sequences at least this long get context parallelism searched unless pinned (``--cp``): a bound
on the search, not a measured figure (shorter sequences are searched when ``--cp`` asks)."""
MAX_DEFAULT_CP = 8
"""Largest cp degree searched unless pinned: a bound on the search (one node of eight GPUs)."""
DEFAULT_VIRTUAL_STAGES = (DEFAULT_INTERLEAVED_V,)
"""Interleaved chunks per rank tried unless pinned (the CLI's default, :data:`DEFAULT_INTERLEAVED_V`)."""


@dataclass(frozen=True)
class Axis:
    """One dimension of the space: the flat key it sets and its candidate values."""

    key: str
    values: tuple
    applies: Callable[[dict], bool] | None = None
    """Whether the axis applies given the keys set so far; where it does not, the key is left out."""
    allow: Callable[[dict, object], bool] | None = None
    """Whether one value makes sense given the keys set so far (None: every value)."""
    pinned_free: bool = False
    """A pin lifts ``allow``: the rule only trims what the search tries on its own (placement)."""


@dataclass(frozen=True, kw_only=True)
class Problem:
    """What the search is about: the job and the limits the user set."""

    gpus: int
    global_batch: int
    gpus_per_node: int
    layers: int | None
    check_tp: Callable[[int], None]
    max_mbs: int = DEFAULT_MAX_MBS
    allow_cross_node_tp: bool = False
    check_ep: Callable[[int], None] | None = None
    """The workload's expert-parallel rule (``Workload.check_ep``); None: ep 1 only (no experts)."""
    seq_len: int | None = None
    """Tokens per sample (None: not a sequence model): decides the cp degrees searched."""
    uniform_node: bool = True
    """A node's GPUs are interchangeable (:class:`planner.placement.NodeShape`): decides which
    placement orders differ."""

    @property
    def node(self) -> NodeShape:
        return NodeShape(self.gpus_per_node, self.uniform_node)


def _tp_values(p: Problem) -> list[int]:
    out = []
    for tp in divisors(p.gpus):
        if tp > p.gpus_per_node and not p.allow_cross_node_tp:
            continue
        try:
            p.check_tp(tp)
        except SpecError:
            continue
        out.append(tp)
    return out


def degrees(p: Problem) -> tuple[tuple[int, int, int], ...]:
    """(dp, tp, pp) with dp·tp·pp = GPUs, tp the workload accepts (within a node by default) and
    pp ≤ layers."""
    out = []
    for tp in _tp_values(p):
        for pp in divisors(p.gpus // tp):
            if p.layers is None and pp > 1 or p.layers is not None and pp > p.layers:
                continue
            out.append((p.gpus // (tp * pp), tp, pp))
    return tuple(out)


def ep_values(p: Problem) -> tuple[int, ...]:
    """Expert-parallel degrees the workload accepts (ep divides its experts) up to the GPU count; (1,)
    for a model without experts. Which of them divide a candidate's dp is the axis's ``allow``."""
    if p.check_ep is None:
        return (1,)
    out = []
    for ep in divisors(p.gpus):
        try:
            p.check_ep(ep)
        except SpecError:
            continue
        out.append(ep)
    return tuple(out)


def cp_values(p: Problem) -> tuple[int, ...]:
    """cp degrees searched by default: 1, and for sequences of :data:`LONG_CONTEXT_TOKENS` or more the
    powers of two up to :data:`MAX_DEFAULT_CP` (and the node) that divide the GPUs and split the sequence
    into 2·cp chunks (balanced ring, :func:`simulator.strategy.rules.context_problem`)."""
    if p.seq_len is None or p.seq_len < LONG_CONTEXT_TOKENS:
        return (1,)
    limit = min(MAX_DEFAULT_CP, p.gpus_per_node, p.gpus)
    return (1,) + tuple(c for c in (2, 4, 8, 16, 32) if c <= limit and p.gpus % c == 0 and p.seq_len % (2 * c) == 0)


def placement_orders(p: Problem) -> Callable[[dict], tuple]:
    """The orders the first phase searches for a candidate's keys (:func:`planner.placement.split_orders`),
    remembered per set of degrees for this search."""
    memo: dict[tuple, tuple] = {}

    def orders(k: dict) -> tuple:
        degrees = (k["dp"], k["tp"], k["pp"], k.get("cp", 1), k.get("ep", 1))
        if degrees not in memo:
            memo[degrees] = split_orders(p.node, *degrees, cross_node_tp=p.allow_cross_node_tp)[0]
        return memo[degrees]
    return orders


def _micro_batches(p: Problem, keys: dict) -> tuple[int, ...]:
    per_replica, rest = divmod(p.global_batch, keys["dp"])
    return () if rest else tuple(divisors(per_replica, up_to=p.max_mbs))


def default_axes(p: Problem) -> tuple[Axis, ...]:
    """The space the planner searches unless pinned (module docstring)."""
    pipelined = lambda k: k["pp"] > 1  # noqa: E731
    orders = placement_orders(p)
    return (
        Axis("degrees", degrees(p)),
        Axis("cp", cp_values(p)),
        Axis("cp_kind", tuple(ContextKind), lambda k: k.get("cp", 1) > 1),
        # experts sharded over the data-parallel ranks: ep divides dp (simulator.strategy.rules, rule ep)
        Axis("ep", ep_values(p), lambda k: True, allow=lambda k, v: k["dp"] % v == 0),
        Axis("zero", tuple(ZeroStage)),
        Axis("offload", (Offload.NONE,)),
        Axis("schedule", tuple(ScheduleKind), pipelined),
        Axis("virtual_stages", DEFAULT_VIRTUAL_STAGES, lambda k: k.get("schedule") is ScheduleKind.INTERLEAVED),
        Axis("attention", (AttentionKind.FLASH,)),
        # selective recomputation recomputes the attention core, which FlashAttention already does
        Axis("recompute", (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL),
             allow=lambda k, v: v is not Recompute.SELECTIVE or k.get("attention") is AttentionKind.EAGER),
        Axis("sequence_parallel", (False, True), lambda k: k["tp"] > 1),
        # one order per distinct shape of the groups, tp kept in the node (planner.placement); e.g. with
        # tp < node the Megatron-Core order (tp-cp-ep-dp-pp [src: megatron-core]) puts dp, not pp, next to tp
        Axis("placement", tuple(PlacementOrder), pinned_free=True, allow=lambda k, v: v in orders(k)),
        Axis("micro_batch", (), None),  # filled per candidate from the batch (see enumerate_keys)
    )


def pin(axes: tuple[Axis, ...], pins: dict[str, tuple]) -> tuple[Axis, ...]:
    """``axes`` with each pinned key's values replaced by the pinned ones (a pin of a key with no
    axis, e.g. ``dp_sync``, becomes a one-value axis)."""
    out = []
    seen = set()
    for axis in axes:
        if axis.key == "degrees":  # a dp pin is applied per candidate (dp = d ÷ cp, enumerate_keys)
            values = tuple(d for d in axis.values if all(d[i] in pins.get(name, (d[i],))
                                                         for i, name in ((1, "tp"), (2, "pp"))))
            out.append(Axis("degrees", values))
            if "dp" in pins:
                out.append(Axis("dp", tuple(pins["dp"])))
            seen.update(("dp", "tp", "pp"))
        elif axis.key in pins:
            out.append(Axis(axis.key, tuple(pins[axis.key]), axis.applies, None if axis.pinned_free else axis.allow))
            seen.add(axis.key)
        else:
            out.append(axis)
    out += [Axis(key, tuple(values)) for key, values in pins.items() if key not in seen and key != "max_pp"]
    if "max_pp" in pins:
        out[0] = Axis("degrees", tuple(d for d in out[0].values if d[2] <= pins["max_pp"][0]))
    return tuple(out)


def enumerate_keys(p: Problem, axes: tuple[Axis, ...]) -> Iterator[dict]:
    """Every combination of the axes' values as flat strategy keys (plus dp, tp, pp, cp)."""
    fixed = [a for a in axes if a.key not in ("degrees", "micro_batch", "cp", "dp")]
    mbs_axis = next((a for a in axes if a.key == "micro_batch"), None)
    cps = next((a.values for a in axes if a.key == "cp"), (1,))
    dps = next((a.values for a in axes if a.key == "dp"), None)
    for d, tp, pp in next(a for a in axes if a.key == "degrees").values:
        for cp in cps:
            if d % cp or dps is not None and d // cp not in dps:
                continue
            base = {"global_batch": p.global_batch, "dp": d // cp, "tp": tp, "pp": pp, "cp": cp}
            mbs = _micro_batches(p, base)
            if mbs_axis is not None and mbs_axis.values:
                mbs = tuple(b for b in mbs if b in mbs_axis.values)
            yield from _expand(base, fixed, mbs)


def _expand(base: dict, axes: list[Axis], mbs: tuple[int, ...]) -> Iterator[dict]:
    if not axes:
        for b in mbs:
            yield base | {"micro_batch": b}
        return
    axis, rest = axes[0], axes[1:]
    if axis.applies is not None and not axis.applies(base):
        yield from _expand(base, rest, mbs)
        return
    for value in axis.values:
        if axis.allow is None or axis.allow(base, value):
            yield from _expand(base | {axis.key: value}, rest, mbs)
