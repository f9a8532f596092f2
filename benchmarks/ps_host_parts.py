"""What a parameter-server step costs on the host beyond the push and the pull, part by part.

The parameter-server family (``executor/strategies/param_server.py``) does, each step, besides sending and
receiving: on a worker, the push's flatten (``torch.cat`` of every gradient, then the header and a shard
per server: ``flatten``) and, after the pull, the copy of the answer into the flat vector and
``vector_to_parameters`` (``unflatten``); on a sync server, the sum of the dp pushes and the mean (``sum``),
the update (``grad.clone()`` + ``AdamW.step`` on the one shard tensor: ``update``) and each answer's
``torch.cat`` (``answer``). This probe runs exactly those lines in one process (one torch thread, as a
suite rank), on the model a results file ran (its ``run.plan.model``: the tiny scale), ``--repeats`` times
each after ``--warmup``, and prints each part's median and p10..p90 in microseconds. The sync server's chain
(sum + update + answers) and the worker's (flatten + unflatten) lie on the step's critical path: the worker
waits for the server's update inside its ``dp`` phase.

Usage: ``PYTHONPATH=. python benchmarks/ps_host_parts.py RESULTS.json [--repeats 300]``. Results:
docs/validation.md (branch var16), [src: own-ps-host-parts-2026-11-25].
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from executor.model import build_gpt
from executor.reference import make_optimizer
from simulator.run_results import load_results

_HEAD = 3


def _time_us(fn, repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def parts(spec, dp: int, impl) -> dict[str, callable]:
    model = build_gpt(spec, seed=0)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    n = sum(p.numel() for p in params)
    shard = nn.Parameter(torch.randn(n))
    optimizer = make_optimizer([shard], impl=impl)
    pushes = [torch.randn(_HEAD + n) for _ in range(dp)]
    answer = torch.randn(2 + n)

    def flatten():
        grads = torch.cat([p.grad.reshape(-1) for p in params]).float()
        return torch.cat([torch.tensor([0.0, 0.0, 1.0]), grads[0:n]])

    def unflatten():
        flat = torch.empty(n)
        flat[0:n] = answer[2:]
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(flat, params)

    def sum_():
        grad = torch.zeros(n)
        for msg in pushes:
            grad += msg[_HEAD:]
            float(msg[2])
        return grad / dp

    def update():
        shard.grad = pushes[0][_HEAD:].clone()
        optimizer.step()

    def answers():
        for _ in range(dp):
            torch.cat([torch.tensor([1.0, 0.5]), shard.detach()])

    return {"flatten": flatten, "unflatten": unflatten, "sum": sum_, "update": update, "answer": answers,
            "params": n, "tensors": len(params)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--repeats", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    res = load_results(args.results)
    strategy = res.run.plan.strategy
    got = parts(res.run.plan.model, res.run.plan.layout().dp, strategy.optimizer_impl)
    print(f"model {res.run.plan.model.name}: {got.pop('params')} parameters in {got.pop('tensors')} tensors, "
          f"dp {res.run.plan.layout().dp}, torch {torch.__version__}, {torch.get_num_threads()} thread")
    for name, fn in got.items():
        xs = _time_us(fn, args.repeats, args.warmup)
        q = statistics.quantiles(xs, n=10)
        print(f"{name:10s} median {statistics.median(xs):8.1f} us  p10..p90 {q[0]:7.1f}..{q[-1]:7.1f}")


if __name__ == "__main__":
    main()
