"""A folded run's prediction kept per binade and parity of its start (:meth:`simulator.engine.fold.Folder.fold`).

A run's predicted ends are a chain of float additions from its start ``s`` (``t + seg_s``, ``t + delay_s``, a lone
ring's ``t1 + pre_s``, ``(t1 + alone_s) − t1``, ``+ γ``; a shaped call's ``t + rep_s``, whose ``rep_s`` is itself
kept per binade and parity of its start, :meth:`~simulator.engine.callfold_shapes._Shape.durations`). While every
value of the chain stays in the binade ``[2^(e−1), 2^e)`` of ``s``, each rounding is to that binade's grid of spacing
``u``, and rounding to nearest, ties to even, commutes with a shift by an even multiple of ``u`` (IEEE 754 §4.3.1;
the argument of :func:`simulator.engine.step_ties._binade`). So from a start ``s'`` of the same binade and parity
(``s' = s + 2mu``) the chain gives ``t_k + 2mu`` to the bit, which is ``s' + (t_k − s)`` computed in floats:
``t_k − s`` is exact (two values on one grid in one binade) and so is the sum (on the grid, below ``2^e``). A
:class:`Run` keeps the offsets ``t_k − s`` of a run predicted to its natural end (a call that cannot be folded, a
shaped call with a tail, the action's last item), and a later fold of the same items from a start of the same key
adds its start to them instead of predicting again, where its last end stays below ``2^e``.

What depends on the instant — which calls' resources are idle — is not kept: :meth:`Run.cut` checks each distinct
resource tuple at its first call, in order, and cuts the run before the first busy one, with that tuple's resources
in the run's reservation, exactly as the item-by-item loop did. A chain holding a call whose end is not a plain
addition (several flows with different dues: :func:`~simulator.engine.settle_clock.alone_finishes`) or a negative
duration is predicted every time (:attr:`Run.offsets` None); so is a start at 0.
"""

from __future__ import annotations

from math import frexp, ldexp, ulp


class Run:
    """One fold's items predicted to their natural end: the ends (``ends``: from the start this run was predicted
    at; ``offsets``: from any start of its key, None if the chain is not kept), and per distinct resource tuple its
    first call's place ``pos`` (the number of ends before it) with the resources and mask reserved through it."""

    __slots__ = ("calls", "first", "ends", "offsets", "gates", "res", "mask")

    def __init__(self, calls: list, first: int, ends: list[float], offsets: list[float] | None, gates: list,
                 res: tuple, mask: int):
        self.calls, self.first, self.ends, self.offsets, self.gates, self.res, self.mask = \
            calls, first, ends, offsets, gates, res, mask

    def cut(self, ends: list[float], idle) -> tuple[list[float], tuple, int] | None:
        """``(ends, resources, mask)`` of the run cut before the first call whose resources are not ``idle`` now
        (their resources reserved with the run's, as the loop's), or None when no call is left in it."""
        n, res, mask = len(ends), self.res, self.mask
        for pos, gate, res_through, mask_through in self.gates:
            if not idle(gate):
                n, res, mask = pos, res_through, mask_through
                break
        if not (n + (self.first & 1)) // 2:  # the calls among items first .. first + n − 1
            return None
        return (ends if n == len(ends) else ends[:n]), res, mask


def run_key(calls: list, seg_s: float, item: int, start_s: float) -> tuple | None:
    """The key a run from ``item`` of ``calls`` started at ``start_s`` is kept under: the items, the binade and
    the parity of the start on its grid; None at a start ≤ 0 (not kept)."""
    if not start_s > 0:
        return None
    return id(calls), seg_s, item, frexp(start_s)[1], int(start_s / ulp(start_s)) & 1


def predict(net, calls: list, seg_s: float, item: int, start_s: float, mask_of) -> Run:
    """The run from ``item`` to its natural end from ``start_s``: the loop of :meth:`Folder.fold` without the
    idle checks (:meth:`Run.cut` makes them), the same float operations in the same order."""
    first, n = item, 2 * len(calls) + 1
    t = start_s
    ends: list[float] = []
    gates: list = []
    seen: dict[int, None] = {}
    res: dict[int, None] = {}
    mask = 0
    kept = start_s > 0
    while item < n:
        if item % 2 == 0:
            if seg_s > 0:
                t = t + seg_s
        else:
            call = calls[item // 2]
            if call is None:
                break
            if call.delay_s is None:
                if call.shape is not None:
                    rep_s, all_s = call.shape.durations(net, t)
                    if all_s > rep_s:
                        break  # its replicas hold the links after it (a tail): step by step
                if id(call.res) not in seen:
                    seen[id(call.res)] = None
                    res.update(dict.fromkeys(call.res))
                    mask |= mask_of(call.res)
                    gates.append((len(ends), call.res, tuple(res), mask))
                if call.shape is not None:
                    kept = kept and rep_s >= 0
                    t = t + rep_s  # _Folded's end of the representative
                elif call.alone_s is not None and call.items:  # end_s's common case, inlined
                    t1 = t + call.pre_s if call.pre_s > 0 else t
                    gap = (t1 + call.alone_s) - t1
                    t = t1 + (gap if gap > 0.0 else 0.0)
                    if call.gamma_s > 0:
                        t = t + call.gamma_s
                else:
                    kept = False
                    t = call.end_s(t)
            else:
                kept = kept and call.delay_s >= 0
                t = t + call.delay_s
        ends.append(t)
        item += 1
    offsets = None
    if kept and ends and ends[-1] < ldexp(1.0, frexp(start_s)[1]):
        offsets = [x - start_s for x in ends]
    return Run(calls, first, ends, offsets, gates, tuple(res), mask)


def replayed(run: Run, start_s: float) -> list[float] | None:
    """``run``'s ends from ``start_s`` (a start of its key), or None where its last end would leave the binade."""
    last = start_s + run.offsets[-1]
    if not last < ldexp(1.0, frexp(start_s)[1]):
        return None
    return [start_s + o for o in run.offsets]
