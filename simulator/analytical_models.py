"""A structure's closed-form arrays from its distinct stages, read once per distinct stage (:func:`summarize_models`).

:func:`simulator.analytical.summarize_stages` with ``classes`` reads every chunk ``c = r + k·p`` and every rank
``r`` of a structure, though rank ``r``'s stage *is* ``models[classes[r]]``
(:func:`simulator.compile.shared_stages.closed_form_models`): all it reads of rank ``r`` is that model's, and of the
chunk ``c`` its position only to drop the p2p sends off the pipeline's ends (``cf[c]`` for ``c < n − 1``, ``cb[c − 1]``
for ``c > 0``). So here each distinct model is read once into rows (per chunk k: ``F``, ``B``, the parts, the forward
and backward p2p seconds; per stage: tail, exposed, after-step, optimizer), and the structure's arrays are those rows
taken by ``classes`` (``F[k·p + r] = F_model(classes[r])[k]``): numpy indexing, no loop over the n chunks.

A model's chunk rows are kept in ``kept`` by its chunk tuple's id (the entry holds the tuple): a search's structures
that differ only in what the chunks do not read (ZeRO 0/1, buckets: :func:`simulator.compile.stage_keys.stage_keys`)
hold the same chunk tuples and share them. The numbers are :func:`simulator.analytical.summarize_stages`' own
(the same functions on the same objects; tests/test_analytical_models.py compares every array to the bit).
"""

from __future__ import annotations

import numpy as np

from simulator.analytical import _chunk_numbers, gradient_work_s, stage_answers
from simulator.analytical_formula import EXPOSED_KINDS, PART_KINDS, StepArrays
from simulator.work import ChunkWork, StageWork


def chunk_rows(chunks: tuple[ChunkWork, ...], sm_fraction: float, kept: dict) -> tuple:
    """(F, B, parts, forward p2p s, backward p2p s) per chunk of one stage, as arrays over its chunks, and the
    gradient work of its first chunk (:func:`gradient_work_s`, the stage's last backward); a missing p2p call
    reads 0. Remembered in ``kept`` by the tuple's id and ``sm_fraction`` (the entry holds the tuple)."""
    key = ("chunk rows", id(chunks), sm_fraction)
    got = kept.get(key)
    if got is None or got[0] is not chunks:
        v = len(chunks)
        F, B, parts = np.zeros(v), np.zeros(v), np.zeros((v, len(PART_KINDS)))
        fwd_p2p, bwd_p2p = np.zeros(v), np.zeros(v)
        for k, ch in enumerate(chunks):
            F[k], B[k], parts[k] = _chunk_numbers(ch, sm_fraction)
            if ch.p2p_fwd is not None:
                fwd_p2p[k] = ch.p2p_fwd.time_s
            if ch.p2p_bwd is not None:
                bwd_p2p[k] = ch.p2p_bwd.time_s
        got = kept[key] = (chunks, F, B, parts, fwd_p2p, bwd_p2p, gradient_work_s(chunks[0]))
    return got[1:]


def summarize_models(models: tuple[StageWork | None, ...], classes: tuple[int, ...], v: int,
                     sm_fraction: float = 0.0, kept: dict | None = None) -> StepArrays:
    """``summarize_stages(models, v, sm_fraction, kept, classes)`` (:func:`simulator.analytical.summarize_stages`),
    each distinct model read once and the ranks' arrays taken by ``classes`` (module docstring). ``kept``: a dict the
    caller keeps between calls (a search's structures), shared with :func:`summarize_stages`' own entries."""
    same = {} if kept is None else kept
    seen: dict = {}
    distinct = sorted(set(classes))
    row_of = {j: i for i, j in enumerate(distinct)}
    chunk_cols: list[list] = [[], [], [], [], []]  # F, B, parts, forward p2p, backward p2p: one entry per model
    stage_cols: list[list] = [[], [], [], []]      # tail, exposed, after, optimizer
    for j in distinct:
        st = models[j]
        *rows, b_last = chunk_rows(st.chunks, sm_fraction, same)
        for col, row in zip(chunk_cols, rows):
            col.append(row)
        for col, value in zip(stage_cols, (*stage_answers(st, b_last, sm_fraction, seen, same), st.optimizer_s)):
            col.append(value)
    take = np.array([row_of[j] for j in classes], dtype=np.intp)
    p = len(classes)
    n = p * v
    # (models, v) taken by rank → (p, v); chunk c = k·p + r is element [r, k], so transposed and flattened
    F, B, fwd_p2p, bwd_p2p = (np.array(col)[take].T.reshape(n) for col in
                              (chunk_cols[0], chunk_cols[1], chunk_cols[3], chunk_cols[4]))
    parts = np.array(chunk_cols[2]).reshape(len(distinct), v, len(PART_KINDS))[take].transpose(1, 0, 2)
    tail = np.array(stage_cols[0], dtype=float)[take]
    exposed = np.array(stage_cols[1], dtype=float).reshape(-1, len(EXPOSED_KINDS))[take]
    after = np.array(stage_cols[2], dtype=float).reshape(-1, len(EXPOSED_KINDS))[take]
    opt = np.array(stage_cols[3], dtype=float)[take]
    data = models[classes[0]].data_s if p else 0.0
    return StepArrays(p=p, v=v, F=F[None], B=B[None], parts=parts.reshape(n, len(PART_KINDS))[None],
                      cf=fwd_p2p[:max(n - 1, 0)][None], cb=bwd_p2p[1:][None], tail=tail[None],
                      sync_exposed=exposed[None], opt=opt[None], after=after[None], data=np.array([data]))
