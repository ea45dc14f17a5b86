"""The kernel lines that evaluate a group's ops in one index space: loads of its leaves, then one line per op.

A FULL section works on a tile of flat offsets `offs` (masked by `mask`); a REDUCED section on the vector of
kept rows `keep` (masked by `keep_mask`). Each section writes its variables with its own suffix, so the same
op evaluated in several places of one kernel (the shift, the statistics loop, the output loop) never rebinds a
name with another shape: Triton's loops require that of every variable carried through them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from htam_graph.rules.base import NotApplicable
from htam_graph.rules.codegen.fused_elementwise import operand_renderer
from htam_graph.rules.codegen.triton_math import emit_op
from htam_graph.rules.compose.group import Group, Leaf, Space, values_of
from htam_graph.rules.compose.stats import element_value, row_value
from htam_graph.rules.ops import OpNode, Ref

__all__ = ["SectionWriter"]


@dataclass
class SectionWriter:
    """Writes sections of one group's kernel and collects the @triton.jit helpers they call."""

    group: Group
    helpers: set[str] = field(default_factory=set)
    row_vars: dict[str, str] = field(default_factory=dict)  # REDUCED node name -> its [BLOCK_K] variable

    def full(self, targets: list[str], suffix: str, offs: str, mask: str) -> tuple[list[str], dict[str, str]]:
        """Lines computing the FULL values `targets` (node or leaf names) at `offs`; returns the lines and the
        variable of every value computed."""
        group = self.group
        needed = self._ancestors(targets)
        nodes = [n for n in group.nodes if n.name in needed and group.space_of(n.name) is Space.FULL]
        leaves = [lf for lf in group.leaves if lf.space is Space.FULL and lf.ref in needed and not lf.index]
        names: dict[str, str] = {}
        lines = [_load(leaf, suffix, offs, mask) for leaf in leaves]
        names.update({leaf.ref: f"{leaf.arg}{suffix}" for leaf in leaves})
        render = operand_renderer(lambda ref: self._full_ref(ref, names), self._scalar_args())
        red = group.reduction
        for node in nodes:
            var = f"v_{node.name}{suffix}"
            if red is not None and node is red.node:
                lines += self._norm_lines(node, var, names, suffix, offs, mask)
            else:
                emitted = emit_op(node, render)
                self.helpers |= emitted.helpers
                lines.append(f"{var} = {emitted.expr}  # {node.op}")
            names[node.name] = var
        return lines, names

    def reduced(self) -> list[str]:
        """Lines computing every REDUCED op on the [BLOCK_K] row vector (after the row values are final)."""
        group = self.group
        assert group.reduction is not None
        lines: list[str] = []
        leaves = [lf for lf in group.leaves if lf.space is Space.REDUCED and not lf.index]
        for leaf in leaves:
            lines.append(_load(leaf, "", "keep", "keep_mask"))
            self.row_vars[leaf.ref] = leaf.arg
        scalars = self._scalar_args()
        render = operand_renderer(lambda ref: scalars.get(ref) or self.row_vars[ref], scalars)
        for node in group.nodes:
            if group.space_of(node.name) is not Space.REDUCED:
                continue
            var = f"r_{node.name}"
            if node is group.reduction.node:
                lines.append(f"{var} = {row_value(group.reduction)}  # {node.op}")
            else:
                emitted = emit_op(node, render)
                self.helpers |= emitted.helpers
                lines.append(f"{var} = {emitted.expr}  # {node.op}")
            self.row_vars[node.name] = var
        return lines

    def _norm_lines(
        self, node: OpNode, var: str, names: dict[str, str], suffix: str, offs: str, mask: str
    ) -> list[str]:
        """A per-element norm / softmax: its value from the input's variable and the row statistics."""
        red = self.group.reduction
        assert red is not None
        source = node.operands[0]
        assert isinstance(source, Ref)
        affine: list[str | None] = []
        lines: list[str] = []
        for value in (red.weight, red.bias):
            if not isinstance(value, Ref):
                affine.append(None)
                continue
            leaf = self.group.leaf(value.name, Space.FULL)
            lines.append(_load(leaf, suffix, offs, mask))
            affine.append(f"{leaf.arg}{suffix}")
        expr = element_value(red, self._full_ref(source.name, names), affine[0], affine[1])
        return [*lines, f"{var} = {expr}  # {node.op}"]

    def _full_ref(self, ref: str, names: dict[str, str]) -> str:
        scalars = self._scalar_args()  # a size read in the forward is a scalar argument
        if ref in scalars:
            return scalars[ref]
        if ref in names:
            return names[ref]
        if ref in self.row_vars:
            return f"{self.row_vars[ref]}[None, :]"
        raise NotApplicable(f"{ref} is not available in the kernel's per-element section")

    def _scalar_args(self) -> dict[str, str]:
        return {s.key: s.arg for s in self.group.scalars}

    def _ancestors(self, targets: list[str]) -> set[str]:
        """`targets` and every FULL op and leaf they read, through FULL ops only."""
        group = self.group
        by_name = {n.name: n for n in group.nodes}
        needed: set[str] = set()
        stack = list(targets)
        while stack:
            name = stack.pop()
            if name in needed:
                continue
            needed.add(name)
            node = by_name.get(name)
            if node is None or group.space_of(name) is not Space.FULL:
                continue
            red = group.reduction
            reads = values_of(node) if red is None or node is not red.node else node.operands[:1]
            stack += [v.name for v in reads if isinstance(v, Ref)]
        return needed


def _load(leaf: Leaf, suffix: str, offs: str, mask: str) -> str:
    index = f"({offs} // {leaf.arg}_inner) % {leaf.arg}_size" if leaf.broadcast else offs
    if leaf.two_blocks:
        index = f"({index}) * {leaf.arg}_size2 + ({offs} // {leaf.arg}_inner2) % {leaf.arg}_size2"
    return f"{leaf.arg}{suffix} = tl.load({leaf.arg}_ptr + {index}, mask={mask}, other=0.0).to(tl.float32)"
