"""Count the bytes each eager operator of torchtitan's 2024 Llama element-wise code moves, forward and backward, and
print them beside :mod:`simulator.workload.model_code`'s chains.

Deterministic (no timing): torch on the CPU dispatches the same ATen operators and autograd formulas as on CUDA.
Each non-view operator is charged the bytes of its tensor inputs and outputs (an in-place one: its inputs), per
element of the tensor the code works on; an input that is a broadcast (``expand``) view is charged at its
storage's size, not its logical size. Written from the sources cited in the module (ATen's composite ``rms_norm``,
torchtitan's ``RMSNorm`` class, ``apply_rotary_emb``, ``repeat_kv``), not copied.
Usage: ``PYTHONPATH=. python benchmarks/torchtitan_eager_ops.py``. Results: docs/validation.md, fsdp23.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from simulator.workload.model_code import (ATEN_COMPOSITE_RMS_NORM, TORCHTITAN_RMSNORM_CLASS, repeat_kv_bytes,
                                           rotary_bytes_per_element)

VIEWS = {"view", "_unsafe_view", "expand", "unsqueeze", "transpose", "view_as_complex", "view_as_real", "as_strided",
         "t", "detach", "alias", "slice", "select", "_reshape_alias", "squeeze", "permute", "_conj", "conj"}
E = 2  # bf16


def _storage_bytes(t: torch.Tensor) -> int:
    """Bytes an operator reads of ``t``: a broadcast view only its storage."""
    return min(t.numel() * t.element_size(), t.untyped_storage().nbytes())


class ByteCount(TorchDispatchMode):
    """Records (operator, bytes) for every non-view operator dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in VIEWS:
            return out
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [] if name.endswith("_") else [a for a in tree_flatten(out)[0] if isinstance(a, torch.Tensor)]
        self.rows.append((name, sum(_storage_bytes(t) for t in ins) + sum(t.numel() * t.element_size() for t in outs)))
        return out


def per_element(fn, inputs, elems: int) -> tuple[float, float]:
    """(forward, backward) bytes per element of ``fn(*inputs)`` (each input a fresh leaf)."""
    count = ByteCount()
    with count:
        y = fn(*inputs)
    n, grad = len(count.rows), torch.ones_like(y)
    with count:
        y.backward(grad)
    return (sum(b for _, b in count.rows[:n]) / elems, sum(b for _, b in count.rows[n:]) / elems)


def aten_composite(x, w):
    """ATen's composite ``rms_norm`` (torch <= 2.7): upcast, pow, mean, add eps, rsqrt, mul, mul weight, cast."""
    u = x.to(torch.float32)
    return u.mul(torch.rsqrt(u.pow(2).mean(-1, keepdim=True).add_(1e-5))).mul(w).type_as(x)


def torchtitan_class(x, w):
    """torchtitan's mid-2024 ``RMSNorm``: ``_norm(x.float()).type_as(x) * weight``."""
    u = x.float()
    return (u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w


def main() -> None:
    torch.manual_seed(0)
    tokens, h = 2048, 512
    leaf = lambda *shape: torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)  # noqa: E731
    print("| code | counted fwd / bwd B per element | modelled fwd / bwd |")
    print("|---|---|---|")
    for name, fn, chain in (("nn.RMSNorm (ATen composite)", aten_composite, ATEN_COMPOSITE_RMS_NORM),
                            ("torchtitan RMSNorm class", torchtitan_class, TORCHTITAN_RMSNORM_CLASS)):
        f, b = per_element(fn, (leaf(tokens, h), leaf(h)), tokens * h)
        print(f"| {name} | {f:.1f} / {b:.1f} | {chain.fwd_bytes(E)} / {chain.bwd_bytes(E)} |")
    s, heads, kv_heads, d = 1024, 8, 2, 64
    freqs = torch.polar(torch.ones(s, d // 2), torch.randn(s, d // 2)).view(1, s, 1, d // 2)

    def rotary(x):
        out = torch.view_as_real(torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2)) * freqs)
        return out.flatten(3).type_as(x)
    f, b = per_element(rotary, (leaf(1, s, heads, d),), s * heads * d)
    per = rotary_bytes_per_element(E)
    print(f"| rotary (complex, fp32) | {f:.1f} / {b:.1f} | {per} / {per} (counted also: the frequency table and "
          "its conjugate, s·d/2 complex) |")
    rep = heads // kv_heads

    def repeat_kv(x):
        return torch.unsqueeze(x, 3).expand(1, s, kv_heads, rep, d).reshape(1, s, heads, d)
    f, b = per_element(repeat_kv, (leaf(1, s, kv_heads, d),), s * kv_heads * d)
    modelled = repeat_kv_bytes(1, rep, E) / 2  # per K or V element
    print(f"| repeat_kv (r = {rep}), per K or V element | {f:.1f} / {b:.1f} | {modelled:.0f} / {modelled:.0f} |")


if __name__ == "__main__":
    main()
