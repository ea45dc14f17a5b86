"""Text the loop hands to a generator: the state summary s_t and the chosen strategy's memory context.

Pure functions (no I/O). The state summary changes every step; the memory context is stable for a strategy and
is what an LLM backend caches.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import TYPE_CHECKING

from htam_graph.model import AttemptExample, LocalWithEvidence, Task

if TYPE_CHECKING:  # pragma: no cover
    from htam_graph.loop import RunResult, StepOutcome

_EXCERPT_CHARS = 1500
_EXAMPLE_CHARS = 2500


def reference_as_candidate(task_source: str) -> str:
    """The task's reference rewritten as a `ModelNew` candidate: the run's starting point and fallback.

    Only the class name changes (`class Model` → `class ModelNew`, and `Model(` / `Model,` references to it),
    so the returned source is the reference computation itself, standalone and readable.
    """
    tree = ast.parse(task_source)
    lines = task_source.splitlines(keepends=True)
    edits: list[tuple[int, int, int]] = []  # (line index, col, length) of identifiers named Model
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            line = lines[node.lineno - 1]
            col = line.index("Model", line.index("class"))
            edits.append((node.lineno - 1, col, len("Model")))
        elif isinstance(node, ast.Name) and node.id == "Model":
            edits.append((node.lineno - 1, node.col_offset, len("Model")))
    for idx, col, length in sorted(edits, reverse=True):
        line = lines[idx]
        lines[idx] = line[:col] + "ModelNew" + line[col + length :]
    return "".join(lines)


def state_summary(task: Task, result: RunResult, last: StepOutcome | None) -> str:
    """s_t: the task, the current best, the last candidate's feedback, and the recent trajectory."""
    parts = [
        f"Task: {task.key} (op tags: {', '.join(task.op_tags) or 'none'})",
        (
            "Current best: the reference (no correct faster kernel yet)"
            if result.best_is_reference
            else f"Current best: step {result.best_step}, {result.best_speedup_x:.3f}x over eager"
        ),
    ]
    if last is not None:
        parts.append(_feedback(last))
    if result.steps:
        parts.append("Recent trajectory (step: direction / strategy -> outcome):")
        for s in result.steps[-6:]:
            outcome = s.status if s.error_kind is None else f"{s.status} ({s.error_kind.value})"
            speed = f", {s.speedup_x:.3f}x" if s.speedup_x else ""
            parts.append(f"  {s.step}: {s.global_key} / {s.local_key or '-'} -> {outcome}{speed}")
    return "\n".join(parts)


def _feedback(last: StepOutcome) -> str:
    r = last.result
    if last.error_kind is not None:
        excerpt = last.error_excerpt[-_EXCERPT_CHARS:]
        detail = f"\n{excerpt}" if excerpt else ""
        extra = ""
        if r is not None and r.max_abs_err is not None:
            extra = f" (max abs err {r.max_abs_err:.3g}, max rel err {r.max_rel_err or 0:.3g})"
        return f"Last candidate (step {last.step}) failed: {last.error_kind.value}{extra}{detail}"
    if r is not None and r.runtime_us is not None:
        ref = f", reference {r.ref_eager_us:.1f} us" if r.ref_eager_us else ""
        speed = f" = {last.speedup_x:.3f}x" if last.speedup_x else ""
        where = " (CPU timing, not a GPU claim)" if r.timing_on_cpu else ""
        return f"Last candidate (step {last.step}) correct: {r.runtime_us:.1f} us{ref}{speed}{where}"
    return f"Last candidate (step {last.step}) correct"


def memory_context(
    local: LocalWithEvidence | None, examples: Sequence[AttemptExample], *, flat: bool = False
) -> str:
    """The strategy's memory for the generator: pattern, checks, risks, evidence, and past examples.

    With `flat` (the ablation) there is no hierarchy: only the retrieved past attempts are shown.
    """
    parts: list[str] = []
    if local is not None and not flat:
        s = local.strategy
        parts += [
            f"Strategy {s.key}: {s.name}",
            f"Pattern: {s.pattern}",
            "Applies when: " + "; ".join(s.applicable_when) if s.applicable_when else "",
            "Checks: " + "; ".join(s.checks) if s.checks else "",
            "Risks: " + "; ".join(s.risks) if s.risks else "",
            f"Evidence: {local.attempts} attempts, {local.positives} improved, {local.negatives} failed, "
            f"mean gain {local.mean_gain:.3f}",
        ]
    for ex in examples:
        kind = "Worked" if ex.positive else "Failed"
        speed = f" {ex.speedup_x:.3f}x" if ex.speedup_x else ""
        head = f"{kind} example: {ex.task_key} via {ex.local_key or ex.global_key}{speed} ({ex.status}"
        head += f", {ex.error_kind})" if ex.error_kind else ")"
        parts.append(head)
        if ex.source:
            parts.append("```python\n" + ex.source[:_EXAMPLE_CHARS] + "\n```")
    return "\n".join(p for p in parts if p)
