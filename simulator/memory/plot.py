"""Stacked bars of the per-rank breakdown for ZeRO stages 0-3 side by side (the picture of the
ZeRO paper's Figure 1), with the device memory as a line. matplotlib is imported on call only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from simulator.jsonio import check_plot_path
from simulator.memory.report import GB, MemoryReport, memory_report
from simulator.strategy import Framework, Offload, ZeroStage, build_layout

PARTS = (("params_bytes", "parameters"), ("grads_bytes", "gradients"), ("optimizer_bytes", "optimizer states"),
         ("activations_bytes", "activations"), ("buffers_bytes", "buffers"), ("runtime_total_bytes", "runtime (CUDA, cuBLAS, NCCL, allocator)"))
"""Bar segments, bottom to top: (StageMemory attribute, legend label)."""


def _at_stage(strategy, zero: ZeroStage):
    """``strategy`` at ZeRO stage ``zero``; what that stage cannot do is dropped for its bar: an offload
    (optimizer offload under ZeRO 0, parameter/NVMe offload below ZeRO 3), a framework that does not
    implement the stage (with its partitioning: the defaults are used), DDP's bucket view outside torch DDP."""
    offload = strategy.offload
    if (offload is Offload.OPTIMIZER and zero is ZeroStage.ZERO0) or \
            (offload in (Offload.PARAMS, Offload.NVME) and zero is not ZeroStage.ZERO3):
        offload = Offload.NONE
    framework, partitioning = strategy.framework, strategy.partitioning
    if framework is not None and zero not in framework.zero_stages:
        framework, partitioning = None, None
    out = replace(strategy, zero=zero, offload=offload, framework=framework, partitioning=partitioning,
                  gradient_as_bucket_view=False)
    if strategy.gradient_as_bucket_view and out.resolved_framework is Framework.TORCH_DDP:
        out = replace(out, gradient_as_bucket_view=True)
    return out


def zero_sweep(model, cluster, layout) -> list[tuple[ZeroStage, MemoryReport]]:
    """Reports for ZeRO 0-3 with everything else as in ``layout`` (see :func:`_at_stage`)."""
    return [(zero, memory_report(model, cluster, build_layout(_at_stage(layout.strategy, zero), cluster, model,
                                                              gpus=layout.world_size)))
            for zero in ZeroStage]


def plot_zero_stages(model, cluster, layout, path: str | Path) -> Path:
    """Write :func:`zero_stages_figure` to ``path`` (PNG); return the path."""
    path = Path(path)
    check_plot_path(path, "plot")
    fig = zero_stages_figure(model, cluster, layout)
    fig.savefig(path, dpi=120)
    return path


def zero_stages_figure(model, cluster, layout):
    """The ZeRO 0-3 stacked-bar chart of the most loaded rank, as a ``matplotlib.figure.Figure``
    (no pyplot state, no backend switch: save it or display it in a notebook)."""
    from matplotlib.figure import Figure

    sweep = zero_sweep(model, cluster, layout)
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    labels = [f"ZeRO-{int(z)}\n{r.layout.framework.value}"
              + ("" if r.layout.strategy.offload is Offload.NONE else f" +{r.layout.strategy.offload.value}")
              for z, r in sweep]
    bottoms = [0.0] * len(sweep)
    for attr, label in PARTS:
        heights = [getattr(r.worst, attr) / GB for _, r in sweep]
        ax.bar(labels, heights, bottom=bottoms, label=label)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for x, (_, r) in enumerate(sweep):
        ax.text(x, bottoms[x], f"{r.worst.total_bytes / GB:.1f}", ha="center", va="bottom", fontsize=8)
    memory = sweep[0][1].device_memory_bytes / GB
    ax.axhline(memory, color="black", linestyle="--", linewidth=1)
    ax.text(-0.4, memory, f"{sweep[0][1].device_name} {memory:.0f} GB", ha="left", va="bottom",
            fontsize=8)
    s = layout.strategy
    ax.set_title(f"{sweep[0][1].model_name}: per-rank memory, dp={layout.dp} tp={layout.tp} pp={layout.pp}, "
                 f"mbs={s.micro_batch} seq={getattr(model, 'seq_len', '-')}, {s.attention.value} attention, "
                 f"recompute={s.recompute.value}", fontsize=8)
    ax.set_ylabel("GB per GPU (most loaded rank)")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig
