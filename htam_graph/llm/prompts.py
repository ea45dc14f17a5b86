"""Render a `GenerationRequest` into the three parts of an LLM prompt.

The parts, in the order they are sent (so that provider prompt caches see a stable prefix):
1. `system`: the role and the task rules (stable for a run: language, precision policy, device);
2. `memory`: the chosen strategy's memory context (large and stable across steps of that strategy);
3. `user`: the step message (task source, current best, feedback, direction, strategy).

Templates are Markdown files in `htam_graph/prompts/` rendered with `string.Template` (`$name`
placeholders, `$$` for a literal dollar). A directory given to `load_templates` overrides any of them.
"""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from string import Template

from htam_graph.errors import ConfigError
from htam_graph.model import GenerationRequest, Language, LocalStrategy, PrecisionPolicy

_TEMPLATE_FILES = ("system.md", "step.md", "memory.md", "lang_triton.md", "lang_cuda.md")

_LANGUAGE_NAMES = {Language.TRITON: "Triton", Language.CUDA: "CUDA C++"}

_PRECISION_RULES = {
    PrecisionPolicy.FP32_STRICT: (
        "Precision policy fp32-strict: compute and accumulate in fp32. No fp16/bf16 casts, no TF32 "
        '(in Triton pass `input_precision="ieee"` to `tl.dot`; in CUDA use fp32 FMA, not TF32 tensor-core '
        "paths), no approximate math that changes results beyond the tolerance."
    ),
    PrecisionPolicy.TF32: (
        "Precision policy tf32: TF32 tensor-core matmul/convolution is allowed (inputs rounded to TF32, "
        "accumulation in fp32); no fp16/bf16 compute. Inputs and outputs stay fp32."
    ),
    PrecisionPolicy.BF16: (
        "Precision policy bf16: bf16/fp16 compute is allowed with fp32 accumulation. Inputs and outputs "
        "keep the reference dtypes (cast inside the kernel)."
    ),
}

_TOLERANCES = {
    PrecisionPolicy.FP32_STRICT: "rtol = atol = 1e-4 against the fp32 reference",
    PrecisionPolicy.TF32: "the harness's looser tolerance for the tf32 track",
    PrecisionPolicy.BF16: "the harness's looser tolerance for the bf16 track",
}


@dataclass(frozen=True)
class PromptTemplates:
    """The template texts, keyed by file name."""

    texts: dict[str, str]

    def render(self, name: str, **values: str) -> str:
        """Render template `name`; a placeholder without a value is an error (never sent half-filled)."""
        try:
            return Template(self.texts[name]).substitute(values)
        except (KeyError, ValueError) as e:
            raise ConfigError(f"prompt template {name}: bad or unfilled placeholder ({e})") from e


@dataclass(frozen=True)
class RenderedPrompt:
    """A request as prompt text. `memory` may be empty (then no memory block is sent)."""

    system: str
    memory: str
    user: str


@functools.lru_cache(maxsize=1)
def _packaged_texts() -> dict[str, str]:
    folder = importlib.resources.files("htam_graph").joinpath("prompts")
    return {name: folder.joinpath(name).read_text(encoding="utf-8") for name in _TEMPLATE_FILES}


def load_templates(directory: Path | None = None) -> PromptTemplates:
    """The packaged templates, each replaced by the same-named file in `directory` when it has one."""
    texts = dict(_packaged_texts())
    if directory is not None:
        if not directory.is_dir():
            raise ConfigError(f"prompt template directory {directory} does not exist")
        for name in _TEMPLATE_FILES:
            override = directory / name
            if override.is_file():
                texts[name] = override.read_text(encoding="utf-8")
    return PromptTemplates(texts)


def render_prompt(request: GenerationRequest, templates: PromptTemplates | None = None) -> RenderedPrompt:
    """Render `request` into system, memory and user text."""
    tpl = templates or load_templates()
    return RenderedPrompt(
        system=render_system(request, tpl),
        memory=render_memory(request, tpl),
        user=render_step(request, tpl),
    )


def render_system(request: GenerationRequest, tpl: PromptTemplates) -> str:
    """The role and rules; depends only on language, precision policy and device (stable for a run)."""
    lang_file = "lang_triton.md" if request.language == Language.TRITON else "lang_cuda.md"
    return tpl.render(
        "system.md",
        language_name=_LANGUAGE_NAMES[request.language],
        language_rules=tpl.texts[lang_file].rstrip("\n"),
        precision_rules=_PRECISION_RULES[request.precision_policy],
        tolerance=_TOLERANCES[request.precision_policy],
        device=request.device,
    ).strip()


def render_memory(request: GenerationRequest, tpl: PromptTemplates) -> str:
    """The strategy's memory block, or "" when the request carries none."""
    if not request.memory_context.strip():
        return ""
    return tpl.render("memory.md", memory_context=request.memory_context.strip()).strip()


def render_step(request: GenerationRequest, tpl: PromptTemplates) -> str:
    """The per-step message."""
    direction = request.direction
    details = "".join(
        f"{label}: {'; '.join(items)}\n"
        for label, items in (("Goals", direction.goals), ("Risks", direction.risks))
        if items
    )
    return tpl.render(
        "step.md",
        step=str(request.step),
        task_key=request.task.key,
        task_name=request.task.name,
        op_tags=", ".join(request.task.op_tags) or "none",
        language_name=_LANGUAGE_NAMES[request.language],
        task_source=request.task.source.strip("\n"),
        base_source=request.base_source.strip("\n"),
        state_summary=request.state_summary.strip() or "No feedback yet: this is the first attempt.",
        direction_name=direction.name,
        direction_key=direction.key,
        direction_intent=direction.intent.strip(),
        direction_details=details,
        strategy_block=_strategy_block(request.strategy) + _alternatives_block(request),
    ).strip()


def _alternatives_block(request: GenerationRequest) -> str:
    """The other strategies of the direction, for the model to choose from (the local choice is the LLM's)."""
    if not request.alternatives:
        return ""
    lines = [
        "",
        "",
        "Other strategies under this direction (apply one of these instead if the feedback makes it more "
        "promising):",
    ]
    for alt in request.alternatives:
        first = alt.pattern.strip().split(". ")[0].rstrip(".")
        lines.append(f"- `{alt.key}` ({alt.name}): {first}.")
    lines.append("")
    lines.append("Begin your answer with one line `STRATEGY: <key>` naming the strategy you apply.")
    return "\n".join(lines)


def _strategy_block(strategy: LocalStrategy | None) -> str:
    if strategy is None:
        return "No specific strategy: choose the most promising change within the direction above."
    lines = [f"**{strategy.name}** (`{strategy.key}`): {strategy.pattern.strip()}"]
    if strategy.applicable_when:
        lines.append("Applies when: " + "; ".join(strategy.applicable_when))
    if strategy.checks:
        lines.append("Check: " + "; ".join(strategy.checks))
    if strategy.risks:
        lines.append("Risks: " + "; ".join(strategy.risks))
    return "\n".join(lines)
