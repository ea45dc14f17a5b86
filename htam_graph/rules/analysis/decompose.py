"""Calls rewritten, in the traced graph, into the ops they are defined by, so the op tables need no row of
their own for them and every recipe sees the plain form.

- `F.normalize(x, p, dim, eps)` is, as torch defines it, `x / x.norm(p, dim, keepdim=True).clamp_min(eps)`:
  a norm reduction, a clamp and a broadcast division (L2 normalisation over channels or features);
- `torch.linalg.vector_norm(x, ord, dim, keepdim)` is `torch.norm(x, p=ord, dim=dim, keepdim=keepdim)`, the
  same vector norm (only without a `dtype`).

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


def _set_meta(new: Any, compute: Any, source: Any) -> None:
    """`new.meta["tensor_meta"]` = that of `compute(source's meta tensor)`, when `source` has one."""
    import torch
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    meta = getattr(source, "meta", {}).get("tensor_meta")
    if meta is None:
        return
    value = compute(torch.empty(meta.shape, dtype=meta.dtype, device="meta"))
    new.meta["tensor_meta"] = _extract_tensor_metadata(value)
