"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) on executor/model.py's GPT with DTensor.

Each block's first projections are split by output rows (``ColwiseParallel``: ``qkv`` and
``mlp.up``), the second by input columns (``RowwiseParallel``: ``attn.out`` and ``mlp.down``), so a
block costs one all-reduce forward and one backward per sub-layer [src: torch-dtensor-tp].

The model fuses Q, K and V into one ``qkv`` matrix (rows: all query heads, then all key heads,
then all value heads) and SwiGLU's gate and up into one ``up`` matrix (rows: gate, then up). A
plain row split of a fused matrix would give tp rank 0 all of the query rows and no key rows.
:func:`permute_fused_rows` therefore reorders those rows once, before sharding, so that the r-th
contiguous block holds rank r's own query, key and value heads (or its gate and up halves):
``[q_0 k_0 v_0 | q_1 k_1 v_1 | ...]``. The computation is the unsplit model's, exactly; only the
row order of the stored (global) ``qkv`` and ``up`` weights differs from the single-process model.
Parameter names and shapes stay those of :mod:`simulator.memory.shapes`.

Sequence parallelism (Korthikanti et al. 2022): the norms run on a sequence shard
(``SequenceParallel``), the column-parallel input is all-gathered along the sequence and the
row-parallel output reduce-scattered along it; the final norm's output stays replicated (each tp
rank computes the same loss).

Vocabulary parallelism, as Megatron-LM runs it (:func:`shard_vocab`): the token embedding is split
by vocabulary rows (``VocabParallelEmbedding``: each rank looks up its own rows, zero elsewhere, and
an all-reduce sums the partial outputs; torch's ``RowwiseParallel`` on an ``nn.Embedding`` does the
same), and so is the output layer (``ColumnParallelLinear``), tied or not [src: megatron-vocab-parallel].
The logits' vocabulary slices are all-gathered before the ordinary cross-entropy
(:func:`executor.model.project_logits`), not fed to ``loss_parallel``: the executor calls backward
outside the forward (and the pipeline schedule calls the loss itself), where ``loss_parallel``'s
context would have to stay open. The learned position table stays replicated, as in Megatron
(a plain ``torch.nn.Embedding`` there).
"""

from __future__ import annotations

import torch
from torch import nn

from executor.model import GPT
from simulator.errors import SpecError


def check_tp(model: GPT, tp: int) -> None:
    """Raise SpecError unless ``tp`` splits whole heads, the MLP width and the vocabulary evenly."""
    spec = model.spec
    for name, count in (("attention heads", spec.heads), ("key/value heads", spec.n_kv_heads),
                        ("MLP width", spec.ffn_size), ("vocabulary", spec.vocab)):
        if count % tp:
            raise SpecError("tp", f"{tp} does not divide the model's {count} {name}")


def _blocks(rows: list[torch.Tensor], tp: int) -> torch.Tensor:
    """Interleave tp-way splits of each piece: [p0_0, p1_0, ..., p0_1, p1_1, ...]."""
    parts = [piece.chunk(tp, dim=0) for piece in rows]
    return torch.cat([part[r] for r in range(tp) for part in parts], dim=0)


@torch.no_grad()
def permute_fused_rows(model: GPT, tp: int) -> None:
    """Reorder the fused ``qkv`` and SwiGLU ``up`` rows so a contiguous tp split is per head / half."""
    spec = model.spec
    for block in model.layers:
        qkv = block.attn.qkv
        sizes = (spec.q_dim, spec.kv_dim, spec.kv_dim)
        qkv.weight.copy_(_blocks(list(qkv.weight.split(sizes)), tp))
        if qkv.bias is not None:
            qkv.bias.copy_(_blocks(list(qkv.bias.split(sizes)), tp))
        if getattr(block, "mlp", None) is not None and block.mlp.swiglu:  # a MoE block: executor.moe_tp
            up = block.mlp.up
            up.weight.copy_(_blocks(list(up.weight.chunk(2)), tp))
            if up.bias is not None:
                up.bias.copy_(_blocks(list(up.bias.chunk(2)), tp))


def block_plan(sequence_parallel: bool, moe: bool = False) -> dict:
    """The ``parallelize_module`` plan of one block (names relative to the block); a MoE block's plan has
    no MLP entries (:func:`executor.moe_tp.parallelize_moe` splits its experts)."""
    plan = _dense_block_plan(sequence_parallel)
    return {k: v for k, v in plan.items() if not k.startswith("mlp")} if moe else plan


def _dense_block_plan(sequence_parallel: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    if not sequence_parallel:
        return {"attn.qkv": ColwiseParallel(), "attn.out": RowwiseParallel(),
                "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {"norm1": SequenceParallel(), "attn": gather, "attn.qkv": ColwiseParallel(),
            "attn.out": RowwiseParallel(output_layouts=Shard(1)),
            "norm2": SequenceParallel(), "mlp": gather, "mlp.up": ColwiseParallel(),
            "mlp.down": RowwiseParallel(output_layouts=Shard(1))}


def parallelize_blocks(blocks: nn.ModuleList, spec, tp_mesh, sequence_parallel: bool) -> None:
    """Apply :func:`block_plan` to each block and give its attention its share of the heads.

    With sequence parallelism the first block takes the full (replicated) hidden states and keeps
    its sequence shard; the caller gathers the last block's output (:func:`sp_gather_output`).
    """
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, parallelize_module

    from executor.moe_tp import check_moe_tp, parallelize_moe

    tp = tp_mesh.size()
    for i, block in enumerate(blocks):
        moe = getattr(block, "moe", None)
        parallelize_module(block, tp_mesh, block_plan(sequence_parallel, moe=moe is not None))
        if moe is not None:
            check_moe_tp(spec, tp)
            parallelize_moe(moe, tp_mesh, sequence_parallel)
        block.attn.heads, block.attn.kv_heads = spec.heads // tp, spec.n_kv_heads // tp
        if sequence_parallel and i == 0:
            parallelize_module(block, tp_mesh, PrepareModuleInput(input_layouts=(Replicate(),),
                                                                  desired_input_layouts=(Shard(1),),
                                                                  use_local_output=True))


def sp_gather_output(module: nn.Module, tp_mesh) -> None:
    """The last block's sequence shards, gathered into the full sequence (a no-op without SP)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleOutput, parallelize_module

    parallelize_module(module, tp_mesh, PrepareModuleOutput(output_layouts=(Shard(1),),
                                                            desired_output_layouts=(Replicate(),)))


def shard_vocab(module: nn.Module, tp_mesh) -> None:
    """Split ``module``'s token embedding (if it has one) and output layer (``head.weight``, or a
    pipeline stage's ``tied_head``) over ``tp_mesh`` by vocabulary rows: ``V / tp`` rows per rank.
    A tied output layer on the embedding's own module is the embedding's (now sharded) weight; a
    pipeline stage's ``tied_head`` is the last stage's copy (``executor.strategies.pipeline.Stage``)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

    embed = getattr(module, "embed", None)
    if embed is not None:
        parallelize_module(embed.tok, tp_mesh, RowwiseParallel(input_layouts=Replicate()))
        # torch's sharded embedding backward returns a full (V, h) Replicate gradient; keep this
        # rank's rows only (a local slice, no communication), as Megatron's grad holds V/tp rows
        embed.tok.weight.register_hook(lambda grad: grad.redistribute(grad.device_mesh, [Shard(0)]))
    for owner, name in ((getattr(module, "head", None), "weight"), (module, "tied_head")):
        weight = getattr(owner, name, None) if owner is not None else None
        if isinstance(weight, nn.Parameter) and not isinstance(weight, DTensor):
            setattr(owner, name, nn.Parameter(distribute_tensor(weight.detach(), tp_mesh, [Shard(0)])))


def parallelize_gpt(model: GPT, tp_mesh, sequence_parallel: bool) -> GPT:
    """Tensor-parallel ``model`` in place over ``tp_mesh`` (a 1-D DeviceMesh); returns it."""
    tp = tp_mesh.size()
    check_tp(model, tp)
    permute_fused_rows(model, tp)
    shard_vocab(model, tp_mesh)
    parallelize_blocks(model.layers, model.spec, tp_mesh, sequence_parallel)
    if sequence_parallel:
        sp_gather_output(model.layers[-1], tp_mesh)
    return model
