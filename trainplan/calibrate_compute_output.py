"""``trainplan calibrate --compute``'s output: the measured compute fields and tables as a dict (``--json``) or
tables (stdout). Split from :mod:`trainplan.cmd_calibrate` (2026-11-25) to keep that module under ~300 lines."""

from __future__ import annotations


def _step_checkpoint(t) -> dict | None:
    from executor.step_checkpoint_bench import step_checkpoint_dict

    return step_checkpoint_dict(t)


def _timing(t) -> dict:
    return {"median_s": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s}


def _tp_optimizer(r) -> dict:
    """The tp probe's AdamW steps and ``host.tp_dtensor_call_us`` from them (thread CPU; the wall figure beside)."""
    from executor.calibrate_host import tp_dtensor_call_us

    o = r.tp_modules.optimizer
    if o is None:
        return {}
    return {"tp_dtensor_call_us": tp_dtensor_call_us(r.fields, r.tp_modules),
            "tp_dtensor_call_us_wall": tp_dtensor_call_us(r.fields, r.tp_modules, wall=True),
            "optimizer": {"dtensor_tensors": o.dtensor_tensors, "plain_params": o.plain_params,
                          "tp_params": o.tp_params, "plain": _timing(o.plain), "tp": _timing(o.tp),
                          "plain_cpu": None if o.plain_cpu is None else _timing(o.plain_cpu),
                          "tp_cpu": None if o.tp_cpu is None else _timing(o.tp_cpu)}}


def compute_dict(r, path: str) -> dict:
    d = r.fields
    return {"out": path, "device": r.device, "threads": r.threads, "precision": r.dtype.value,
            "peak_tflops": {k.value: v for k, v in d.peak_tflops.items()}, "hbm_bw_GBps": d.hbm_bw_GBps,
            "hbm_efficiency": d.gemm_efficiency.hbm_efficiency, "gemm_efficiency": [list(p) for p in d.gemm_efficiency.points],
            "kernel_launch_overhead_us": d.kernel_launch_overhead_us, "kernel_dispatch": d.kernel_dispatch.value,
            "backward_call_overhead_us": d.backward_call_overhead_us,
            "op_call_overhead_us": d.op_call_overhead_us, "bare_call": _timing(r.bare_call),
            "block": {**_timing(r.block), "kernels": r.block_kernels, "roofline_s": r.block_roofline_s,
                      **({} if r.block_phases is None else {"forward": _timing(r.block_phases[0]),
                                                            "backward": _timing(r.block_phases[1])})},
            "gemms": [{"m": g.shape.m, "n": g.shape.n, "k": g.shape.k, "batch": g.shape.batch, "tflops": g.tflops,
                       **_timing(g.timing)} for g in r.gemms],
            "memory": [{"kernel": m.kernel.value, "elements": m.elements, "bytes": m.bytes, "GBps": m.GBps,
                        **_timing(m.timing)} for m in r.memory],
            "tp_modules": None if r.tp_modules is None else {
                "modules": r.tp_modules.modules, "tp_forward_module_us": r.tp_modules.forward_module_us,
                "tp_backward_module_us": r.tp_modules.backward_module_us,
                **{name: _timing(getattr(r.tp_modules, name))
                   for name in ("plain_forward", "tp_forward", "plain_step", "tp_step")},
                "collectives": None if r.tp_modules.collectives is None else _timing(r.tp_modules.collectives),
                **_tp_optimizer(r)},
            "adamw": None if r.adamw is None else {"tensors": r.adamw.tensors, "params": r.adamw.params,
                                                   "step": _timing(r.adamw.step)},
            "checkpoint": None if r.checkpoint is None else {
                "regions": r.checkpoint.regions, "recompute_region_s": r.checkpoint.recompute_region_s,
                "checkpoint_forward_region_us": r.checkpoint.forward_region_us,
                "checkpoint_backward_region_us": r.checkpoint.backward_region_us,
                **{name: _timing(getattr(r.checkpoint, name)) for name in (
                    "plain_forward", "checkpointed_forward", "plain_step", "checkpointed_step")}},
            "fsdp2": None if r.fsdp2 is None else {
                "dp": r.fsdp2.dp, "modules": r.fsdp2.modules, "fsdp2_forward_module_us": r.fsdp2.forward_module_us,
                "fsdp2_backward_module_us": r.fsdp2.backward_module_us,
                **{name: _timing(getattr(r.fsdp2, name)) for name in ("plain_forward", "fsdp2_forward", "plain_step",
                                                                      "fsdp2_step")}},
            "fsdp2_zero2": None if r.fsdp2_zero2 is None else {
                "fsdp2_zero2_backward_module_us": r.fsdp2_zero2.backward_module_us,
                **{name: _timing(getattr(r.fsdp2_zero2, name)) for name in ("plain_step", "fsdp2_step")}},
            "pipeline": None if r.pipeline is None else {
                "schedule": r.pipeline.schedule.value, "pp": r.pipeline.pp, "micro_batches": r.pipeline.micro_batches,
                "actions": list(r.pipeline.actions), "pipeline_action_us": r.pipeline.action_us,
                "outside": [_timing(o) for o in r.pipeline.outside], "p2p": list(r.pipeline.p2p),
                "pipeline_p2p_post_us": r.pipeline.post_us, "post": [_timing(o) for o in r.pipeline.post],
                "pipeline_chunk_us": r.pipeline.chunk_us, "chunk": [_timing(o) for o in r.pipeline.chunk]},
            "rank_steps": None if r.rank_steps is None else {
                "processes": r.rank_steps.processes, "micro_batches": r.rank_steps.micro_batches,
                **{name: [_timing(t) for t in getattr(r.rank_steps, name)]
                   for name in ("forward", "backward", "outside", "optimizer", "first_cold", "last_backward",
                                "ddp_forward", "ddp_last_backward")},
                "ddp_forward_call_us": r.rank_steps.ddp_forward_call_us,
                "ddp_sync_extra_s": r.rank_steps.ddp_sync_extra_s,
                "block_call_us": list(r.block_call_us)},
            "step_launches": None if r.step_launches is None else r.step_launches.as_dict(),
            "step_checkpoint": _step_checkpoint(r.step_checkpoint),
            "ddp": None if r.ddp is None else {
                "ddp_forward_call_us": r.ddp.forward_call_us, "ddp_sync_backward_us": r.ddp.sync_backward_us,
                **{name: _timing(getattr(r.ddp, name)) for name in ("plain_forward", "ddp_forward", "plain_step",
                                                                    "ddp_step")}}}


def print_compute(r) -> None:
    d = r.fields
    peak = ", ".join(f"{k.value} {v * 1e3:.1f} GFLOP/s" for k, v in d.peak_tflops.items())
    bwd = "" if d.backward_call_overhead_us is None else f" forward, {d.backward_call_overhead_us:.1f} us backward"
    split = ("" if r.block_phases is None else f": forward {r.block_phases[0].median_s * 1e3:.3f} + backward "
             f"{r.block_phases[1].median_s * 1e3:.3f}")
    adamw = ""
    if r.adamw:  # measured on gloo only (a GPU calibration has no host probes)
        adamw_s = r.adamw.step.median_s if r.rank_steps is None else r.rank_steps.optimizer_timing.median_s
        adamw = f": AdamW step {adamw_s * 1e3:.3f} ms over {r.adamw.tensors} tensors"
    print(f"device        {r.device}, {r.threads} thread(s), {r.dtype.value}\npeak          {peak}\n"
          f"memory bw     {d.hbm_bw_GBps:.2f} GB/s × efficiency {d.gemm_efficiency.hbm_efficiency:.3f}\n"
          f"per call      {d.kernel_launch_overhead_us:.1f} us{bwd} (block {r.block.median_s * 1e3:.3f} ms{split}, "
          f"{r.block_kernels} host calls, roofline {r.block_roofline_s * 1e3:.3f} ms; bare call "
          f"{r.bare_call.median_s * 1e6:.1f} us)\nper op call   {d.op_call_overhead_us:.1f} us (optimizer calls"
          f"{adamw}; dispatch {d.kernel_dispatch.value})")
    if r.rank_steps is not None:
        k = r.rank_steps
        print(f"rank step     forward {k.forward_s * 1e3:.3f} + backward {k.backward_s * 1e3:.3f} ms per micro-batch, "
              f"{k.outside_s * 1e3:.3f} ms per step outside them ({k.processes} processes in lockstep, "
              f"{k.micro_batches} micro-batches), AdamW {k.optimizer_timing.median_s * 1e3:.3f} ms: the per-call "
              f"figures above; the tight loops gave {r.block_call_us[0]:.1f} / {r.block_call_us[1] or 0.0:.1f} us "
              f"(block), {r.block_call_us[2]:.1f} us (AdamW); the first micro-batch's forward "
              f"{k.first_cold_s * 1e3:.3f} ms above the later ones' (host.step_loop_us, "
              f"host.first_microbatch_cold_us)")
        if r.step_launches is not None:  # the per-call figures above and the loop's are these medians
            print(f"probe launches {r.step_launches.note()}")
        if k.fsdp2_sync_switch_us is not None:
            print(f"FSDP2 loop    {k.fsdp2_sync_switch_us:.1f} us per set_requires_gradient_sync call (one per "
                  f"micro-batch), zero_grad over the shards {k.fsdp2_zero_grad_us:.1f} us per step beyond the plain "
                  f"model's (host.fsdp2_sync_switch_us, host.fsdp2_zero_grad_us)")
    if r.tp_modules is not None:
        t = r.tp_modules
        where = ("a 1-rank mesh" if t.collectives is None else
                 f"a 2-rank tp group, its collectives' {t.collectives.median_s * 1e3:.3f} ms left out")
        print(f"per tp module {t.forward_module_us:.1f} us forward, {t.backward_module_us:.1f} us backward "
              f"(torch tensor parallelism on {where}, {t.modules} modules: forward "
              f"{t.tp_forward.median_s * 1e3:.3f} vs {t.plain_forward.median_s * 1e3:.3f} ms plain, forward + "
              f"backward {t.tp_step.median_s * 1e3:.3f} vs {t.plain_step.median_s * 1e3:.3f} ms)")
    if r.ddp is not None:
        print(f"DDP           {r.ddp.forward_call_us:.1f} us per forward call, {r.ddp.sync_backward_us:.1f} us per "
              f"synchronising backward (1-rank group, collective excluded)")
    if r.rank_steps is not None and r.rank_steps.ddp_forward_call_us is not None:
        k = r.rank_steps
        print(f"DDP in step   {k.ddp_forward_call_us:.1f} us per forward call, {k.ddp_sync_extra_s * 1e6:.1f} us per "
              f"synchronising backward with the bucket passes ({k.processes} processes in lockstep, collective "
              f"excluded): host.ddp_forward_call_us and host.ddp_sync_backward_us (less the passes)")
    if r.checkpoint is not None:
        print(f"checkpoint    {r.checkpoint.forward_region_us:.1f} us per region forward, "
              f"{r.checkpoint.backward_region_us:.1f} us per region backward (beyond its recompute, "
              f"{r.checkpoint.recompute_region_s * 1e6:.1f} us)")
    if r.step_checkpoint is not None:
        from executor.step_checkpoint_bench import step_checkpoint_line

        print(step_checkpoint_line(r.step_checkpoint))
    if r.fsdp2 is not None:
        print(f"FSDP2 module  {r.fsdp2.forward_module_us:.1f} us forward, {r.fsdp2.backward_module_us:.1f} us backward "
              f"(fake {r.fsdp2.dp}-rank group, {r.fsdp2.modules} modules, collectives excluded)")
    if r.pipeline is not None:
        p = r.pipeline
        print(f"pipeline      {p.action_us:.1f} us per schedule action ({p.schedule.value}, {p.pp} processes, "
              f"{p.micro_batches} micro-batches, {'/'.join(map(str, p.actions))} actions; outside the phases "
              f"{'/'.join(f'{o.median_s * 1e3:.3f}' for o in p.outside)} ms per step); {p.post_us:.1f} us posting "
              f"each send or receive; {p.chunk_us:.1f} us of stage bookkeeping per forward or backward")
    print()
    print(f"{'m':>6} {'n':>6} {'k':>6} {'batch':>5} {'median us':>10} {'p10..p90 us':>17} {'GFLOP/s':>8}")
    for g in r.gemms:
        s, t = g.shape, g.timing
        print(f"{s.m:6.0f} {s.n:6.0f} {s.k:6.0f} {s.batch:5.0f} {t.median_s * 1e6:10.1f} "
              f"{f'{t.p10_s * 1e6:.1f}..{t.p90_s * 1e6:.1f}':>17} {g.tflops * 1e3:8.2f}")
    print(f"\n{'kernel':>10} {'elements':>9} {'median us':>10} {'p10..p90 us':>19} {'GB/s':>7}")
    for m in r.memory:
        t = m.timing
        print(f"{m.kernel.value:>10} {m.elements:9d} {t.median_s * 1e6:10.1f} "
              f"{f'{t.p10_s * 1e6:.1f}..{t.p90_s * 1e6:.1f}':>19} {m.GBps:7.2f}")
