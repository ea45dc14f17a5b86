"""Text the loop hands to a generator: the state summary s_t and the offered strategies' memory context.

Pure functions (no I/O). The state summary changes every step; the memory context is stable for a strategy and
what its evidence says, and is what an LLM backend caches.

What the texts say, and why:
- after a failure the failed candidate itself is shown (a numbered diff against the base when it is small,
  else its numbered source), so `candidate.py:N` in the error excerpt points at a line the model can see; a
  correct candidate that was not kept is shown the same way, so a stateless model does not lose its own
  changes;
- a correct step reports its error margin against the tolerance (max abs error / atol);
- on the CPU no speed is reported at all (Triton runs interpreted; its timings mean nothing);
- evidence is this GPU's, with other GPUs' labelled and their weight in the choice stated; lines without
  evidence are left out, and "correct but not faster" is never called "failed".
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from htam_graph.model import ArchEvidence, AttemptExample, Device, LocalStrategy, LocalWithEvidence, Task
from htam_graph.runtypes import RunResult, StepOutcome
from htam_graph.sourceview import candidate_view, first_sentence, kernel_excerpt, tidy_excerpt

__all__ = ["evidence_text", "memory_context", "reference_as_candidate", "state_summary"]

_EXCERPT_CHARS = 1500
_EXAMPLE_CHARS = 2500
_TRAJECTORY = 6
_NOT_GPU_ARCHS = ("", "cpu", "unknown")


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


# ---------------------------------------------------------------------------------------------- state summary
def state_summary(task: Task, result: RunResult, last: StepOutcome | None, device: Device = "cuda") -> str:
    """s_t: the current best, the last candidate's feedback (and its code when it is not the base), and the
    recent trajectory. `task` is described once, in the system part of a prompt, not here."""
    del task  # the task is stable for the run: prompts show it before the memory, where caching covers it
    on_cpu = device == "cpu"
    parts = [_best_line(result, on_cpu)]
    if last is not None:
        parts.append(_feedback(last, result, on_cpu))
        if last.source is not None and last.source != result.best_source:
            what = "The failed candidate" if last.status == "failed" else "That candidate (correct, not kept)"
            parts.append(f"{what}. {candidate_view(result.best_source, last.source)}")
    if result.steps:
        parts.append("Recent trajectory (step: direction / strategy -> outcome):")
        parts += [_trajectory_line(s, on_cpu) for s in result.steps[-_TRAJECTORY:]]
    return "\n".join(parts)


def _best_line(result: RunResult, on_cpu: bool) -> str:
    if result.best_is_reference:
        return (
            "Current best: the reference itself (no "
            + ("correct" if on_cpu else "correct, faster")
            + " kernel yet)."
        )
    if on_cpu:
        return (
            f"Current best: the kernel of step {result.best_step}, the latest correct candidate (on the CPU "
            "speed is not measured, so the latest correct candidate becomes the base)."
        )
    line = f"Current best: step {result.best_step}, {result.best_speedup_x:.2f}x over eager"
    best = result.best_result
    if best is not None and best.runtime_us:
        ref = f" vs the reference's {result.ref_eager_us:.1f} µs" if result.ref_eager_us else ""
        line += f" ({best.runtime_us:.1f} µs{ref})"
        if best.sol_us:
            line += (
                f"; speed-of-light floor {best.sol_us:.1f} µs, which the best reaches to "
                f"{best.sol_us / best.runtime_us:.0%}"
            )
    return line + "."


def _margin(err: float | None, atol: float, correct: bool) -> str:
    if err is None or atol <= 0:
        return ""
    if correct:
        return f"max abs err {err:.2g} = {err / atol:.0%} of atol {atol:g}"
    return f"max abs err {err:.3g} = {err / atol:.3g}x atol {atol:g}"


def _feedback(last: StepOutcome, result: RunResult, on_cpu: bool) -> str:
    r = last.result
    if last.error_kind is not None:
        extra = ""
        if r is not None and r.max_abs_err is not None:
            extra = f" ({_margin(r.max_abs_err, r.atol, False)}, max rel err {r.max_rel_err or 0:.3g})"
        excerpt = tidy_excerpt(last.error_excerpt[-_EXCERPT_CHARS:])
        detail = f"\n{excerpt}" if excerpt else ""
        return f"Last candidate (step {last.step}) failed: {last.error_kind.value}{extra}{detail}"
    margin = _margin(r.max_abs_err, r.atol, True) if r is not None else ""
    head = f"Last candidate (step {last.step}) correct" + (f" ({margin})" if margin else "")
    if on_cpu or r is None or r.timing_on_cpu:
        return head + "; on the CPU its speed is not measured."
    if r.task_degenerate:
        return head + "; the task's output is degenerate at this tolerance, so its speed-up is not counted."
    if r.runtime_us is None or not last.speedup_x:
        return head + "."
    speed = f": {r.runtime_us:.1f} µs = {last.speedup_x:.2f}x over eager"
    if last.status == "improved":
        return head + speed + ", kept as the new best."
    return head + speed + f", not faster than the best ({result.best_speedup_x:.2f}x): not kept."


def _trajectory_line(s: StepOutcome, on_cpu: bool) -> str:
    if s.status == "failed":
        outcome = "failed" + (f" ({s.error_kind.value})" if s.error_kind else "")
    elif on_cpu:
        outcome = "correct"
    else:
        speed = f", {s.speedup_x:.2f}x" if s.speedup_x else ""
        outcome = ("faster, kept" if s.status == "improved" else "correct, not faster") + speed
    return f"  {s.step}: {s.global_key} / {s.local_key or '-'} -> {outcome}"


# --------------------------------------------------------------------------------------------- memory context
def memory_context(
    local: LocalWithEvidence | None,
    examples: Sequence[AttemptExample],
    *,
    alternatives: Sequence[LocalWithEvidence] = (),
    gpu_arch: str = "",
    foreign_weight: float = 0.5,
    flat: bool = False,
) -> str:
    """The offered strategies' memory: the chosen one's pattern, checks, risks and evidence, one worked
    example and what went wrong with it, then the other strategies of the direction, each in one whole
    sentence with its evidence. With `flat` (the ablation) there is no hierarchy: only the retrieved past
    attempts are shown."""
    if flat or local is None:
        return _flat(examples)
    s = local.strategy
    parts = [f"## Strategy `{s.key}`: {s.name}", "", s.pattern.strip(), ""]
    parts += [f"{label}: {'; '.join(items)}" for label, items in _descriptions(s) if items]
    parts += evidence_text(local, gpu_arch, foreign_weight)
    parts += _examples(examples, gpu_arch)
    if alternatives:
        parts += [
            "",
            "## Other strategies of this direction (most relevant first; you may apply one instead)",
        ]
        for alt in alternatives:
            evidence = " ".join(evidence_text(alt, gpu_arch, foreign_weight))
            line = f"- `{alt.strategy.key}` ({alt.strategy.name}): {first_sentence(alt.strategy.pattern)}"
            parts.append(line + (f" {evidence}" if evidence else ""))
    return "\n".join(parts).strip()


def _descriptions(s: LocalStrategy) -> list[tuple[str, list[str]]]:
    return [("Applies when", s.applicable_when), ("Check", s.checks), ("Risks", s.risks)]


def evidence_text(c: LocalWithEvidence, gpu_arch: str, foreign_weight: float) -> list[str]:
    """Lines on what the memory's GPU attempts of a strategy came to: this GPU's, then other GPUs' (labelled,
    with their weight in the choice). No line for a strategy without evidence."""
    if not c.by_arch:
        if not c.attempts:
            return []
        return [
            f"Evidence (GPU runs): {c.attempts} attempts, {c.positives} of them faster than the run's best."
        ]
    here = [a for a in c.by_arch if a.gpu_arch == gpu_arch and a.attempts]
    others = [a for a in c.by_arch if a.gpu_arch != gpu_arch and a.attempts]
    if gpu_arch in _NOT_GPU_ARCHS:
        if not others:
            return []
        where = (
            "this run is on the CPU and adds none" if gpu_arch == "cpu" else "this run's GPU is not known yet"
        )
        return [f"Evidence from GPU runs ({where}): " + "; ".join(_arch_text(a, True) for a in others) + "."]
    lines = [f"Evidence on this GPU ({gpu_arch}): {_arch_text(here[0], False)}."] if here else []
    if others:
        lines.append(
            f"Evidence from other GPUs (weighted {foreign_weight:g} in the choice): "
            + "; ".join(_arch_text(a, True) for a in others)
            + "."
        )
    return lines


def _arch_text(a: ArchEvidence, named: bool) -> str:
    counts = [
        f"{n} {label}"
        for n, label in ((a.improved, "faster"), (a.correct, "correct but not faster"), (a.failed, "failed"))
        if n
    ]
    text = f"{a.attempts} attempt{'s' if a.attempts != 1 else ''} ({', '.join(counts)})"
    if a.improved or a.correct:  # a mean gain over failures only says nothing the counts do not
        text += f", mean gain {a.gain_sum / a.attempts:+.3f} ln-speed-up per attempt"
    return f"{a.gpu_arch}: {text}" if named else text


def _examples(examples: Sequence[AttemptExample], gpu_arch: str) -> list[str]:
    """One worked example (this GPU's first) as its kernel part, and one line on an attempt that went
    wrong."""
    positives = sorted((e for e in examples if e.positive), key=lambda e: e.gpu_arch != gpu_arch)
    negatives = [e for e in examples if not e.positive]
    out: list[str] = []
    worked = positives[0] if positives else None
    if worked is not None and worked.source:
        ex = worked
        source = worked.source
        speed = f" {ex.speedup_x:.2f}x over eager" if ex.speedup_x else ""
        out += [
            "",
            f"Worked example ({ex.task_key}{speed} on {ex.gpu_arch or 'a GPU'}; its kernel part, written for "
            "that task's shapes):",
            f"```python\n{kernel_excerpt(source, _EXAMPLE_CHARS)}\n```",
        ]
    if negatives:
        ex = negatives[0]
        what = (
            "correct but not faster"
            if ex.status != "failed"
            else "failed" + (f" ({ex.error_kind})" if ex.error_kind else "")
        )
        out += ["", f"Seen with this strategy: {ex.task_key} on {ex.gpu_arch or 'a GPU'}: {what}."]
    return out


def _flat(examples: Sequence[AttemptExample]) -> str:
    """The `flat` ablation's memory: the retrieved past attempts, the worked ones with their kernel part."""
    parts: list[str] = []
    shown = 0
    for ex in examples:
        speed = f" {ex.speedup_x:.2f}x" if ex.speedup_x else ""
        what = "worked" if ex.positive else ("correct but not faster" if ex.status != "failed" else "failed")
        head = f"Past attempt ({what}): {ex.task_key} via {ex.local_key or ex.global_key}{speed}"
        parts.append(
            head + f" on {ex.gpu_arch or 'a GPU'}" + (f" ({ex.error_kind})" if ex.error_kind else "")
        )
        if ex.positive and ex.source and shown < 2:
            parts.append(f"```python\n{kernel_excerpt(ex.source, _EXAMPLE_CHARS)}\n```")
            shown += 1
    return "\n".join(parts)
