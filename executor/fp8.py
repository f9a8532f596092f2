"""FP8 training on a GPU through torchao's float8 (``torchao.float8.convert_to_float8_training``).

A plan with ``precision fp8`` runs the linear layers the simulator counts in FP8
(:data:`simulator.workload.fp8.FP8_OPS`: Q/K/V, the attention output projection, the MLP's up and down
projections of every block) as torchao ``Float8Linear`` modules, as torchtitan's float8 converter does
[src: torchao-float8, torchao-float8-rowwise]; the embedding, norms, attention core and the output layer
(``head``, torchtitan's ``filter_fqns=["output"]``) stay in bf16, as the simulator has them. The swap happens
on the fp32 model, before DDP or FSDP2 wraps it (:mod:`executor.strategies.data_parallel`); the forward still
runs under the plan's bf16 rule (autocast over fp32 parameters, or FSDP2's bf16 parameters), which
``Float8Linear`` follows for its output.

Plan recipe → torchao recipe (:func:`torchao_recipe`): ``torchao`` (tensorwise dynamic scaling) →
``Float8LinearConfig.from_recipe_name("tensorwise")``, ``torchao-rowwise`` → ``"rowwise"``;
``--fp8-all-gather`` (tensorwise only: the plan refuses it otherwise) sets ``enable_fsdp_float8_all_gather``.
Transformer Engine's recipes (``te``, ``te-current``, ``te-blockwise``, ``te-mxfp8``) are refused: this
executor has no Transformer Engine modules.

What is refused, one line each, before anything launches (:func:`check_fp8_run`, :func:`check_fp8_device`):
a Transformer Engine recipe; tp or pp > 1 or a parameter server (torchao's float8 tensor-parallel styles are
not wired here); ``--precision fp32`` (the recipes run the rest in bf16); a linear whose dimensions are not
multiples of 16 (FP8 GEMMs need them, ``torch._scaled_mm``; torchao's own auto-filter skips such layers,
which would run a model other than the one simulated); gloo (CPU); a GPU older than SM 8.9; torchao missing.

torchao is an optional dependency (``pip install 'trainplan[fp8]'``, or its wheel with ``--no-deps`` so the
machine's CUDA torch stays): it is imported only here, only when an FP8 plan runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from executor.strategies.base import Backend, Precision
from simulator.errors import SpecError
from simulator.workload.fp8 import Fp8Recipe, MatmulPrecision
from simulator.workload.ops import OpKind
from simulator.workload.transformer import ActivationKind

__all__ = ["FP8_DIM_MULTIPLE", "FP8_MODULES", "Fp8Linear", "MIN_COMPUTE_CAPABILITY", "apply_fp8", "check_fp8_cuda",
           "check_fp8_device", "check_fp8_run", "fp8_linears", "load_float8", "torchao_recipe"]

FP8_DIM_MULTIPLE = 16
"""Both dimensions of an FP8 GEMM's weight must be multiples of this (``torch._scaled_mm``; torchao's
``_auto_filter_for_tensorwise`` skips other layers for this reason) [src: torchao-float8-rowwise]."""

MIN_COMPUTE_CAPABILITY = (8, 9)
"""FP8 tensor cores: Ada (SM 8.9), Hopper (9.0), Blackwell (10.0) (``Fp8Recipe.min_compute_capability``)."""

FP8_MODULES: dict[OpKind, tuple[str, ...]] = {OpKind.QKV: ("attn.qkv",), OpKind.OUT_PROJ: ("attn.out",),
                                              OpKind.MLP: ("mlp.up", "mlp.down")}
"""The modules of a block of ``executor.model.GPT`` that make up each of the simulator's FP8 operations."""

_TORCHAO_RECIPES = {Fp8Recipe.TORCHAO: "tensorwise", Fp8Recipe.TORCHAO_ROWWISE: "rowwise"}
"""Plan recipe → ``torchao.float8.Float8LinearRecipeName`` value."""

INSTALL_FIX = ("install it: pip install 'trainplan[fp8]', or on a machine without a registry "
               "pip install --no-index --no-deps --target DIR torchao-*.whl and put DIR on PYTHONPATH")
"""How to get torchao (``--no-deps``: its wheel names no torch version, and the machine's CUDA torch must stay)."""


@dataclass(frozen=True)
class Fp8Linear:
    """One linear layer the executor converts: its module name in ``executor.model.GPT`` and weight shape."""

    name: str
    in_features: int
    out_features: int

    @property
    def aligned(self) -> bool:
        """Whether an FP8 GEMM can take this weight (:data:`FP8_DIM_MULTIPLE`)."""
        return self.in_features % FP8_DIM_MULTIPLE == 0 and self.out_features % FP8_DIM_MULTIPLE == 0


def torchao_recipe(recipe: Fp8Recipe | None) -> str:
    """torchao's recipe name for the plan's ``fp8_recipe``; SpecError for a recipe torchao does not implement."""
    if recipe in _TORCHAO_RECIPES:
        return _TORCHAO_RECIPES[recipe]
    name = recipe.value if recipe is not None else "none"
    raise SpecError("plan.strategy.fp8_recipe", f"{name}: this executor runs FP8 through torchao float8 only "
                    "(tensorwise or rowwise scaling), not Transformer Engine; plan with --fp8-recipe torchao or "
                    "torchao-rowwise, or simulate the plan")


def fp8_linears(spec) -> tuple[Fp8Linear, ...]:
    """The linear layers of ``executor.model.GPT(spec)`` that run in FP8 (:data:`FP8_MODULES`), in model order
    (a mixture-of-experts block's experts are not ``nn.Linear`` here: the simulator refuses torchao for them)."""
    width = (2 if spec.activation is ActivationKind.SWIGLU else 1) * spec.ffn_size
    shapes = {"attn.qkv": (spec.hidden, spec.q_dim + 2 * spec.kv_dim), "attn.out": (spec.q_dim, spec.hidden),
              "mlp.up": (spec.hidden, width), "mlp.down": (spec.ffn_size, spec.hidden)}
    out = []
    for i in range(spec.layers):
        for names in FP8_MODULES.values():
            for name in names:
                if name.startswith("mlp.") and spec.is_moe_layer(i):
                    continue
                out.append(Fp8Linear(f"layers.{i}.{name}", *shapes[name]))
    return tuple(out)


def check_fp8_run(plan, backend: Backend, precision: Precision) -> None:
    """Refuse, in one line, an FP8 plan this executor cannot run (module docstring); a no-op for other plans.
    ``precision``: what the forward runs in (``--precision`` resolved for the plan's model)."""
    from simulator.strategy import ParamServerSync

    strategy = plan.strategy
    if strategy.precision is not MatmulPrecision.FP8:
        return
    torchao_recipe(strategy.resolved_fp8_recipe)
    layout = plan.layout()
    if layout.tp > 1 or layout.pp > 1 or isinstance(strategy.dp_sync, ParamServerSync):
        raise SpecError("plan.strategy.precision", f"fp8: this executor runs FP8 with tp = pp = 1 and an all-reduce "
                        f"only (got tp={layout.tp} pp={layout.pp}, {strategy.dp_sync.kind.value}); simulate the "
                        "plan, or execute it with precision model")
    if precision is Precision.FP32:
        raise SpecError("--precision", "fp32 with an FP8 plan: the FP8 recipes run the rest of the model in bf16; "
                        "use --precision auto or bf16")
    bad = next((lin for lin in fp8_linears(plan.model) if not lin.aligned), None)
    if bad is not None:
        raise SpecError("model", f"{bad.name} is {bad.in_features}→{bad.out_features}: FP8 GEMMs need both "
                        f"dimensions multiples of {FP8_DIM_MULTIPLE}; use --scale tiny or as-planned, or precision "
                        "model")
    if backend is not Backend.NCCL:
        raise SpecError("--backend", "gloo runs on CPU: FP8 needs a CUDA device with FP8 tensor cores (sm_89+); "
                        "execute with --backend nccl on an H100/H200/B200, or simulate the plan")


def check_fp8_device(capability: tuple[int, int], device_name: str) -> None:
    """Refuse a GPU without FP8 tensor cores (``torch.cuda.get_device_capability``, :data:`MIN_COMPUTE_CAPABILITY`)."""
    if tuple(capability) < MIN_COMPUTE_CAPABILITY:
        raise SpecError("--backend", f"{device_name} is sm_{capability[0]}{capability[1]}: FP8 needs a CUDA device "
                        "with FP8 tensor cores (sm_89+: L40S, H100, H200, B200); simulate the plan, or execute it "
                        "with precision model")


def check_fp8_cuda(plan) -> None:
    """On a CUDA machine, for an FP8 plan: the visible GPU has FP8 tensor cores and torchao imports (a no-op for
    other plans)."""
    if plan.strategy.precision is not MatmulPrecision.FP8:
        return
    import torch

    check_fp8_device(torch.cuda.get_device_capability(0), torch.cuda.get_device_name(0))
    load_float8()


def load_float8():
    """The ``torchao.float8`` module; SpecError naming the fix when torchao is not installed."""
    try:
        import torchao.float8 as float8
    except ImportError as err:
        raise SpecError("torchao", f"not importable ({err}); FP8 plans run through torchao float8: "
                        f"{INSTALL_FIX}") from None
    return float8


def apply_fp8(model, strategy, spec) -> str:
    """Swap ``model``'s :func:`fp8_linears` for torchao ``Float8Linear`` modules (in place, before DDP/FSDP2
    wraps it) by the plan's recipe; returns the results file's component line."""
    float8 = load_float8()
    recipe = torchao_recipe(strategy.resolved_fp8_recipe)
    config = replace(float8.Float8LinearConfig.from_recipe_name(recipe),
                     enable_fsdp_float8_all_gather=strategy.fp8_all_gather)
    names = {lin.name for lin in fp8_linears(spec)}
    float8.convert_to_float8_training(model, config=config, module_filter_fn=lambda _m, fqn: fqn in names)
    from torchao.float8.float8_linear import Float8Linear

    converted = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
    if converted != names:
        raise RuntimeError(f"torchao converted {sorted(converted ^ names)[:3]}... other than the plan's FP8 layers")
    import torchao

    return (f"torchao {torchao.__version__} Float8Linear, {recipe} scaling"
            + (", FSDP2 float8 all-gather" if strategy.fp8_all_gather else "")
            + f", on {len(names)} linear layers (attn.qkv, attn.out, mlp.up, mlp.down of every block); "
            "embedding, norms, attention core and output layer in bf16")
