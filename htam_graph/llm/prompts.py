"""Render a `GenerationRequest` into the three parts of an LLM prompt.

The parts, in the order they are sent (so that provider prompt caches see a stable prefix):
1. `system`: the role, the rules (one library policy, the precision policy), where the kernel runs (the
   device facts: the CPU interpreter, or the GPU, its versions, the inputs, the reference's time, floor and
   kernels) and the task's reference: all stable for a run;
2. `memory`: the offered strategies' memory context (stable while the direction and its evidence are);
3. `user`: the step message (current best, feedback with the last candidate's code, the best's profile,
   direction, which strategy to apply).

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
from htam_graph.llm.device_text import best_section, device_section
from htam_graph.model import GenerationRequest, Language, PrecisionPolicy
from htam_graph.state import reference_as_candidate

_TEMPLATE_FILES = ("system.md", "step.md", "memory.md", "lang_triton.md", "lang_cuda.md")

_LANGUAGE_NAMES = {Language.TRITON: "Triton", Language.CUDA: "CUDA C++"}

_PRECISION_RULES = {
    PrecisionPolicy.FP32_STRICT: (
        "Precision policy fp32-strict: compute and accumulate in fp32. No fp16/bf16 casts, no TF32 "
        '(in Triton pass `input_precision="ieee"` to `tl.dot`, or `"tf32x3"`: the error-compensated 3xTF32 '
        'that keeps fp32 accuracy on tensor cores; a plain `"tf32"` dot is rejected, also on operands split by '
        "hand into hi/lo parts; in CUDA use fp32 FMA, not TF32 tensor-core paths), no "
        "approximate math that changes results beyond the tolerance."
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
    """The role, the rules, the device and the task; stable for a run (prompt caches cover it)."""
    lang_file = "lang_triton.md" if request.language == Language.TRITON else "lang_cuda.md"
    return tpl.render(
        "system.md",
        language_name=_LANGUAGE_NAMES[request.language],
        language_rules=tpl.texts[lang_file].rstrip("\n"),
        precision_rules=_PRECISION_RULES[request.precision_policy],
        tolerance=_TOLERANCES[request.precision_policy],
        device_section=device_section(request),
        task_key=request.task.key,
        task_name=request.task.name,
        op_tags=", ".join(request.task.op_tags) or "none",
        task_source=request.task.source.strip("\n"),
    ).strip()


def render_memory(request: GenerationRequest, tpl: PromptTemplates) -> str:
    """The offered strategies' memory block, or "" when the request carries none."""
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
    profile = best_section(request)
    return tpl.render(
        "step.md",
        step=str(request.step),
        task_key=request.task.key,
        base_block=_base_block(request),
        state_summary=request.state_summary.strip() or "No feedback yet: this is the first attempt.",
        best_profile=f"\n{profile}\n" if profile else "",
        direction_name=direction.name,
        direction_key=direction.key,
        direction_intent=direction.intent.strip(),
        direction_details=details,
        strategy_block=_strategy_block(request),
    ).strip()


def _base_block(request: GenerationRequest) -> str:
    """The current best source, or one line when it is still the reference (shown once, in the task)."""
    if request.base_source.strip() == reference_as_candidate(request.task.source).strip():
        return "The reference itself (the task's `Model` above): no kernel has been kept yet."
    return f"```python\n{request.base_source.strip(chr(10))}\n```"


def _strategy_block(request: GenerationRequest) -> str:
    """Which strategy to apply; its description is in the memory block (never repeated here)."""
    none = (
        f"If {'none of them applies' if request.alternatives else 'it does not apply'} to this task, write "
        "`STRATEGY: none` and make the change you judge best within the direction."
    )
    s = request.strategy
    if s is None:
        return (
            "No specific strategy: choose the most promising change within the direction above and write "
            "`STRATEGY: none`."
        )
    where = (
        "described in the memory above" if request.memory_context.strip() else f"pattern: {s.pattern.strip()}"
    )
    text = f"Apply **{s.name}** (`{s.key}`), {where}."
    if request.alternatives:
        keys = ", ".join(f"`{a.key}`" for a in request.alternatives)
        text += f" Or apply one of the other strategies listed there ({keys}) if the feedback makes it more promising."
    return f"{text} {none}"
