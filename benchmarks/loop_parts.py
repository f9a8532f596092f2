"""Host time of the parts of a rank's training loop that differ between the executor's families, one process.

Per call, on the suite's tiny fp32 model (``gpt3-125m`` at scale tiny, 28 parameter tensors), each part timed
right after a forward and backward (so gradients exist and the loop's caches are as in a step), median / p10 /
p90 µs over ``--repeats`` calls:

- ``batch``: the step's batch, the replica's share and its micro-batches (``executor.data``), which every
  family's step runs (the parameter server's inside its ``forward`` phase, the others outside every phase);
- ``zero_grad(set_to_none=False)``: the data-parallel runner's (``executor/strategies/data_parallel.py``);
  ``zero_grad(set_to_none=True)``: the tensor and pipeline runner's (``executor/strategies/parallel.py``);
- ``grad = None`` per tensor: the parameter-server worker's (``executor/strategies/param_server.py``), which has
  no optimizer; and its own host work around the transfers: the gradients flattened (``torch.cat``), one message
  per server shard (a header and its slice; 1 shard, as the suite's ps cases), and the pulled parameters written
  back (``vector_to_parameters``);
- the multi-grad hook's registration and removal that stamped DDP's exposed sync once per step with overlapped
  reduction until 2026-11-25 (the executor now stamps it from DDP's comm hook at the last bucket,
  ``executor.strategies.ddp_sync.backward_with_exposed_sync``; kept here as the measurement of what it cost).

    PYTHONPATH=. python benchmarks/loop_parts.py [--repeats 300]

[src: own-loop-parts-probe]
"""

from __future__ import annotations

import argparse
import os
import time


def _timed(fn, step, repeats: int) -> tuple[float, float, float]:
    out = []
    for _ in range(repeats):
        step()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    out.sort()
    return tuple(out[int(q * (len(out) - 1))] * 1e6 for q in (0.5, 0.1, 0.9))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)

    import torch

    from executor.compute_grid import executed, tiny_model
    from executor.data import global_batch, micro_batches, replica_samples
    from executor.model import build_gpt
    from executor.reference import make_optimizer
    from simulator.workload.kinds import DtypePolicy
    from simulator.workload.presets import get_preset

    torch.set_num_threads(1)
    spec = executed(tiny_model(get_preset("gpt3-125m"), DtypePolicy.FP32))
    model = build_gpt(spec, 0)
    optimizer = make_optimizer(model.parameters())
    params = list(model.parameters())
    x = torch.randint(0, spec.vocab, (2, spec.seq_len))

    def step():
        model(x, x).backward()

    def batch():
        inputs, targets = (replica_samples(t, 0, 2) for t in global_batch(0, 1, batch=8, seq=spec.seq_len,
                                                                        vocab=spec.vocab))
        list(zip(micro_batches(inputs, 2), micro_batches(targets, 2)))

    def grad_none():
        for p in params:
            p.grad = None

    def ps_worker():
        grads = torch.cat([p.grad.reshape(-1) for p in params]).float()
        msg = torch.cat([torch.tensor([1.0, 0.0, 0.0]), grads])
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(msg[3:], params)

    def hook():
        torch.autograd.graph.register_multi_grad_hook(params, lambda grads: None, mode="all").remove()

    parts = {"batch": batch, "zero_grad(set_to_none=False)": lambda: optimizer.zero_grad(set_to_none=False),
             "zero_grad(set_to_none=True)": lambda: optimizer.zero_grad(set_to_none=True),
             "grad = None per tensor": grad_none, "ps worker: flatten, message, write back": ps_worker,
             "exposed-sync hook register + remove": hook}
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} load {os.getloadavg()[0]:.1f}; {len(params)} parameter tensors")
    for name, fn in parts.items():
        print("{:38s} median {:7.1f}  p10 {:7.1f}  p90 {:7.1f} µs".format(name, *_timed(fn, step, args.repeats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
