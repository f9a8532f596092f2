"""One rotation of a ring step in local form, without its per-rotation tuple (des26, issue 12).

A ring's reduce-scatter / all-gather step ``s`` sends, on every link ``k = c·p + i`` (channel ``c``, ring position
``i`` → ``i + 1``), channel ``c``'s part of the slice owned by position ``i − r`` (``r`` the step's rotation): the
links are the same in every step, only the lengths rotate, ``bytes[k] = lengths[c][(i − r) mod p]``. When every
length is positive (no transfer is left out), a :class:`RotatedStep` stands for the step's content
``tuple((src, dst, bytes[k], nic) for k)`` with the links and the ``C × p`` length array shared by every rotation,
so ``p`` rotations cost O(p·C) to build instead of O(p²·C). Iterating it gives that tuple's transfers, and it
compares equal to it (both built on demand: tests, small groups); the engine reads :attr:`links` and
:meth:`bytes_row` (shapes.py, plan_bw.py).
"""

from __future__ import annotations

import numpy as np


class RotatedStep:
    """Rotation ``r`` of a ring step: ``links[k]`` = (src, dst, NIC index) carries ``bytes_row()[k]`` bytes."""

    __slots__ = ("links", "lengths", "r")

    def __init__(self, links: tuple, lengths: np.ndarray, r: int):
        self.links = links
        """(src, dst, NIC index) per link, channel-major (``k = c·p + i``); the same object in every rotation."""
        self.lengths = lengths
        """int64 ``[channel, position]``: channel ``c``'s length of the slice owned by ring position ``i``, all > 0."""
        self.r = r

    def bytes_row(self) -> np.ndarray:
        """Each link's bytes as float64, link order: ``lengths[c][(i − r) mod p]`` (``np.roll`` by ``r``); the same
        floats as ``float(n)`` of the ints (exact below 2⁵³)."""
        return np.roll(self.lengths, self.r, axis=1).ravel().astype(float)

    def __iter__(self):
        ints = np.roll(self.lengths, self.r, axis=1).ravel().tolist()
        return iter([(s, d, n, nic) for (s, d, nic), n in zip(self.links, ints)])

    def __len__(self) -> int:
        return len(self.links)

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, RotatedStep)) else NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"RotatedStep(r={self.r}, links={len(self.links)})"
