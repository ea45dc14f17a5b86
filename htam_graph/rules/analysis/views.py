"""A softmax over trailing dims written as flatten -> softmax -> unflatten, folded into one SOFTMAX node.

The forward idiom (KernelBench level2/38: a spatial softmax)

    b, c, d, h, w = x.shape            # or x.size(), or x.shape[i] / x.size(i) per size
    x = x.view(b, c, -1)               # or .reshape(b, c, -1), x.flatten(2), torch.flatten(x, 2)
    x = torch.softmax(x, dim=2)        # or dim=-1, log_softmax, F.softmax, x.softmax(2)
    x = x.view(b, c, d, h, w)          # or .reshape(...), .view_as(x0), .view(x0.shape)

computes a softmax over dims (2, 3, 4) of the original tensor taken together: the flattened dim holds exactly
those elements, in order, and the last view restores the original shape. The three calls and the size reads
they use become one SOFTMAX node whose `dim` is the tuple of those (adjacent, trailing) dims, so the reduction
recipes that already handle adjacent dims apply. The fold happens only when every size read feeds nothing
but these views; otherwise the nodes stay and the analysis rejects the size reads as before.

Matching is structural (the attribute-marking trace has no shapes); with shapes, the ranks and the result's
shape are checked too, and a mismatch leaves the graph unfolded.
"""

from __future__ import annotations

import builtins
import operator
from dataclasses import dataclass
from typing import Any

__all__ = ["FlattenedSoftmax", "find_flattened_softmaxes"]

_VIEWS = ("view", "reshape")
_SOFTMAX_NAMES = ("softmax", "log_softmax")


@dataclass(frozen=True)
class FlattenedSoftmax:
    """One folded pattern: the softmax `node` over dims start..rank-1 of `source`, ending at `unflatten`."""

    softmax: Any  # the fx softmax node (over the flattened dim)
    source: Any  # the fx node that was flattened
    unflatten: Any  # the fx view that restores the source's shape (the folded node's position)
    dims: tuple[int, ...] | None  # None without shapes when the rank is not written in the forward
    absorbed: frozenset[Any]  # every fx node the fold replaces (views, size reads, the softmax)


def find_flattened_softmaxes(gm: Any, with_shapes: bool) -> dict[Any, FlattenedSoftmax]:
    """The folds of `gm`'s graph, keyed by their unflatten node."""
    found: dict[Any, FlattenedSoftmax] = {}
    for node in gm.graph.nodes:
        fold = _match(node, with_shapes)
        if fold is not None:
            found[node] = fold
    return found


def _match(unflatten: Any, with_shapes: bool) -> FlattenedSoftmax | None:
    if unflatten.op != "call_method" or unflatten.kwargs or not unflatten.args:
        return None
    softmax = unflatten.args[0]
    if not _is_softmax(softmax) or list(softmax.users) != [unflatten]:
        return None
    flat = softmax.args[0]
    if not hasattr(flat, "users") or list(flat.users) != [softmax]:
        return None
    flattened = _flatten_of(flat)
    if flattened is None:
        return None
    source, start, flat_reads = flattened
    dim = softmax.args[1] if len(softmax.args) > 1 else softmax.kwargs.get("dim")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim not in (start, -1):
        return None  # not over the flattened (last) dim of the view
    restored = _unflatten_of(unflatten, source)
    if restored is None:
        return None
    rank, unflat_reads = restored
    if with_shapes:
        rank = _check_shapes(source, flat, unflatten, start, rank)
        if rank is None:
            return None
    if rank is not None and rank <= start:
        return None
    absorbed = _absorb({flat, softmax, unflatten}, flat_reads | unflat_reads)
    if absorbed is None:
        return None
    dims = tuple(range(start, rank)) if rank is not None else None
    return FlattenedSoftmax(softmax, source, unflatten, dims, absorbed)


def _is_softmax(node: Any) -> bool:
    import torch
    import torch.nn.functional as F

    if not hasattr(node, "op") or len(node.args) > 2 or node.kwargs.get("dtype") is not None:
        return False  # a dtype is rejected by the normal binding anyway; keep the views then
    if set(node.kwargs) - {"dim", "dtype", "_stacklevel"}:  # F.softmax records its defaults as kwargs
        return False
    if node.op == "call_method":
        return node.target in _SOFTMAX_NAMES
    targets = (torch.softmax, torch.log_softmax, F.softmax, F.log_softmax)
    return node.op == "call_function" and any(node.target is t for t in targets)


def _flatten_of(flat: Any) -> tuple[Any, int, set[Any]] | None:
    """(source, first flattened dim, size-read nodes used) when `flat` flattens its source's trailing dims."""
    import torch

    if flat.op == "call_method" and flat.target in _VIEWS and not flat.kwargs:
        source, sizes = flat.args[0], _sizes(flat.args[1:])
        if sizes is None or not sizes or sizes[-1] != -1:
            return None
        reads: set[Any] = set()
        for i, size in enumerate(sizes[:-1]):
            read = _size_read(size, source)
            if read is None or read[0] != i:
                return None
            reads |= read[1]
        return source, len(sizes) - 1, reads
    is_flatten = (flat.op == "call_method" and flat.target == "flatten") or (
        flat.op == "call_function" and flat.target is torch.flatten
    )
    if not is_flatten:
        return None
    args = list(flat.args)
    start = args[1] if len(args) > 1 else flat.kwargs.get("start_dim", 0)
    end = args[2] if len(args) > 2 else flat.kwargs.get("end_dim", -1)
    if set(flat.kwargs) - {"start_dim", "end_dim"} or end != -1:
        return None
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        return None
    return args[0], start, set()


def _unflatten_of(unflatten: Any, source: Any) -> tuple[int | None, set[Any]] | None:
    """(rank written in the forward or None, size reads used) when `unflatten` restores `source`'s shape."""
    if unflatten.target in ("view_as", "reshape_as"):
        return (None, set()) if unflatten.args[1:] == (source,) else None
    if unflatten.target not in _VIEWS:
        return None
    args = unflatten.args[1:]
    if len(args) == 1 and _is_shape_of(args[0], source):
        return None, {args[0]}
    sizes = _sizes(args)
    if not sizes:
        return None
    reads: set[Any] = set()
    for i, size in enumerate(sizes):
        read = _size_read(size, source)
        if read is None or read[0] != i:
            return None
        reads |= read[1]
    return len(sizes), reads


def _sizes(args: tuple[Any, ...]) -> list[Any] | None:
    """view(a, b, c) and view((a, b, c)) alike."""
    if len(args) == 1 and isinstance(args[0], tuple | list):
        return list(args[0])
    return list(args)


def _size_read(value: Any, source: Any) -> tuple[int, set[Any]] | None:
    """(dim, nodes) when `value` is source.shape[dim] / source.size()[dim] / source.size(dim)."""
    if not hasattr(value, "op"):
        return None
    if value.op == "call_method" and value.target == "size" and not value.kwargs and len(value.args) == 2:
        if value.args[0] is source and isinstance(value.args[1], int) and value.args[1] >= 0:
            return value.args[1], {value}
        return None
    if value.op != "call_function" or value.target is not operator.getitem or value.kwargs:
        return None
    whole, index = value.args
    if not _is_shape_of(whole, source) or not isinstance(index, int) or isinstance(index, bool) or index < 0:
        return None
    return index, {value, whole}


def _is_shape_of(node: Any, source: Any) -> bool:
    """`source.shape` (traced as getattr) or `source.size()`."""
    if not hasattr(node, "op") or node.kwargs:
        return False
    if node.op == "call_function" and node.target is builtins.getattr:
        return bool(node.args == (source, "shape"))
    return bool(node.op == "call_method" and node.target == "size" and node.args == (source,))


def _check_shapes(source: Any, flat: Any, unflatten: Any, start: int, rank: int | None) -> int | None:
    """The source's rank when the recorded shapes agree with the pattern (None: they do not)."""
    metas = [n.meta.get("tensor_meta") for n in (source, flat, unflatten)]
    if any(m is None or not hasattr(m, "shape") for m in metas):
        return None
    shape, flat_shape, out_shape = (tuple(int(s) for s in m.shape) for m in metas)
    if rank is not None and rank != len(shape):
        return None
    if out_shape != shape or start >= len(shape) or flat_shape[:start] != shape[:start]:
        return None
    if len(flat_shape) != start + 1:
        return None
    return len(shape)


def _absorb(core: set[Any], reads: set[Any]) -> frozenset[Any] | None:
    """The fold's nodes, plus every read of the same `x.shape` / `x.size()` (an unpack reads all dims);
    None when a size is used outside the pattern (the fold would drop a value something else needs)."""
    nodes = set(core) | reads
    for whole in [n for n in reads if _is_whole_shape(n)]:
        for user in whole.users:
            if user in core:
                continue
            if not (user.op == "call_function" and user.target is operator.getitem):
                return None
            nodes.add(user)
    for node in nodes - core:
        if any(user not in nodes for user in node.users):
            return None
    return frozenset(nodes)


def _is_whole_shape(node: Any) -> bool:
    if node.op == "call_function" and node.target is builtins.getattr:
        return True
    return node.op == "call_method" and node.target == "size" and len(node.args) == 1
