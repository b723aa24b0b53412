"""torch layers whose parameters the per-rank evaluator can know (`perrank.Rank`).

A hand-written ZeRO or bucketing scheme sizes its collectives from the model's parameters
(`sum(p.numel() for p in owned)`): which rank owns which parameter decides the size of its
reduce-scatter. With the parameters unknown, the sizes are unknown, and a scheme whose ranks
end up with shards of different sizes goes unseen. `nn.Linear(10, 20)` says its parameters'
shapes in its arguments, and `nn.Sequential` of such layers (and of layers without
parameters, `nn.ReLU()`) lists them in torch's order — each module's in turn, `weight` before
`bias` — so `model.parameters()` is a list of tensors of known shapes.

A layer built from anything else (a size read from a config, an `nn.Conv2d`, a module of the
project) stays as it was: unknown to the evaluator, and a `Sequential` holding one knows none
of its parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commlint.lint.perrank_model import UNK, Builtin, Tensor

# layers without parameters: the forward keeps the input's shape
NO_PARAMETERS = frozenset(
    {
        "ReLU",
        "ReLU6",
        "GELU",
        "SiLU",
        "Tanh",
        "Sigmoid",
        "LeakyReLU",
        "ELU",
        "Softplus",
        "Mish",
        "Identity",
        "Dropout",
    }
)


@dataclass
class Layer:
    """A torch layer whose parameters are known: `kind` (`Linear`, `ReLU`, `Sequential`),
    its parameters in `parameters()` order, its children (a `Sequential`'s layers), and for a
    `Linear` its output features."""

    kind: str
    params: list[Tensor] = field(default_factory=list)
    modules: list[Layer] = field(default_factory=list)
    out_features: int | None = None


def _size(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def build_layer(name: str, args: list, kwargs: dict) -> Layer | None:
    """`torch.nn.Linear(10, 20)`, `torch.nn.ReLU()`, `torch.nn.Sequential(<known layers>)`;
    None for any other call or when a size is not a literal the rank knows."""
    if not name.startswith("torch.nn."):
        return None
    last = name.rsplit(".", 1)[-1]
    if last == "Linear":
        given = [*args, *(kwargs.get(k) for k in ("in_features", "out_features")[len(args) :])]
        n_in, n_out = (_size(given[0]), _size(given[1])) if len(given) >= 2 else (None, None)
        bias = args[2] if len(args) > 2 else kwargs.get("bias", True)
        if n_in is None or n_out is None or not isinstance(bias, bool):
            return None
        params = [Tensor((n_out, n_in), "float32")]
        if bias:
            params.append(Tensor((n_out,), "float32"))
        return Layer("Linear", params, out_features=n_out)
    if last in NO_PARAMETERS:
        return Layer(last)
    if last == "Sequential" and args and not kwargs and all(isinstance(a, Layer) for a in args):
        return Layer("Sequential", [p for a in args for p in a.params], list(args))
    return None


def forward(layer: Layer, args: list) -> Tensor:
    """Calling the layer: a `Linear` changes the last dimension, the others keep the shape; a
    `Sequential` runs its layers in turn."""
    x = args[0] if args else None
    if layer.kind == "Sequential":
        for m in layer.modules:
            x = forward(m, [x])
        return x if isinstance(x, Tensor) else Tensor(None, None)
    if not isinstance(x, Tensor):
        return Tensor(None, None)
    if layer.out_features is not None:
        shape = (*x.shape[:-1], layer.out_features) if x.shape else None
        return Tensor(shape, x.dtype)
    return Tensor(x.shape, x.dtype)


def attribute(layer: Layer, attr: str) -> object:
    """`model.parameters()`, `model.named_parameters()` (names as torch gives them:
    `0.weight`), `model.zero_grad()`; anything else unknown."""
    if attr == "parameters":
        return Builtin(lambda _ev, _args, _kwargs, _e: list(layer.params))
    if attr == "named_parameters":
        return Builtin(lambda _ev, _args, _kwargs, _e: list(_named(layer)))
    if attr in ("zero_grad", "train", "eval", "requires_grad_", "to", "cuda", "cpu"):
        return Builtin(lambda _ev, _args, _kwargs, _e: layer if attr != "zero_grad" else None)
    if layer.kind == "Linear" and attr in ("weight", "bias"):
        k = ("weight", "bias").index(attr)
        return layer.params[k] if k < len(layer.params) else None
    return UNK


def _named(layer: Layer, prefix: str = "") -> list[tuple[str, Tensor]]:
    if layer.kind == "Sequential":
        return [pair for k, m in enumerate(layer.modules) for pair in _named(m, f"{prefix}{k}.")]
    return list(zip((f"{prefix}weight", f"{prefix}bias"), layer.params, strict=False))
