"""The type mypy gives every expression of the htam_graph modules, as JSON, for one mypy configuration.

Checks that pyproject's `follow_imports = "skip"` list changes no type our code sees: run it with the list and
without it (a copy of pyproject.toml without the override) and compare the two files byte for byte. Each row is
`line:column:ExpressionKind:type`; a callee's type carries its whole signature, so a parameter type turned
into Any by a skipped module shows up. Run from a folder where `htam_graph` is the installed package tree (see
tests/unit/test_style.py::_package_tree, with MYPYPATH set to it); a full run takes minutes and GBs of memory.

Usage: MYPYPATH=SRC python scripts/mypy_types_dump.py CONFIG.toml OUT.json
"""

from __future__ import annotations

import json
import sys

from mypy import build
from mypy.main import process_options
from mypy.nodes import Expression, MypyFile, Node
from mypy.types import Type

# Attributes that leave the module's own syntax tree (symbol nodes, type info, other modules' definitions).
_NOT_THE_TREE = {
    "node", "info", "original_def", "def_or_infer_vars", "names", "type", "unanalyzed_type", "variable",
    "imports", "alias_tvars", "fullname", "_fullname",
}  # fmt: skip


def _children(node: Node) -> list[Node]:
    # mypy is compiled with mypyc: its nodes list their fields in __mypyc_attrs__ (no __dict__, no subclassing).
    out: list[Node] = []
    for cls in type(node).__mro__:
        for name in getattr(cls, "__mypyc_attrs__", ()):
            if name in _NOT_THE_TREE or name.startswith("__"):
                continue
            value = getattr(node, name, None)
            for item in value if isinstance(value, (list, tuple)) else [value]:
                for leaf in item if isinstance(item, (list, tuple)) else [item]:
                    if isinstance(leaf, Node) and not isinstance(leaf, MypyFile):
                        out.append(leaf)
    return out


def _rows(tree: MypyFile, types: dict[Expression, Type]) -> list[str]:
    rows: list[str] = []
    seen: set[int] = set()
    todo: list[Node] = list(tree.defs)
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Expression) and node in types:
            rows.append(f"{node.line}:{node.column}:{type(node).__name__}:{types[node]}")
        todo.extend(_children(node))
    return sorted(rows)


def main() -> None:
    config, out = sys.argv[1], sys.argv[2]
    sources, options = process_options(
        ["--strict", "--config-file", config, "--no-incremental", "-p", "htam_graph"]
    )
    options.export_types = True
    options.preserve_asts = True
    result = build.build(sources, options)
    if result.errors:
        sys.exit("\n".join(result.errors[:20]))
    dump = {
        module: _rows(state.tree, result.types)
        for module, state in sorted(result.graph.items())
        if (module == "htam_graph" or module.startswith("htam_graph.")) and state.tree is not None
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(dump, f)
    print(f"{len(dump)} modules, {sum(map(len, dump.values()))} typed expressions")


if __name__ == "__main__":
    main()
