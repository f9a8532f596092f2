"""Compiled StepWork with round compute times, for engine tests whose references are hand-worked.

:func:`compiled` runs :func:`simulator.compile.compile_step` and, given times, sets every chunk's
forward and backward (:func:`timed`); the communication calls, their groups and replicas stay the
compiler's, so a test exercises what the engines really receive.
"""

from dataclasses import replace

from simulator.compile import compile_step
from simulator.gemm_efficiency import GemmEfficiency
from test_collectives_helpers import switched as _switched


def switched(**kw):
    """The helpers' switched cluster, its device given a flat matmul efficiency so that a step compiles
    (tests that need exact compute times set them with :func:`timed`)."""
    cluster = _switched(**kw)
    flat = GemmEfficiency(points=((1.0, 1.0),), source="assumption: peak (compute times set by the tests)")
    return replace(cluster, device=replace(cluster.device, gemm_efficiency=flat))


def timed(work, *, fwd_s: float, bwd_s: float, p2p_s: float | None = None, tp: bool = True, data_s: float = 0.0):
    """``work`` with every chunk's forward ``fwd_s`` and backward ``bwd_s`` (no recompute), no optimizer,
    the data read ``data_s``; p2p calls timed ``p2p_s`` when given, TP calls dropped unless ``tp``."""
    def chunk(c):
        p2p = {k: replace(getattr(c, k), time_s=p2p_s) for k in ("p2p_fwd", "p2p_bwd")
               if p2p_s is not None and getattr(c, k) is not None}
        return replace(c, fwd_s=fwd_s, bwd_s=bwd_s, recompute_s=0.0, tp_fwd=c.tp_fwd if tp else (),
                       tp_bwd=c.tp_bwd if tp else (), **p2p)

    stages = tuple(replace(st, chunks=tuple(chunk(c) for c in st.chunks), optimizer_s=0.0, data_s=data_s)
                   for st in work.stages)
    return replace(work, stages=stages)


def compiled(cluster, strategy, model, **times):
    """``compile_step`` of the inputs (no memory report), with :func:`timed`'s times when given."""
    work = compile_step(cluster, model, strategy, memory=False)
    return timed(work, **times) if times else work
