"""Compile (cluster, workload, strategy) into the work of one training step (:class:`simulator.work.StepWork`).

Public API: :func:`compile_step`, :class:`ParamFetch`, :class:`CostCache` (memoised cost answers,
shareable between compilations on one cluster), :func:`stage_work`,
:func:`compile_stages` (a step's stages alone). Both engines consume the result.
"""

from simulator.compile.costs import CostCache
from simulator.compile.offload_part import ParamFetch, adam_bytes_per_param
from simulator.compile.step import compile_stages, compile_step, stage_work
from simulator.compile.chunk_zero import fetch_call

__all__ = ["CostCache", "ParamFetch", "adam_bytes_per_param", "compile_stages", "compile_step", "fetch_call",
           "stage_work"]
