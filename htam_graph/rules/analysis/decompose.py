"""Calls rewritten, in the traced graph, into the ops they are defined by, so the op tables need no row of
their own for them and every recipe sees the plain form.

- `F.normalize(x, p, dim, eps)` is, as torch defines it, `x / x.norm(p, dim, keepdim=True).clamp_min(eps)`:
  a norm reduction, a clamp and a broadcast division (L2 normalisation over channels or features);
- `torch.linalg.vector_norm(x, ord, dim, keepdim)` is `torch.norm(x, p=ord, dim=dim, keepdim=keepdim)`, the
  same vector norm (only without a `dtype`);
- an average or max pool whose window is the input's own trailing sizes (`F.avg_pool2d(x, x.shape[-2:])`,
  `F.max_pool2d(x, (x.size(-2), x.size(-1)))`; no padding, default stride) is the mean / amax over those dims
  with keepdim: one window covers the whole plane at every input size.

New nodes get the shape metadata ShapeProp would have given them (computed on the meta device), so the
rewrite may run after shape propagation.
"""

from __future__ import annotations

from typing import Any

from htam_graph.rules.base import NotApplicable

__all__ = ["decompose_calls"]


def decompose_calls(gm: Any) -> None:
    """Rewrite every call of the module docstring's list in `gm`'s graph, in place. Raises NotApplicable for
    such a call with an argument the plain form cannot express."""
    import torch
    import torch.nn.functional as F

    for fx_node in list(gm.graph.nodes):
        if fx_node.op != "call_function":
            continue
        if fx_node.target is F.normalize:
            _normalize(gm, fx_node)
        elif fx_node.target is torch.linalg.vector_norm:
            _vector_norm(fx_node)
        elif fx_node.target in _whole_pools():
            _whole_window_pool(gm, fx_node)
    gm.graph.lint()
    gm.recompile()


def _bound(fx_node: Any, names: tuple[str, ...], defaults: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name (positional ones in `names` order), defaults filled in."""
    if len(fx_node.args) > len(names):
        raise NotApplicable(f"{fx_node.target.__name__}: unexpected extra positional arguments")
    bound = dict(defaults) | dict(zip(names, fx_node.args, strict=False))
    unknown = set(fx_node.kwargs) - set(names)
    if unknown:
        raise NotApplicable(f"{fx_node.target.__name__}: unsupported keyword argument {sorted(unknown)[0]}")
    return bound | dict(fx_node.kwargs)


def _normalize(gm: Any, fx_node: Any) -> None:
    import operator

    import torch

    args = _bound(
        fx_node, ("input", "p", "dim", "eps", "out"), {"p": 2.0, "dim": 1, "eps": 1e-12, "out": None}
    )
    if args["out"] is not None:
        raise NotApplicable("F.normalize with out= is not supported")
    x = args["input"]
    graph = gm.graph
    with graph.inserting_before(fx_node):
        norm = graph.call_function(torch.norm, (x,), {"p": args["p"], "dim": args["dim"], "keepdim": True})
        denom = graph.call_function(torch.clamp_min, (norm, args["eps"]))
        quotient = graph.call_function(operator.truediv, (x, denom))
    _set_meta(norm, lambda v: torch.norm(v, p=args["p"], dim=args["dim"], keepdim=True), x)
    _set_meta(denom, lambda v: v, norm)
    quotient.meta = dict(fx_node.meta)
    fx_node.replace_all_uses_with(quotient)
    graph.erase_node(fx_node)


def _vector_norm(fx_node: Any) -> None:
    import torch

    args = _bound(
        fx_node, ("x", "ord", "dim", "keepdim", "dtype", "out"), {"ord": 2, "dim": None, "keepdim": False}
    )
    if args.get("dtype") is not None or args.get("out") is not None:
        raise NotApplicable("torch.linalg.vector_norm with dtype= or out= is not supported")
    fx_node.target = torch.norm
    fx_node.args = (args["x"],)
    fx_node.kwargs = {"p": args["ord"], "dim": args["dim"], "keepdim": args["keepdim"]}


def _whole_pools() -> dict[Any, tuple[int, str]]:
    """The functional pools: (the number of pooled dims, the reduction a whole-plane window is)."""
    import torch.nn.functional as F

    return {
        **{getattr(F, f"avg_pool{n}d"): (n, "mean") for n in (1, 2, 3)},
        **{getattr(F, f"max_pool{n}d"): (n, "amax") for n in (1, 2, 3)},
    }


def _whole_window_pool(gm: Any, fx_node: Any) -> None:
    """A pool over the input's whole trailing plane becomes the reduction over it (module docstring); any
    other pool is left as it is."""
    import torch
    import torch.fx

    n, reduction = _whole_pools()[fx_node.target]
    names = ("input", "kernel_size", "stride", "padding")
    if len(fx_node.args) > len(names):
        return
    args = dict(zip(names, fx_node.args, strict=False)) | dict(fx_node.kwargs)
    x, window = args.pop("input", None), args.pop("kernel_size", None)
    plain: dict[str, tuple[Any, ...]] = {"stride": (None, window, []), "padding": (0, (0,) * n)}
    plain["dilation"] = (1, (1,) * n)
    plain |= {"ceil_mode": (False,), "return_indices": (False,), "divisor_override": (None,)}
    plain["count_include_pad"] = (True, False)  # no padding: nothing to count
    if any(k not in plain or v not in plain[k] for k, v in args.items()):
        return
    if not _trailing_sizes(window, x, n):
        return
    dims = tuple(range(-n, 0))
    with gm.graph.inserting_before(fx_node):
        reduced = gm.graph.call_function(getattr(torch, reduction), (x,), {"dim": dims, "keepdim": True})
    reduced.meta = dict(fx_node.meta)
    fx_node.replace_all_uses_with(reduced)
    gm.graph.erase_node(fx_node)
    dead: list[Any] = [window, *getattr(window, "args", ())[:1]]  # x.shape[-2:] and x.shape, now unread
    for node in dead:
        if isinstance(node, torch.fx.Node) and not node.users:
            gm.graph.erase_node(node)


def _trailing_sizes(window: Any, x: Any, n: int) -> bool:
    """`window` is x's last `n` sizes: `x.shape[-n:]`, `x.size()[-n:]` or a tuple of `x.shape[i]` /
    `x.size(i)` for i = -n .. -1 in order."""
    import operator

    from htam_graph.rules.analysis.reshapes import is_shape_item, is_shape_read

    def reads_x(node: Any) -> bool:
        return getattr(node, "args", (None,))[0] is x

    if getattr(window, "target", None) is operator.getitem and is_shape_read(window.args[0]):
        return reads_x(window.args[0]) and window.args[1] == slice(-n, None, None)
    if not isinstance(window, tuple | list) or len(window) != n:
        return False
    for want, item in zip(range(-n, 0), window, strict=True):
        if is_shape_item(item):
            if not (reads_x(item.args[0]) and item.args[1] == want):
                return False
        elif not (getattr(item, "target", None) == "size" and reads_x(item) and item.args[1:] == (want,)):
            return False
    return True


def _set_meta(new: Any, compute: Any, source: Any) -> None:
    """`new.meta["tensor_meta"]` = that of `compute(source's meta tensor)`, when `source` has one."""
    import torch
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    meta = getattr(source, "meta", {}).get("tensor_meta")
    if meta is None:
        return
    value = compute(torch.empty(meta.shape, dtype=meta.dtype, device="meta"))
    new.meta["tensor_meta"] = _extract_tensor_metadata(value)
