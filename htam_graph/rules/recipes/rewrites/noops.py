"""algebraic_rewrite.drop_noops: remove value-preserving copies (clone, detach, contiguous), then fuse the
rest.

`original_x = x.clone().detach()` followed by `x * s + original_x` (KernelBench's "ResidualAdd" tasks) reads
the same values twice; eager PyTorch materialises the copy. Every use of a copy is redirected to the copied
tensor (exact: the values are identical and nothing in the forward writes in place, which is checked), and the
resulting forward is handed to the first fusion recipe that applies to it (elementwise chain, library
epilogue, pooling). The written file is that recipe's kernel, under this strategy's header.

Not dropped: dropout (KernelBench calls models in training mode, where dropout with p > 0 is random) and
arithmetic identities such as `x * 1` (free inside a fused kernel, so dropping them gains nothing).
"""

from __future__ import annotations

import dataclasses

from htam_graph.rules.base import (
    KernelConfig,
    NotApplicable,
    PlannedRecipe,
    Recipe,
    TaskView,
    header_line,
)
from htam_graph.rules.ops import OpGraph, OpKind, OpNode, Ref, Value

KEY = "algebraic_rewrite.drop_noops"


class DropNoops(PlannedRecipe[tuple[Recipe, TaskView, list[str]]]):
    """Recipe for `algebraic_rewrite.drop_noops` over the given fusion recipes (tried in order)."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)

    def __init__(self, fusers: list[Recipe]) -> None:
        self._fusers = fusers

    def render(self, view: TaskView, plan: tuple[Recipe, TaskView, list[str]], config: KernelConfig) -> str:
        fuser, rewritten, dropped = plan
        source = fuser.emit(rewritten, config)
        _, _, rest = source.partition("\n")
        note = (
            f"# Dropped value-preserving copies ({', '.join(dropped)}); the rest is written by {fuser.key}:"
        )
        return f"{header_line(KEY, config)}\n{note}\n{rest}"

    def plan(self, view: TaskView) -> tuple[Recipe, TaskView, list[str]]:
        """The fusion recipe, the view without copies, and what was dropped. Raises NotApplicable."""
        graph = view.graph
        copies = [n for n in graph.nodes if n.kind is OpKind.IDENTITY]
        if not copies:
            random = [n.origin for n in graph.nodes if n.kind is OpKind.RANDOM]
            note = f" ({', '.join(random)}: random in training mode, never dropped)" if random else ""
            raise NotApplicable("the forward has no clone / detach / contiguous to drop" + note)
        _check_no_in_place(graph)
        rewritten = dataclasses.replace(view, graph=drop_copies(graph))
        reasons = []
        for fuser in self._fusers:
            verdict = fuser.check(rewritten)
            if verdict:
                return fuser, rewritten, [f"{n.op} ({n.origin})" for n in copies]
            reasons.append(f"{fuser.key}: {verdict.reason}")
        raise NotApplicable("without the copies, no fusion recipe applies (" + "; ".join(reasons) + ")")


def drop_copies(graph: OpGraph) -> OpGraph:
    """The graph with every identity node removed and its uses redirected to its input."""
    source: dict[str, Value] = {}

    def resolve(value: Value) -> Value:
        while isinstance(value, Ref) and value.name in source:
            value = source[value.name]
        return value

    nodes: list[OpNode] = []
    for node in graph.nodes:
        if node.kind is OpKind.IDENTITY:
            source[node.name] = resolve(node.operands[0])
            continue
        operands = tuple(resolve(v) for v in node.operands)
        params = tuple((k, resolve(v)) for k, v in node.params)
        nodes.append(dataclasses.replace(node, operands=operands, params=params))
    output = resolve(graph.output)
    if not isinstance(output, Ref) or graph.node(output.name) is None:
        raise NotApplicable("the forward returns a copy of an input: nothing is computed")
    return dataclasses.replace(graph, nodes=tuple(nodes), output=output)


def without_copies(graph: OpGraph) -> OpGraph:
    """`drop_copies` for a recipe that reads through copies: the graph itself when it has none; NotApplicable
    when something writes in place (a copy may then differ from its source)."""
    if not any(n.kind is OpKind.IDENTITY for n in graph.nodes):
        return graph
    if any(n.origin.startswith("Tensor.") and n.origin.endswith("_") for n in graph.nodes):
        raise NotApplicable("an in-place op makes a copy differ from its source")
    return drop_copies(graph)


def _check_no_in_place(graph: OpGraph) -> None:
    """A copy differs from its source once either is written in place; such forwards are not rewritten."""
    for node in graph.nodes:
        if node.origin.startswith("Tensor.") and node.origin.endswith("_"):
            raise NotApplicable(f"{node.origin} writes in place: a copy may not equal its source")
        if node.name != graph.output.name and not graph.users(node.name):
            raise NotApplicable(f"{node.name} ({node.origin}) is computed but never used")
