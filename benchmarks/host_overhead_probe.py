"""Measure the host time per operator call that ``simulator/host_overhead.py`` charges, on this machine.

One process, one thread (as ``trainplan execute`` runs each rank on a 2-core machine), the model the
validation suite runs (llama2-7b at ``--scale tiny``, 2 blocks, 28 parameter tensors):

- a bare 1-element ``add_`` on a plain tensor and on a DTensor (a 1-rank gloo mesh, ``Shard(0)``): the
  plain call is ``device.op_call_overhead_us``, the difference ``device.dtensor_call_overhead_us``;
- ``executor.reference.make_optimizer`` (torch AdamW, the per-tensor loop on the CPU) stepping the model's
  parameters as plain tensors and as DTensors: per tensor and per call (10 calls per tensor,
  ``simulator.host_overhead.ADAMW_PER_TENSOR_CALLS``), to check the model's product against a whole step;
- FSDP2 ``fully_shard`` per block and root against the unwrapped model, forward and forward + backward: the
  host time FSDP2 adds per sharded module (1 rank, so no peer to wait for). Not a model term yet: recorded in
  docs/validation.md ("Where each family's error comes from") as what the zero family's estimate lacks.

- the framework terms ``trainplan calibrate --compute`` measures (:mod:`executor.host_bench`: torch TP per
  tensor-parallel module, DDP per forward and per synchronising backward, ``torch.utils.checkpoint`` per
  region, the AdamW call) on gpt3-125m at ``--scale tiny``, the validation suite's model.

Medians of many repeats with p10/p90; the machine's load average is printed (a shared machine slows calls).
Usage: ``python benchmarks/host_overhead_probe.py [--repeats 200]``. Results and dates: docs/sources.md,
entry ``own-host-overhead-probe``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time


def _timed(fn, repeats: int) -> tuple[float, float, float]:
    """(median, p10, p90) seconds of ``fn()``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return statistics.median(times), times[len(times) // 10], times[9 * len(times) // 10]


def _show(name: str, timing: tuple[float, float, float], per: int = 1) -> str:
    m, p10, p90 = (t / per * 1e6 for t in timing)
    return f"{name:34s} {m:9.2f} us  (p10 {p10:.2f}, p90 {p90:.2f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from executor.model import build_gpt
    from executor.reference import make_optimizer
    from simulator.plan_scale import Scale, ScaleKind, scale_model
    from simulator.workload import DtypePolicy, get_preset

    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    print(f"load average {os.getloadavg()}, torch {torch.__version__}, 1 thread")
    plain = torch.zeros(1)
    sharded = distribute_tensor(torch.zeros(1), mesh, [Shard(0)])
    with torch.no_grad():
        for name, x in (("bare add_ (plain)", plain), ("bare add_ (DTensor)", sharded)):
            for _ in range(10):
                x.add_(1.0)
            print(_show(name, _timed(lambda: x.add_(1.0), 10 * args.repeats)))
    spec, _ = scale_model(get_preset("llama2-7b"), Scale(ScaleKind.TINY), tp=1, stages=1)
    spec = dataclasses.replace(spec, dtype=DtypePolicy.FP32)
    for name, wrap in (("plain", lambda p: p),
                       ("DTensor", lambda p: torch.nn.Parameter(distribute_tensor(p.detach(), mesh, [Shard(0)])))):
        params = [wrap(p) for p in build_gpt(spec).parameters()]
        for p in params:
            p.grad = torch.zeros_like(p)
        opt = make_optimizer(params)
        for _ in range(5):
            opt.step()
        timing = _timed(opt.step, args.repeats)
        print(_show(f"AdamW step, {len(params)} tensors ({name})", timing))
        print(_show(f"  per call ({name})", timing, per=10 * len(params)))
    _fsdp2(spec, args.repeats // 4)
    _framework_terms(args.repeats)
    dist.destroy_process_group()


def _framework_terms(repeats: int) -> None:
    """The terms of :mod:`executor.host_bench` on the suite's model (the group initialised above is reused)."""
    from executor.calibrate_compute import adamw_call_us, tiny_model
    from executor.host_bench import time_adamw, time_checkpoint, time_ddp, time_tp_modules
    from simulator.cluster.io import load_cluster
    from simulator.compute import Phase, layer_times, total_time
    from simulator.workload import DtypePolicy, Recompute, get_preset

    device = load_cluster("localhost-cpu").device
    model = tiny_model(get_preset("gpt3-125m"), DtypePolicy.FP32)
    tp = time_tp_modules(tiny_model(get_preset("gpt3-125m"), DtypePolicy.FP32, tp=2), 2, repeats=repeats,
                         warmup=10)
    print(f"torch TP per module (p10): forward {tp.forward_module_us:9.2f} us, "
          f"backward {tp.backward_module_us:9.2f} us")
    ddp = time_ddp(model, 2, repeats=repeats, warmup=10)
    print(f"DDP (p10): per forward {ddp.forward_call_us:9.2f} us, "
          f"per synchronising backward {ddp.sync_backward_us:9.2f} us")
    rerun_s = total_time(layer_times(model, device, 2, recompute=Recompute.FULL), Phase.RECOMPUTE)
    ck = time_checkpoint(model, 2, rerun_s, repeats=repeats, warmup=10)
    print(f"checkpoint per region (p10): forward {ck.forward_region_us:9.2f} us, "
          f"backward {ck.backward_region_us:9.2f} us (less {rerun_s * 1e6:.1f} us of recompute on localhost-cpu)")
    adamw = time_adamw(model, repeats=repeats, warmup=10)
    print(f"AdamW per call: {adamw_call_us(device, adamw, DtypePolicy.FP32):9.2f} us ({adamw.tensors} tensors)")


def _fsdp2(spec, repeats: int) -> None:
    """FSDP2 (``fully_shard`` per block and on the root, as the executor's ZeRO-3, on the 1-rank mesh: no peer
    to wait for) against the same model unwrapped, forward alone and forward + backward; the differences per
    sharded module are the host time of its all-gather (forward) and of its backward all-gather and
    reduce-scatter."""
    import torch
    from torch.distributed.fsdp import fully_shard

    from executor.model import build_gpt

    tokens = torch.randint(0, spec.vocab, (2, spec.seq_len))

    def forward(model):
        return model(tokens).float().sum()

    def both(model):
        forward(model).backward()

    plain, sharded = build_gpt(spec), build_gpt(spec)
    for block in sharded.layers:
        fully_shard(block, reshard_after_forward=True)
    fully_shard(sharded, reshard_after_forward=True)
    modules = len(sharded.layers) + 1
    rows = {}
    for name, model in (("plain", plain), ("fsdp2", sharded)):
        for what, fn in (("forward", forward), ("forward+backward", both)):
            with torch.no_grad() if what == "forward" else torch.enable_grad():
                for _ in range(5):
                    fn(model)
                rows[name, what] = _timed(lambda: fn(model), repeats)
            print(_show(f"{what} ({name}, {modules - 1} blocks)", rows[name, what]))
    for label, i in (("median", 0), ("p10", 1)):  # p10: the least disturbed calls on a shared machine
        fwd = (rows["fsdp2", "forward"][i] - rows["plain", "forward"][i]) / modules
        bwd = (rows["fsdp2", "forward+backward"][i] - rows["plain", "forward+backward"][i]) / modules - fwd
        print(f"FSDP2 per module ({label}): forward {fwd * 1e6:9.2f} us, backward {bwd * 1e6:9.2f} us")


if __name__ == "__main__":
    main()
