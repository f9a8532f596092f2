"""The order torch FSDP (FSDP1 and FSDP2) issues a micro-batch's backward all-gathers and reduce-scatters in.

Both share one process group for the parameter all-gathers and the gradient reduce-scatters, and
ProcessGroupNCCL runs every collective of a group on that group's one internal stream, in the order the host
issued them (``ProcessGroupNCCL::collective``: the op waits for the caller's stream, then runs on
``ncclStreams_[device]``) [src: torch-pg-nccl-stream]. What that stream sees in a backward is therefore the
issue order of the hooks:

- FSDP2 (``fully_shard``): the pre-backward of module k unshards k (already prefetched) and prefetches the
  next module's all-gather; its post-backward reduce-scatters k's gradients [src: torch-fsdp-backward-order].
- FSDP1 (``FullyShardedDataParallel``, Composer's default ``backward_prefetch='BACKWARD_POST'``): the
  post-backward hook of module k reshards k and prefetches the next module's all-gather
  (``_post_backward_reshard`` → ``_prefetch_handle``), then reduce-scatters k's gradients on the
  post-backward stream (``_post_backward_hook``) [src: torch-fsdp-backward-order, composer-fsdp-defaults].

Either way the stream runs, with G the gathers in backward order (the first needed first) and R the
reduce-scatters in backward order (the root module's last)::

    G0, G1, G2, R0, G3, R1, …, G(n−1), R(n−3), R(n−2), R(n−1)

i.e. each reduce-scatter after the all-gather prefetched while its module ran, not all gathers before all
reduce-scatters. The engines play the calls in this order on the chunk's ZeRO stream
(:func:`simulator.analytical.exposed_gathers`): a block's gather and the previous block's reduce-scatter
share the block's compute, as on the device.
"""

from __future__ import annotations

from simulator.strategy import Framework, Offload
from simulator.work import CommCall


def backward_issue_order(gathers: tuple[CommCall, ...], reduce_scatters: tuple[CommCall, ...]) -> tuple[CommCall, ...]:
    """``gathers`` and ``reduce_scatters`` (each in backward order) in the order torch FSDP issues them on its one
    stream (module docstring): the first two gathers, then each further gather followed by the reduce-scatter two
    modules behind it, then the reduce-scatters left. Hand-worked: G = (g0, g1, g2, g3), R = (r0, r1, r2, r3) →
    (g0, g1, g2, r0, g3, r1, r2, r3)."""
    head, rest = gathers[:2], gathers[2:]
    n = min(len(rest), len(reduce_scatters))
    paired = tuple(c for pair in zip(rest[:n], reduce_scatters[:n]) for c in pair)
    return head + paired + rest[n:] + reduce_scatters[n:]


def applies(layout, offload) -> bool:
    """Whether a chunk's ZeRO-3 backward stream is torch FSDP's interleaved order: FSDP2 (and FSDP1, modelled on
    it with ``fsdp1_flat_params``) gathering on-device parameters, one call per module (expert-parallel layouts
    interleave their two groups' calls apart, :func:`simulator.compile.ep_part.interleave`, and keep their order)."""
    return layout.framework is Framework.FSDP2 and offload is Offload.NONE and layout.ep == 1


def backward_stream(layout, gathers: tuple[CommCall, ...],
                    reduce_scatters: tuple[CommCall, ...]) -> tuple[CommCall, ...]:
    """A chunk's backward ZeRO stream: :func:`backward_issue_order` where :func:`applies`, else the gathers followed
    by the reduce-scatters."""
    if applies(layout, layout.strategy.offload):
        return backward_issue_order(gathers, reduce_scatters)
    return gathers + reduce_scatters
