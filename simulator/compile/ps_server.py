"""The parameter server's update of its shard, on the pushing worker's critical path.

A server of ``executor/strategies/param_server.py`` runs ``AdamW.step`` on one flat tensor, its shard of
``params / shards`` parameters, once per push it applies (async) or once per step after the dp pushes
(sync); the worker that pushed waits for it before its pull returns. Charged as that worker's
``optimizer_s`` (it replaces the update the worker does not run), by the same rule as a data-parallel
rank's own step (:func:`simulator.host_overhead.optimizer_stream`): the memory-bound update,
``shard · adam_bytes_per_param / achievable HBM bandwidth`` (:func:`simulator.compile.offload_part.gpu_optimizer_s`),
plus :func:`simulator.host_overhead.optimizer_calls` host calls for **one** tensor at ``op_call_overhead_us``
each, times the core share. Until branch var16 (2026-11-25) it was 0 (BytePS §4's servers update while
the network runs; here the worker waits for it).

Measured for comparison (``benchmarks/ps_host_parts.py``, [src: own-ps-host-parts-2026-11-25]): the
tiny suite model's 30,080-parameter shard, ``grad.clone()`` + ``AdamW.step``, 63-67 us median per
update on the 2-core VM; the same run's other host parts are listed there and stay unmodelled.
"""

from __future__ import annotations

from simulator import host_overhead
from simulator.cluster.spec import Cluster
from simulator.compile import offload_part
from simulator.strategy import Strategy


def server_update_s(cluster: Cluster, dtype, strategy: Strategy, params: float, share: float) -> float:
    """Seconds of one server's AdamW step on its shard of ``params`` parameters (module docstring)."""
    shard = params / strategy.dp_sync.shards
    impl = offload_part.optimizer_impl(strategy, cluster.device)
    device_s = offload_part.gpu_optimizer_s(cluster, dtype, shard, impl)
    return host_overhead.optimizer_stream(cluster.device, device_s, 1, share, impl=impl).time_s
