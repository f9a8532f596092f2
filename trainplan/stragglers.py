"""``--straggler`` specs → flat straggler keys.

``rank=R,factor=F``: rank R computes F× slower (repeatable); ``prob=P,factor=F``: each rank is
slowed F× in a step with probability P, seeded by ``--seed``.
"""

from __future__ import annotations

from simulator.errors import SpecError


def parse_straggler(text: str) -> dict[str, float]:
    """``rank=3,factor=1.5`` → {"rank": 3, "factor": 1.5}; ``prob=0.05,factor=2`` → {"prob": .05, "factor": 2}."""
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("rank", "factor", "prob"):
            raise SpecError("--straggler", f"cannot read {part!r} in {text!r}; write rank=R,factor=F or "
                            "prob=P,factor=F")
        try:
            out[key] = int(value) if key == "rank" else float(value)
        except ValueError:
            raise SpecError("--straggler", f"{key}={value!r} is not a number; write rank=3,factor=1.5") from None
    if "factor" not in out or ("rank" in out) == ("prob" in out):
        raise SpecError("--straggler", f"{text!r} needs factor=F and exactly one of rank=R or prob=P")
    return out


def straggler_keys(specs: list[str], world: int) -> dict:
    """Flat straggler keys from ``--straggler`` specs: fixed per-rank factors and/or one random slowdown."""
    factors = [1.0] * world
    given: set[int] = set()
    keys: dict = {}
    for spec in map(parse_straggler, specs):
        if "rank" in spec:
            rank = int(spec["rank"])
            if not 0 <= rank < world:
                raise SpecError("--straggler", f"rank {rank} is outside the {world} worker GPUs (0..{world - 1})")
            if rank in given:
                raise SpecError("--straggler", f"rank {rank} is given twice; give each rank's factor once")
            given.add(rank)
            factors[rank] = spec["factor"]
        elif "slowdown_prob" in keys:
            raise SpecError("--straggler", "give one prob=P,factor=F random slowdown, not several")
        else:
            keys.update(slowdown_prob=spec["prob"], slowdown_factor=spec["factor"])
    if any(f != 1.0 for f in factors):
        keys["speed_factors"] = tuple(factors)
    return keys
