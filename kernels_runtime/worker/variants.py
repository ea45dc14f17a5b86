"""Named task configurations a task declares in its own source (`HTAM_TASK_VARIANTS`), e.g. Robust-KBench's.

A task may bind, at module level, a literal dict from a configuration's name to size-constant overrides:

    HTAM_TASK_VARIANTS = {"multi5 batch_size=8 init_method=random": {"batch_size": 8, "init_method_value": 0}}

The module's own constants are the default configuration (timed); every declared configuration is a correctness
variant the candidate must also pass (the harness's `task_configs` check). Values are ints or int tuples/lists,
so they go through the same `taskmod` override path as shape variants. At the smoke shape each configuration
is shrunk by its own smoke search (`shapes.smoke_overrides` of the source with that configuration applied).
Declaring the variants in the source keeps them with the task wherever its source travels (graph, bench
jobs, Ray); the candidate never sees or changes them.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from htam_graph.errors import TaskError
from htam_graph.kernels_runtime.worker import shapes, taskmod
from htam_graph.kernels_runtime.worker.taskmod import OverrideValue

__all__ = ["VARIANTS_NAME", "NamedVariant", "declared_variants", "variant_overrides", "configurations"]

VARIANTS_NAME = "HTAM_TASK_VARIANTS"


@dataclass(frozen=True)
class NamedVariant:
    """One declared configuration: its name and the module constants it overrides."""

    name: str
    overrides: dict[str, OverrideValue] = field(default_factory=dict)


def _declaration(tree: ast.Module) -> ast.expr | None:
    found: ast.expr | None = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == VARIANTS_NAME for t in stmt.targets
        ):
            found = stmt.value
    return found


def _override_value(task: str, name: str, key: str, value: object) -> OverrideValue:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, tuple | list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(int(v) for v in value)
    raise TaskError(f"task {task}: {VARIANTS_NAME}[{name!r}][{key!r}] is not an int or int tuple: {value!r}")


def declared_variants(source: str, task: str = "task") -> list[NamedVariant]:
    """The configurations `source` declares, in order ([] when it declares none).

    Raises TaskError when the declaration is not a literal dict of str -> {constant name: int | int tuple}.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise TaskError(f"task {task}: syntax error at line {e.lineno}: {e.msg}") from e
    node = _declaration(tree)
    if node is None:
        return []
    try:
        raw = ast.literal_eval(node)
    except ValueError as e:
        raise TaskError(f"task {task}: {VARIANTS_NAME} is not a literal: {e}") from e
    if not isinstance(raw, dict):
        raise TaskError(f"task {task}: {VARIANTS_NAME} must be a dict, got {type(raw).__name__}")
    out: list[NamedVariant] = []
    for name, overrides in raw.items():
        if not isinstance(name, str) or not isinstance(overrides, dict):
            raise TaskError(f"task {task}: {VARIANTS_NAME} entries must be 'name': {{constant: value}}")
        values = {str(k): _override_value(task, name, str(k), v) for k, v in overrides.items()}
        out.append(NamedVariant(name, values))
    return out


def variant_overrides(
    source: str, variant: NamedVariant, shape: str, task: str = "task"
) -> dict[str, OverrideValue]:
    """The overrides that run `variant` at `shape`: as declared at the default shape; at the smoke shape the
    declared values plus that configuration's own smoke scaling. Raises TaskError when it cannot be built."""
    if shape == "default":
        return dict(variant.overrides)
    if shape != "smoke":
        raise TaskError(f"unknown shape variant {shape!r} (expected 'default' or 'smoke')")
    applied = ast.unparse(taskmod.apply_overrides(ast.parse(source), variant.overrides))
    smoke = shapes.smoke_overrides(applied, name=f"{task} [{variant.name}]")
    return {**variant.overrides, **smoke.overrides}


def configurations(
    source: str, shape: str, main: Mapping[str, OverrideValue], task: str = "task"
) -> list[tuple[str, dict[str, OverrideValue]]]:
    """(name, overrides) of every declared configuration at `shape`, without repeats of the main variant's
    overrides `main` or of each other (at the smoke shape two configurations can shrink to the same sizes)."""
    constants = taskmod.module_constants(ast.parse(source))

    def effective(overrides: Mapping[str, OverrideValue]) -> dict[str, OverrideValue]:
        # Only what differs from the source's own values: {"batch_size": 1} where batch_size = 1 is no change.
        def same(name: str, value: OverrideValue) -> bool:
            original = constants.get(name)
            return bool((tuple(original) if isinstance(original, list) else original) == value)

        return {k: v for k, v in overrides.items() if not same(k, v)}

    seen = [effective(main)]
    out: list[tuple[str, dict[str, OverrideValue]]] = []
    for variant in declared_variants(source, task):
        overrides = variant_overrides(source, variant, shape, task)
        if effective(overrides) not in seen:
            seen.append(effective(overrides))
            out.append((variant.name, overrides))
    return out
