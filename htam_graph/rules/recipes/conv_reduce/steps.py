"""The ops of a `ConvReducePlan` as Triton statements: elementwise ops, the norm, softmax and channel
reductions over the channel axis of [C_PAD, BLOCK_S] tiles (or [C_PAD] vectors), and the loads of the leaves
they read. Statements come unindented: the kernel template that places them gives their indentation."""

from __future__ import annotations

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op
from htam_graph.rules.ops import OpNode, Ref, Value
from htam_graph.rules.recipes.conv_reduce.plan import TILE, ConvReducePlan, Step

__all__ = ["NEG_INF", "POS_INF", "Ops", "leaf_loads"]

NEG_INF, POS_INF = '-float("inf")', 'float("inf")'


class Ops:
    """Renders the plan's ops onto Triton expressions, tracking variable names and helpers."""

    def __init__(self, plan: ConvReducePlan) -> None:
        self.plan = plan
        self.vars: dict[str, str] = {}
        self.helpers: set[str] = set()
        self.scalars = {s.path: s.arg for s in plan.scalars}
        self.leaves = {leaf.ref: leaf for leaf in plan.leaves}
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def render(self, value: Value, layout: str) -> str:
        return operand_renderer(lambda name: self._tensor(name, layout), self.scalars)(value)

    def _tensor(self, name: str, layout: str) -> str:
        if name in self.vars:
            return self.vars[name]
        leaf = self.leaves[name]
        if not leaf.per_channel:
            return f"{leaf.arg}_s"
        return f"{leaf.arg}_c[:, None]" if layout == TILE else f"{leaf.arg}_c"

    def step(self, step: Step) -> list[str]:
        """Lines computing one step's value (elementwise, norm, softmax, channel reduction, `same`)."""
        node, layout = step.node, step.layout
        var = self.fresh("v")
        lines = [f"# {node.op}  ({node.origin})"]
        if step.role == "ew":
            emitted = emit_op(node, lambda v: self.render(v, layout))
            self.helpers |= emitted.helpers
            lines.append(f"{var} = {emitted.expr}")
        elif step.role == "same":  # a reduction over size-1 dims: the same values
            lines = [f"{var} = {self.render(node.operands[0], layout)}  # {node.op} over size-1 dims"]
        elif step.role == "norm":
            lines += self._norm(node, var)
        elif step.role == "softmax":
            lines += self._softmax(node, layout, var)
        elif step.role == "channel":
            lines += self._channel(node, layout, var)
        else:
            raise NotApplicable(f"step {step.role} is not an op")
        self.vars[node.name] = var
        return lines

    def _norm(self, node: OpNode, var: str) -> list[str]:
        x = self.render(node.operands[0], TILE)
        lines = [f"{var} = ({x} - nmean[:, None]) * nrstd[:, None]"]
        weight, bias = node.operands[1], node.operands[2]
        if isinstance(weight, Ref):
            lines.append(f"{var} = {var} * {self.leaves[weight.name].arg}_c[:, None]  # affine weight")
        if isinstance(bias, Ref):
            lines.append(f"{var} = {var} + {self.leaves[bias.name].arg}_c[:, None]  # affine bias")
        return lines

    def _softmax(self, node: OpNode, layout: str, var: str) -> list[str]:
        x = self.render(node.operands[0], layout)
        cm, bc = ("cmask[:, None]", "[None, :]") if layout == TILE else ("cmask", "")
        lines = [
            f"t = tl.where({cm}, {x}, {NEG_INF})  # padded channels never count",
            "mx = tl.max(t, 0)",
            f"e = tl.exp(t - mx{bc})",
            "den = tl.sum(e, 0)",
        ]
        if node.op == "softmax":
            lines.append(f"{var} = e / den{bc}")
        else:
            lines.append(f"{var} = t - mx{bc} - tl.log(den){bc}")
        return lines

    def _channel(self, node: OpNode, layout: str, var: str) -> list[str]:
        x = self.render(node.operands[0], layout)
        cm, bc = ("cmask[:, None]", "[None, :]") if layout == TILE else ("cmask", "")
        op = node.op
        if op in ("sum", "mean"):
            lines = [f"{var} = tl.sum(tl.where({cm}, {x}, 0.0), 0)"]
            if op == "mean":
                lines.append(f"{var} = {var} / C")
            return lines
        if op in ("amax", "amin"):
            fn, fill = ("tl.max", NEG_INF) if op == "amax" else ("tl.min", POS_INF)
            return [f"{var} = {fn}(tl.where({cm}, {x}, {fill}), 0)"]
        return [  # logsumexp: max-shifted; all -inf gives -inf (as PyTorch), never NaN
            f"mx = tl.max(tl.where({cm}, {x}, {NEG_INF}), 0)",
            f"mx = tl.where(mx == {NEG_INF}, 0.0, mx)",
            f"{var} = mx + tl.log(tl.sum(tl.where({cm}, tl.exp({x} - mx{bc}), 0.0), 0))",
        ]


def leaf_loads(plan: ConvReducePlan, steps: list[Step]) -> list[str]:
    """Load the leaves the steps read, once per program (per-channel vectors [C_PAD] or scalars)."""
    used = {v.name for s in steps for v in s.node.operands if isinstance(v, Ref)}
    lines = []
    for leaf in plan.leaves:
        if leaf.ref not in used:
            continue
        if leaf.per_channel:
            lines.append(f"{leaf.arg}_c = tl.load({leaf.arg}_ptr + c, mask=cmask, other=0.0).to(tl.float32)")
        else:
            lines.append(f"{leaf.arg}_s = tl.load({leaf.arg}_ptr).to(tl.float32)")
    return lines
