"""Source-writing helpers shared by the reduction kernels (kernel.py, rows.py): the Triton
expression of one fused elementwise node, dependency walks over the plan's prologue."""

from __future__ import annotations

from collections.abc import Iterable

from htam_graph.rules.codegen.fused_elementwise import operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op
from htam_graph.rules.ops import OpNode, Ref
from htam_graph.rules.recipes.reduce.plan import BOUT, OUT, ReducePlan

__all__ = ["ancestors", "emit_node", "emit_nodes", "refs"]


def ancestors(plan: ReducePlan, roots: set[str]) -> set[str]:
    """The names `roots` depend on among the prologue nodes (and the roots themselves)."""
    wanted = set(roots)
    for node in reversed(plan.pre):
        if node.name in wanted:
            wanted |= {v.name for v in (*node.operands, *(p for _, p in node.params)) if isinstance(v, Ref)}
    return wanted


def refs(nodes: tuple[OpNode, ...] | list[OpNode]) -> set[str]:
    """The tensor names the nodes read (operands and tensor-valued params)."""
    return {v.name for n in nodes for v in (*n.operands, *(p for _, p in n.params)) if isinstance(v, Ref)}


def emit_node(
    plan: ReducePlan, node: OpNode, vars_: dict[str, str], helpers: set[str], per_column: bool = False
) -> str:
    (
        """The Triton expression of an elementwise node; with `per_column`, """
        """per-column values broadcast over rows."""
    )
    scalar_args = {s.path: s.arg for s in plan.scalars}
    reduced_names = {n.name for n in plan.post_reduced}
    reduced_names |= {lf.ref for lf in plan.leaves if lf.space in (OUT, BOUT)}

    def tensor(name: str) -> str:
        # in loop 2 a per-column value (a reduced result or a leaf read per column) broadcasts over rows
        if per_column and name in reduced_names:
            return f"{vars_[name]}[None, :]"
        return vars_[name]

    render = operand_renderer(tensor, scalar_args)

    emitted = emit_op(node, render)
    helpers |= emitted.helpers
    return emitted.expr


def emit_nodes(
    plan: ReducePlan, nodes: Iterable[OpNode], vars_: dict[str, str], helpers: set[str]
) -> list[str]:
    """Lines evaluating each node into `v_<name>` (with a comment naming it), recorded in `vars_`."""
    lines: list[str] = []
    for node in nodes:
        expr = emit_node(plan, node, vars_, helpers)
        lines += [f"# {node.op}  ({node.origin})", f"v_{node.name} = {expr}"]
        vars_[node.name] = f"v_{node.name}"
    return lines
