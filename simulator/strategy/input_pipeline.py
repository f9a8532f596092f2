"""The input pipeline of a strategy: reading the next batch from storage, prefetched behind compute.

A record nested in :class:`~simulator.strategy.Strategy` (its ``input`` field), as the gradient
sync (:mod:`simulator.strategy.sync`) and the what-if faults (:mod:`simulator.strategy.faults`)
are. Each field is declared once (:mod:`simulator.strategy.fields`); the time a step spends
reading is :func:`simulator.compile.offload_part.data_s` (bytes per sample × global batch over
the nodes' storage bandwidth), and ``build_layout`` checks that the cluster gives that bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.checks import positive_number
from simulator.errors import SpecError
from simulator.strategy.fields import (Flag, Role, choices_of, declare, enum_parser, float_parser, int_parser, is_a,
                                       nonneg_int, opt, validate)
from simulator.strategy.kinds import DataSource

_opt_positive_number = opt(positive_number)


@dataclass(frozen=True, kw_only=True)
class InputPipeline:
    """Reading the next batch: bytes per sample from storage, prefetched behind compute."""

    bytes_per_sample: int = declare(
        0, key="bytes_per_sample", role=Role.BATCH, parse=int_parser("bytes_per_sample"), check=nonneg_int,
        doc="Bytes read from storage per training sample (0: input cost ignored)",
        flag=Flag("--bytes-per-sample", "input bytes read per sample", metavar="BYTES"))
    source: DataSource = declare(
        DataSource.LOCAL, key="data_source", role=Role.BATCH, parse=enum_parser(DataSource, "data_source"),
        check=is_a(DataSource), doc="Where training samples are read from",
        flag=Flag("--data-source", "where samples are read from", choices=choices_of(DataSource)))
    shared_storage_GBps: float | None = declare(
        None, key="shared_storage_GBps", role=Role.BATCH, parse=float_parser("shared_storage_GBps"),
        check=_opt_positive_number, doc="Aggregate read bandwidth of shared storage over all nodes, GB/s "
                                        "(data_source shared only; None: no cap)")
    prefetch_batches: int = declare(
        2, key="prefetch_batches", role=Role.BATCH, parse=int_parser("prefetch_batches"), check=nonneg_int,
        doc="Batches read ahead while computing (PyTorch DataLoader's prefetch_factor default is 2 per worker); "
            "0: each step waits for its own read")

    def __post_init__(self) -> None:
        validate(self)
        if self.shared_storage_GBps is not None and self.source is not DataSource.SHARED:
            raise SpecError("shared_storage_GBps", "is only meaningful with data_source shared")
