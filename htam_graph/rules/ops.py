"""The typed op graph the recipes read, and the signatures that map torch.fx calls onto it.

Values are references to tensors (`Ref`), literal constants (`Const`) or scalars read from a module attribute
at run time (`AttrScalar`, e.g. `self.divisor` or `self.leaky_relu.negative_slope`), so generated code reads
the attribute instead of baking its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True)
class Ref:
    """A tensor: a forward input, a parameter/buffer (by attribute path) or an op node (by fx name)."""

    name: str


@dataclass(frozen=True)
class Const:
    """A literal the forward baked in (number, bool, string, None or a tuple of those)."""

    value: object


@dataclass(frozen=True)
class AttrScalar:
    (
        """A number read from a module attribute (`path` is relative to the model: `divisor`, """
        """`act.negative_slope`)."""
    )

    path: str
    value: float | int


Value = Ref | Const | AttrScalar


def number(value: Value) -> float | int | None:
    """The numeric value of a Const/AttrScalar (None for tensors, strings and None)."""
    if isinstance(value, AttrScalar):
        return value.value
    if (
        isinstance(value, Const)
        and isinstance(value.value, int | float)
        and not isinstance(value.value, bool)
    ):
        return value.value
    return None


class OpKind(StrEnum):
    """What a recipe can do with a node."""

    ELEMENTWISE = "elementwise"
    LIBRARY = "library"  # conv*, conv_transpose*, linear, matmul/mm/bmm: kept as the library call
    SOFTMAX = "softmax"  # softmax / log_softmax (dim: an int, or adjacent dims folded from a flattening view)
    REDUCTION = (
        "reduction"  # sum / mean / prod / amax / amin / argmax / argmin / logsumexp over explicit dims
    )
    NORM = "norm"  # nn.LayerNorm / GroupNorm / InstanceNorm*d / BatchNorm*d / RMSNorm and their F.* forms
    POOL = "pool"  # max_pool{1,2,3}d / avg_pool{1,2,3}d (window parameters in params)
    LAYOUT = "layout"  # views (unsqueeze, reshape, permute, slicing, ...) and diag: no arithmetic
    IDENTITY = "identity"  # clone / detach / contiguous: the same values (algebraic_rewrite.drop_noops)
    RANDOM = "random"  # nn.Dropout: the identity only in eval mode or with p = 0 (never assumed statically)
    TOTAL = "total"  # sum / mean over every element (no dim): a 0-d result
    LOSS = "loss"  # F.mse_loss / l1_loss / smooth_l1_loss / huber_loss / kl_div / cross_entropy (+ reduction)
    SCAN = "scan"  # cumsum / cumprod along one dim
    # size() and int arithmetic on it, narrow, select, zeros_like, cat: index bookkeeping that only a recipe
    # proving the whole pattern (e.g. an exclusive scan written as cat + narrow) may use
    STRUCTURAL = "structural"
    # a torch / torch.nn.functional function or tensor method the rules do not know (einsum, flip, pad, ...),
    # called as the reference called it; only recipes that keep calls (the composed path) accept it
    CALL = "call"


@dataclass(frozen=True)
class TensorInfo:
    """A tensor leaf of the graph: a forward input or a parameter/buffer of the model."""

    name: str  # the graph name (input name, or the attribute path for parameters)
    kind: str  # "input" | "param" | "buffer"
    shape: tuple[int, ...]
    dtype: str  # e.g. "torch.float32"
    index: int = -1  # position in forward's arguments (inputs only)


@dataclass(frozen=True)
class OpNode:
    """One call of the forward, normalised to a canonical op name with bound operands and parameters."""

    name: str
    kind: OpKind
    op: str
    operands: tuple[Value, ...]
    params: tuple[tuple[str, Value], ...] = ()
    shape: tuple[int, ...] = ()
    dtype: str = ""
    module_path: str | None = None  # set when the call was a submodule (`self.conv(x)`)
    origin: str = ""  # what the forward wrote, for comments (e.g. "nn.LeakyReLU leaky_relu")

    def param(self, name: str) -> Value:
        for key, value in self.params:
            if key == name:
                return value
        raise KeyError(f"{self.op} has no parameter {name!r}")


@dataclass(frozen=True)
class OpGraph:
    """The analysed forward: leaves, calls in execution order, and the returned value."""

    inputs: tuple[TensorInfo, ...]
    attrs: tuple[TensorInfo, ...]
    nodes: tuple[OpNode, ...]
    output: Ref
    scalar_attrs: tuple[tuple[str, float | int], ...] = field(default=())  # root numeric attributes
    # True when shape introspection in the forward (`len(w.shape)`, `x.size(0)`) was answered with the
    # analysed sizes, so constants derived from them hold for those sizes only (rules/analysis/trace.py)
    shape_specialised: bool = False

    def tensor(self, name: str) -> TensorInfo | None:
        for info in (*self.inputs, *self.attrs):
            if info.name == name:
                return info
        return None

    def node(self, name: str) -> OpNode | None:
        for node in self.nodes:
            if node.name == name:
                return node
        return None

    def shape_of(self, name: str) -> tuple[int, ...]:
        info = self.tensor(name)
        if info is not None:
            return info.shape
        node = self.node(name)
        if node is None:
            raise KeyError(name)
        return node.shape

    def is_per_channel(self, name: str, rank: int) -> bool:
        """A `(C, 1, 1)`-like operand: right-aligned against a rank-`rank` output, only its channel dim is
        not 1."""
        shape = self.shape_of(name)
        padded = (1,) * (rank - len(shape)) + shape
        return len(padded) == rank and [d for d, size in enumerate(padded) if size != 1] == [1]

    def users(self, name: str) -> list[OpNode]:
        return [n for n in self.nodes if any(isinstance(v, Ref) and v.name == name for v in _values(n))]

    def describe(self) -> str:
        """A one-line-per-node text form (for logs and error messages)."""
        lines = [f"input {i.name}{list(i.shape)}" for i in self.inputs]
        lines += [f"{i.kind} {i.name}{list(i.shape)}" for i in self.attrs]
        lines += [
            f"{n.name} = {n.op}({', '.join(map(_show, n.operands))}) {list(n.shape)}" for n in self.nodes
        ]
        lines.append(f"return {self.output.name}")
        return "\n".join(lines)


def _values(node: OpNode) -> tuple[Value, ...]:
    return (*node.operands, *(v for _, v in node.params))


def _show(value: Value) -> str:
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, AttrScalar):
        return f"self.{value.path}={value.value}"
    return repr(value.value)


# ------------------------------------------------------------------------------------------- signatures
@dataclass(frozen=True)
class Signature:
    """How to bind one call's args/kwargs: operand slots, scalar parameters with defaults, fixed values."""

    op: str
    kind: OpKind
    operands: tuple[str, ...]
    params: tuple[tuple[str, object], ...] = ()
    fixed: tuple[tuple[str, object], ...] = ()  # parameters that must keep this value (alpha=1, dtype=None)
    optional_operands: int = 0  # trailing operand slots that may be omitted (bias=None)


_EW = OpKind.ELEMENTWISE
_UNARY = (
    "neg abs exp log log1p sqrt rsqrt sigmoid logsigmoid tanh relu relu6 hardswish hardsigmoid mish selu "
    "softsign silu erf square"
).split()
_BINARY = "mul maximum minimum max min gt lt ge le eq ne".split()
_REDUCE_PARAMS = (("dim", None), ("keepdim", False))
# Norm modules: canonical op -> the module attributes read as parameters (with their defaults).
NORM_MODULE_PARAMS: dict[str, tuple[tuple[str, object], ...]] = {
    "nn_layer_norm": (("normalized_shape", None), ("eps", 1e-5), ("elementwise_affine", True)),
    "nn_group_norm": (("num_groups", None), ("eps", 1e-5), ("affine", True)),
    "nn_instance_norm": (("eps", 1e-5), ("affine", False), ("track_running_stats", False)),
    # batch norm: statistics over (batch, spatial) per channel in training mode, running statistics in eval
    "nn_batch_norm": (("eps", 1e-5), ("momentum", 0.1), ("affine", True), ("track_running_stats", True)),
    # RMS norm over the trailing normalized_shape; eps None means torch.finfo(input dtype).eps
    "nn_rms_norm": (("normalized_shape", None), ("eps", None), ("elementwise_affine", True)),
}
_CONV_PARAMS = (("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1))
_MAX_POOL_PARAMS = (
    ("kernel_size", None),
    ("stride", None),
    ("padding", 0),
    ("dilation", 1),
    ("ceil_mode", False),
    ("return_indices", False),
)
_AVG_POOL_PARAMS = (
    ("kernel_size", None),
    ("stride", None),
    ("padding", 0),
    ("ceil_mode", False),
    ("count_include_pad", True),
    ("divisor_override", None),
)
_CONVT_PARAMS = (("stride", 1), ("padding", 0), ("output_padding", 0), ("groups", 1), ("dilation", 1))


def _signatures() -> dict[str, Signature]:
    table: dict[str, Signature] = {name: Signature(name, _EW, ("input",)) for name in _UNARY}
    table.update({name: Signature(name, _EW, ("input", "other")) for name in _BINARY})
    table.update(
        {
            "add": Signature("add", _EW, ("input", "other"), fixed=(("alpha", 1),)),
            "sub": Signature("sub", _EW, ("input", "other"), fixed=(("alpha", 1),)),
            "truediv": Signature("truediv", _EW, ("input", "other"), fixed=(("rounding_mode", None),)),
            "pow": Signature("pow", _EW, ("input", "exponent")),
            "where": Signature("where", _EW, ("condition", "input", "other")),
            "clamp": Signature("clamp", _EW, ("input",), (("min", None), ("max", None))),
            "clamp_min": Signature("clamp", _EW, ("input",), (("min", None),)),
            "clamp_max": Signature("clamp", _EW, ("input",), (("max", None),)),
            "leaky_relu": Signature("leaky_relu", _EW, ("input",), (("negative_slope", 0.01),)),
            "hardtanh": Signature("hardtanh", _EW, ("input",), (("min_val", -1.0), ("max_val", 1.0))),
            "gelu": Signature("gelu", _EW, ("input",), (("approximate", "none"),)),
            "softplus": Signature("softplus", _EW, ("input",), (("beta", 1.0), ("threshold", 20.0))),
            "elu": Signature("elu", _EW, ("input",), (("alpha", 1.0),)),
            "softmax": Signature("softmax", OpKind.SOFTMAX, ("input",), (("dim", None),), (("dtype", None),)),
            "log_softmax": Signature(
                "log_softmax", OpKind.SOFTMAX, ("input",), (("dim", None),), (("dtype", None),)
            ),
            "linear": Signature("linear", OpKind.LIBRARY, ("input", "weight", "bias"), optional_operands=1),
            "matmul": Signature("matmul", OpKind.LIBRARY, ("input", "other")),
            "mm": Signature("mm", OpKind.LIBRARY, ("input", "other")),
            "bmm": Signature("bmm", OpKind.LIBRARY, ("input", "other")),
            # input + mat1 @ mat2 (beta = alpha = 1): the product and its bias in one cuBLAS call, kept as is
            "addmm": Signature(
                "addmm", OpKind.LIBRARY, ("input", "mat1", "mat2"), fixed=(("beta", 1), ("alpha", 1))
            ),
            "unsqueeze": Signature("unsqueeze", OpKind.LAYOUT, ("input",), (("dim", None),)),
            # a contiguous tensor's dims start_dim..end_dim merged into one: a view, kept as torch.flatten
            "flatten": Signature("flatten", OpKind.LAYOUT, ("input",), (("start_dim", 0), ("end_dim", -1))),
            # two dims swapped: a strided view, kept as torch.transpose (the next kernel reads it contiguous)
            "transpose": Signature("transpose", OpKind.LAYOUT, ("input",), (("dim0", None), ("dim1", None))),
            "diag": Signature("diag", OpKind.LAYOUT, ("input",), (("diagonal", 0),)),
            # views that move no data on a contiguous tensor: squeeze(dim) / the 2-d transpose `.T` / `.t()`
            "squeeze": Signature("squeeze", OpKind.LAYOUT, ("input",), (("dim", None),)),
            "t": Signature("t", OpKind.LAYOUT, ("input",)),
            **{
                name: Signature(name, OpKind.IDENTITY, ("input",))
                for name in ("clone", "detach", "contiguous")
            },
        }
    )
    # Reductions: `dim` must be explicit (checked in analysis); dtype must stay the input's.
    for name in ("sum", "mean"):
        table[name] = Signature(name, OpKind.REDUCTION, ("input",), _REDUCE_PARAMS, (("dtype", None),))
    for name in ("prod", "amax", "amin", "argmax", "argmin", "logsumexp"):
        table[name] = Signature(name, OpKind.REDUCTION, ("input",), _REDUCE_PARAMS)
    # var / std (positional order of the `unbiased` overload; `correction` by keyword) and the vector norms of
    # torch.norm / Tensor.norm (p: "fro", 1, 2, inf). Without a dim they reduce every element.
    for name in ("var", "std"):
        moments = (("dim", None), ("unbiased", True), ("keepdim", False), ("correction", None))
        table[name] = Signature(name, OpKind.REDUCTION, ("input",), moments)
    table["norm"] = Signature(
        "norm",
        OpKind.REDUCTION,
        ("input",),
        (("p", "fro"), ("dim", None), ("keepdim", False)),
        (("dtype", None), ("out", None)),
    )
    table.update(_loss_scan_structural_signatures())
    # Norm modules only (named so that no torch function binds to them): weight, bias, then module attributes.
    table["dropout"] = Signature("dropout", OpKind.RANDOM, ("input",), (("p", 0.5),))
    for name, attrs in NORM_MODULE_PARAMS.items():
        table[name] = Signature(name, OpKind.NORM, ("input", "weight", "bias"), attrs, optional_operands=2)
    for dims in (1, 2, 3):
        table[f"conv{dims}d"] = Signature(
            f"conv{dims}d", OpKind.LIBRARY, ("input", "weight", "bias"), _CONV_PARAMS, optional_operands=1
        )
        table[f"conv_transpose{dims}d"] = Signature(
            f"conv_transpose{dims}d",
            OpKind.LIBRARY,
            ("input", "weight", "bias"),
            _CONVT_PARAMS,
            optional_operands=1,
        )
    for dims in (1, 2, 3):  # parameter order as in torch.nn.functional, names as the nn.*Pool attributes
        table[f"max_pool{dims}d"] = Signature(f"max_pool{dims}d", OpKind.POOL, ("input",), _MAX_POOL_PARAMS)
        avg_params = _AVG_POOL_PARAMS if dims > 1 else _AVG_POOL_PARAMS[:-1]
        table[f"avg_pool{dims}d"] = Signature(f"avg_pool{dims}d", OpKind.POOL, ("input",), avg_params)
    aliases = {
        "div": "truediv",
        "divide": "truediv",
        "true_divide": "truediv",
        "multiply": "mul",
        "subtract": "sub",
        "negative": "neg",
        "absolute": "abs",
        "clip": "clamp",
        "greater": "gt",
        "less": "lt",
        "special_erf": "erf",
    }
    table.update({alias: table[name] for alias, name in aliases.items()})
    return table


def _loss_scan_structural_signatures() -> dict[str, Signature]:
    """Losses (the reduction kind is a parameter), scans and the bookkeeping ops of scan patterns."""
    legacy = (("size_average", None), ("reduce", None))  # deprecated; anything but None is rejected
    loss, scan, struct = OpKind.LOSS, OpKind.SCAN, OpKind.STRUCTURAL
    pair = ("input", "target")
    table = {
        "mse_loss": Signature("mse_loss", loss, pair, (*legacy, ("reduction", "mean"), ("weight", None))),
        "l1_loss": Signature("l1_loss", loss, pair, (*legacy, ("reduction", "mean"), ("weight", None))),
        "smooth_l1_loss": Signature(
            "smooth_l1_loss", loss, pair, (*legacy, ("reduction", "mean"), ("beta", 1.0))
        ),
        "huber_loss": Signature(
            "huber_loss", loss, pair, (("reduction", "mean"), ("delta", 1.0), ("weight", None))
        ),
        "kl_div": Signature("kl_div", loss, pair, (*legacy, ("reduction", "mean"), ("log_target", False))),
        # class-index targets (an int tensor of the input's shape without dim 1); F.cross_entropy's order
        "cross_entropy": Signature(
            "cross_entropy",
            loss,
            pair,
            (
                ("weight", None),
                *legacy[:1],
                ("ignore_index", -100),
                *legacy[1:],
                ("reduction", "mean"),
                ("label_smoothing", 0.0),
            ),
        ),
        "size": Signature("size", struct, ("input",), (("dim", None),)),
        "narrow": Signature("narrow", struct, ("input",), (("dim", None), ("start", None), ("length", None))),
        "select": Signature("select", struct, ("input",), (("dim", None), ("index", None))),
        "zeros_like": Signature(
            "zeros_like", struct, ("input",), fixed=(("dtype", None), ("layout", None), ("device", None))
        ),
        "cat": Signature("cat", struct, ("tensors",), (("dim", 0),)),
        "flip": Signature("flip", struct, ("input",), (("dims", None),)),
    }
    for name in ("cumsum", "cumprod"):
        table[name] = Signature(name, scan, ("input",), (("dim", None),), (("dtype", None),))
    return table


SIGNATURES: dict[str, Signature] = _signatures()

# Keyword arguments that never change the value computed (in-place variants compute the same result).
IGNORED_KWARGS = frozenset({"inplace", "_stacklevel"})
GEMM_OPS = frozenset({"linear", "matmul", "mm", "bmm"})  # the library ops that are matrix products

# nn.Module classes (by exact class name in torch.nn) -> (canonical op, attribute params read from the
# module).
MODULE_OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ReLU": ("relu", ()),
    "ReLU6": ("relu6", ()),
    "Sigmoid": ("sigmoid", ()),
    "Tanh": ("tanh", ()),
    "GELU": ("gelu", ("approximate",)),
    "LeakyReLU": ("leaky_relu", ("negative_slope",)),
    "Hardtanh": ("hardtanh", ("min_val", "max_val")),
    "Hardswish": ("hardswish", ()),
    "Hardsigmoid": ("hardsigmoid", ()),
    "Mish": ("mish", ()),
    "Softplus": ("softplus", ("beta", "threshold")),
    "ELU": ("elu", ("alpha",)),
    "SELU": ("selu", ()),
    "Softsign": ("softsign", ()),
    "LogSigmoid": ("logsigmoid", ()),
    "Flatten": ("flatten", ("start_dim", "end_dim")),
    "SiLU": ("silu", ()),
    "Softmax": ("softmax", ("dim",)),
    "LogSoftmax": ("log_softmax", ("dim",)),
    "Linear": ("linear", ()),
    "Conv1d": ("conv1d", ()),
    "Conv2d": ("conv2d", ()),
    "Conv3d": ("conv3d", ()),
    "ConvTranspose1d": ("conv_transpose1d", ()),
    "ConvTranspose2d": ("conv_transpose2d", ()),
    "ConvTranspose3d": ("conv_transpose3d", ()),
    "LayerNorm": ("nn_layer_norm", ("normalized_shape", "eps", "elementwise_affine")),
    "GroupNorm": ("nn_group_norm", ("num_groups", "eps", "affine")),
    "InstanceNorm1d": ("nn_instance_norm", ("eps", "affine", "track_running_stats")),
    "InstanceNorm2d": ("nn_instance_norm", ("eps", "affine", "track_running_stats")),
    "InstanceNorm3d": ("nn_instance_norm", ("eps", "affine", "track_running_stats")),
    "RMSNorm": ("nn_rms_norm", ("normalized_shape", "eps", "elementwise_affine")),
    "Dropout": ("dropout", ("p",)),
    "CrossEntropyLoss": (
        "cross_entropy",
        ("ignore_index", "reduction", "label_smoothing"),
    ),  # weight: a buffer
    **{
        f"BatchNorm{d}d": ("nn_batch_norm", ("eps", "momentum", "affine", "track_running_stats"))
        for d in (1, 2, 3)
    },
    **{f"MaxPool{d}d": (f"max_pool{d}d", tuple(p for p, _ in _MAX_POOL_PARAMS)) for d in (1, 2, 3)},
    **{
        f"AvgPool{d}d": (f"avg_pool{d}d", tuple(p for p, _ in _AVG_POOL_PARAMS[: 6 if d > 1 else 5]))
        for d in (1, 2, 3)
    },
}
