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

from simulator.analytical import kept_chunk_numbers, stage_answers
from simulator.analytical_formula import EXPOSED_KINDS, PART_KINDS, StepArrays
from simulator.work import ChunkWork, StageWork


_CHUNK_COLUMNS = 4 + len(PART_KINDS)
"""Per chunk of a model's rows (:func:`chunk_rows`): F, B, forward p2p, backward p2p, then the parts."""


def chunk_rows(chunks: tuple[ChunkWork, ...], sm_fraction: float, kept: dict) -> tuple[np.ndarray, float]:
    """(per chunk of one stage: F, B, forward p2p seconds, backward p2p seconds, then :data:`PART_KINDS`' seconds, as a
    (v, :data:`_CHUNK_COLUMNS`) array; the gradient work of its first chunk, :func:`gradient_work_s`, the stage's last
    backward). A missing p2p call reads 0. Remembered in ``kept`` by the tuple's id and ``sm_fraction`` (the entry
    holds the tuple)."""
    key = ("chunk rows", id(chunks), sm_fraction)
    got = kept.get(key)
    if got is None or got[0] is not chunks:
        rows, b_last = np.zeros((len(chunks), _CHUNK_COLUMNS)), None
        for k, ch in enumerate(chunks):
            numbers = kept_chunk_numbers(ch, sm_fraction, kept)  # shared by chunks of equal calls and seconds
            rows[k, 0], rows[k, 1], rows[k, 4:] = numbers[1:4]
            b_last = numbers[4] if b_last is None else b_last  # the first chunk's gradient work
            if ch.p2p_fwd is not None:
                rows[k, 2] = ch.p2p_fwd.time_s
            if ch.p2p_bwd is not None:
                rows[k, 3] = ch.p2p_bwd.time_s
        got = kept[key] = (chunks, rows, b_last)
    return got[1], got[2]


def _classes(classes: tuple[int, ...], kept: dict) -> tuple[list[int], np.ndarray]:
    """(the distinct models in order, per rank the row of its model among them), kept per ``classes``."""
    key = ("model rows of classes", classes)
    got = kept.get(key)
    if got is None:
        distinct = sorted(set(classes))
        row_of = {j: i for i, j in enumerate(distinct)}
        got = kept[key] = (distinct, np.array([row_of[j] for j in classes], dtype=np.intp))
    return got


def summarize_models(models: tuple[StageWork | None, ...], classes: tuple[int, ...], v: int,
                     sm_fraction: float = 0.0, kept: dict | None = None) -> StepArrays:
    """``summarize_stages(models, v, sm_fraction, kept, classes)`` (:func:`simulator.analytical.summarize_stages`),
    each distinct model read once and the ranks' arrays taken by ``classes`` (module docstring). ``kept``: a dict the
    caller keeps between calls (a search's structures), shared with :func:`summarize_stages`' own entries."""
    same = {} if kept is None else kept
    seen: dict = {}
    distinct, take = _classes(classes, same)
    chunk_mats, stage_rows = [], []
    for j in distinct:
        st = models[j]
        rows, b_last = chunk_rows(st.chunks, sm_fraction, same)
        chunk_mats.append(rows)
        tail, exposed, after = stage_answers(st, b_last, sm_fraction, seen, same)
        stage_rows.append((tail, *exposed.tolist(), *after.tolist(), st.optimizer_s))
    p = len(classes)
    n = p * v
    # (models, v, columns) taken by rank → (p, v, columns); chunk c = k·p + r is [r, k], so axes swapped and flattened
    per_chunk = np.array(chunk_mats)[take].transpose(1, 0, 2).reshape(n, _CHUNK_COLUMNS)
    per_rank = np.array(stage_rows, dtype=float)[take]
    e = len(EXPOSED_KINDS)
    data = models[classes[0]].data_s if p else 0.0
    return StepArrays(p=p, v=v, F=per_chunk[None, :, 0], B=per_chunk[None, :, 1], parts=per_chunk[None, :, 4:],
                      cf=per_chunk[None, :max(n - 1, 0), 2], cb=per_chunk[None, 1:, 3], tail=per_rank[None, :, 0],
                      sync_exposed=per_rank[None, :, 1:1 + e], opt=per_rank[None, :, 1 + 2 * e],
                      after=per_rank[None, :, 1 + e:1 + 2 * e], data=np.array([data]))
