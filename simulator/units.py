"""Units and size parsing.

Conventions (stated once, used everywhere):
- Bandwidths are decimal: 1 GB/s = 1e9 bytes/s, as in NVIDIA datasheets and nccl-tests' GB/s.
- Sizes are decimal unless they say binary (IEC 80000-13): ``KB``, ``MB``, ``GB``, ``TB`` are 10^3,
  10^6, 10^9, 10^12 bytes; ``KiB``, ``MiB``, ``GiB``, ``TiB`` are 2^10, 2^20, 2^30, 2^40. A bare number
  (or ``B``) is bytes. The one-letter ``K``/``M``/``G``/``T`` (nccl-tests' ``-b 1K`` means 1024) is
  refused as ambiguous. The exceptions are flags that say MiB in their name and help
  (``--bucket-mb``: torch's ``bucket_cap_mb`` counts MiB).
- Printed sizes (:func:`format_size`) use the same units, so ``64KB`` and ``64KiB`` never look alike.
- A size is a whole number of bytes from 1 to :data:`MAX_MESSAGE_BYTES` (1 TiB); ``0.4`` (0 bytes
  once rounded) and ``1e24`` are refused. A range ``SMALL..LARGE`` doubles from SMALL and ends with
  LARGE (``1KiB..1GiB``: the powers of two; ``1KB..1GB``: 1,000 × 2^k, then 1e9), at most 41 sizes.
- Internally time is seconds, sizes bytes, rates bytes/s; names carry the unit when it is not
  SI base (``bw_GBps``, ``latency_us``).
"""

from __future__ import annotations

import re

from simulator.errors import SpecError

GB = 1e9
"""Bytes in a decimal gigabyte (bandwidth and datasheet memory sizes)."""
KiB = 1024
"""Bytes in a binary kibibyte."""
MiB = 1024**2
"""Bytes in a binary mebibyte (bucket sizes: PyTorch DDP's ``bucket_cap_mb=25`` is 25 MiB)."""
GiB = 1024**3
"""Bytes in a binary gibibyte."""
US = 1e-6
"""Seconds in a microsecond."""

MAX_MESSAGE_BYTES = 1024**4
"""The largest message size accepted (1 TiB): over 5× the memory of the largest GPU in the presets,
a B200's 180 GB (1,440 GB for 8 GPUs) [src: nvidia-dgx-b200-ds], so no buffer a collective could send
is refused while ``1e24`` is."""

KB, MB, TB = 10**3, 10**6, 10**12
"""Bytes in a decimal kilobyte, megabyte, terabyte (the default reading of a size)."""
_SIZE_SUFFIX = {
    "": 1, "B": 1,
    "KB": KB, "KIB": KiB,
    "MB": MB, "MIB": MiB,
    "GB": 10**9, "GIB": GiB,
    "TB": TB, "TIB": 1024**4,
}
_AMBIGUOUS = {"K", "M", "G", "T"}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str, field: str = "bytes") -> int:
    """Parse ``"64MB"`` (64·10^6), ``"1KiB"`` (1024), ``"4096"`` into bytes. Rejects negatives."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise SpecError(field, f"cannot read size {text!r}; write e.g. 4096, 64KB or 1GiB")
    suffix = m.group(2).upper()
    if suffix in _AMBIGUOUS:
        raise SpecError(field, f"size unit {m.group(2)!r} in {text!r} is ambiguous: write {suffix}B "
                               f"(10^{3 * (' KMGT'.index(suffix))} bytes) or {suffix}iB (2^{10 * (' KMGT'.index(suffix))})")
    if suffix not in _SIZE_SUFFIX:
        raise SpecError(field, f"unknown size unit {m.group(2)!r} in {text!r}; use B, KB, MB, GB, TB (decimal) "
                               f"or KiB, MiB, GiB, TiB (binary)")
    value = float(m.group(1)) * _SIZE_SUFFIX[suffix]
    if not value <= MAX_MESSAGE_BYTES:  # also inf, from 1e400
        raise SpecError(field, f"size {text!r} is more than the limit of {format_size(MAX_MESSAGE_BYTES)} "
                               f"({MAX_MESSAGE_BYTES:,} bytes)")
    nbytes = int(round(value))
    if nbytes < 1:  # 0, or 0.4 rounded to 0 (a range from it doubled 0 forever)
        raise SpecError(field, f"size must be at least 1 byte, got {text!r}")
    return nbytes


def parse_size_range(text: str, field: str = "bytes") -> list[int]:
    """Parse ``"1KiB..1GiB"`` into the sizes from SMALL doubling up to LARGE, LARGE itself last (so
    ``1KB..1GB`` ends at 1e9, not at 1000·2^19), or one size into a list of one."""
    if str(text).strip().startswith("-"):
        raise SpecError(field, f"size must be positive, got {text!r}")
    if ".." not in str(text):
        return [parse_size(text, field)]
    if "..." in str(text):  # "1KB...1GB" would read as 1KB..0.1GB
        raise SpecError(field, f"cannot read range {text!r}; write SMALL..LARGE with two dots, e.g. 1KB..1GB")
    lo_text, hi_text = str(text).split("..", 1)
    lo, hi = parse_size(lo_text, field), parse_size(hi_text, field)
    if hi < lo:
        raise SpecError(field, f"range {text!r} ends below its start; write SMALL..LARGE")
    sizes = []
    size = lo
    while size < hi:
        sizes.append(size)
        size *= 2
    return sizes + [hi]


def format_size(nbytes: float) -> str:
    """A size in the units :func:`parse_size` reads, exact and unambiguous: the largest decimal unit
    that divides it (``64MB``), else the largest binary one (``64MiB``), else bytes (``1500B``)."""
    for unit, div in (("TB", TB), ("GB", 10**9), ("MB", MB), ("KB", KB),
                      ("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= div and nbytes % div == 0:
            return f"{int(nbytes // div)}{unit}"
    return f"{int(nbytes)}B"
