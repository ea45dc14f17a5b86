"""The offline rule generator: the `Generator` port over the recipe library (no LLM, no network, no cost).

The loop picks a Local strategy of the seed memory; if a recipe implements that key and applies to the task,
the reply carries a standalone Triton `ModelNew`. Otherwise the reply has no source and says why (the loop
records it as `no_code`), so `recipes_for` should be used to restrict the choice to executable strategies.
"""

from __future__ import annotations

import functools
import logging

from htam_graph.model import (
    Device,
    EvalResult,
    GenerationReply,
    GenerationRequest,
    Language,
    PrecisionPolicy,
    Task,
    Usage,
)
from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.analysis.skeleton import model_skeleton
from htam_graph.rules.autotune import Autotuner, show_config
from htam_graph.rules.base import Applicability, NotApplicable, Recipe, TaskView
from htam_graph.rules.recipes import TuningRecipe, default_recipes

log = logging.getLogger(__name__)

__all__ = ["RulesGenerator", "recipes_for", "applies", "default_generator", "task_view"]


def task_view(task: Task, precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT) -> TaskView:
    """Analyse a task once (cached by source), as seen under a precision policy. Raises NotApplicable."""
    return TaskView(task.key, analyse_source(task.source), model_skeleton(task.source), precision_policy)


class RulesGenerator:
    """`htam_graph.ports.Generator` implemented by executable recipes (and an `EvaluationObserver`: the loop
    hands it the measured result of each of its kernels, which fills the autotune cache)."""

    name = "rules"

    def __init__(
        self, recipes: dict[str, Recipe | TuningRecipe] | None = None, autotuner: Autotuner | None = None
    ) -> None:
        self._recipes = recipes if recipes is not None else default_recipes()
        # Without a cache directory the tuner still remembers, in this process, what it proposed and measured.
        self.autotuner = autotuner if autotuner is not None else Autotuner()

    @property
    def keys(self) -> list[str]:
        """Every local key a recipe implements."""
        return list(self._recipes)

    def applies(
        self, local_key: str, task: Task, precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT
    ) -> Applicability:
        """Whether the recipe for `local_key` applies to `task` (falsy with the reason when not)."""
        recipe = self._recipes.get(local_key)
        if recipe is None:
            return Applicability.no(f"no rule recipe implements {local_key}")
        try:
            view = task_view(task, precision_policy)
        except NotApplicable as e:
            return Applicability.no(f"cannot analyse {task.key}: {e}")
        return recipe.check(view)

    def recipes_for(
        self,
        task: Task,
        device: Device = "cuda",
        language: Language = Language.TRITON,
        precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT,
    ) -> list[str]:
        """Local keys with a recipe that applies to `task` (the same code serves both devices)."""
        if language is not Language.TRITON:
            return []
        return [key for key in self._recipes if self.applies(key, task, precision_policy)]

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """A ModelNew source for the request's strategy, or no source and the reason."""
        if request.language is not Language.TRITON:
            return _no_code(f"the rule recipes write Triton only, not {request.language.value}")
        key = request.strategy.key if request.strategy is not None else None
        try:
            view = task_view(request.task, request.precision_policy)
            if key is None:
                key = self._pick_for_direction(request.direction.key, view)
            recipe = self._recipes.get(key)
            if recipe is None:
                return _no_code(f"no rule recipe implements {key}")
            verdict = recipe.check(view)
            if not verdict:
                return _no_code(f"{key} does not apply to {request.task.key}: {verdict.reason}")
            source = self._emit(recipe, view, request)
        except NotApplicable as e:
            return _no_code(f"{key or request.direction.key} on {request.task.key}: {e}")
        except (
            Exception
        ) as e:  # a recipe's own defect: no code for this strategy on these inputs, not a crash
            log.exception("rules: %s raised on %s", key, request.task.key)
            return _no_code(f"{key} raised on {request.task.key}: {type(e).__name__}: {e}")
        log.info("rules: %s wrote %d lines for %s", key, source.count("\n"), request.task.key)
        return GenerationReply(source=source, raw_text=source, model=f"rules/{key}", usage=Usage())

    def observe(self, request: GenerationRequest, reply: GenerationReply, result: EvalResult | None) -> None:
        """The loop's evaluation of one of these kernels: its runtime goes into the autotune cache."""
        self.autotuner.observe(request, reply, result)

    def _pick_for_direction(self, direction_key: str, view: TaskView) -> str:
        for key, recipe in self._recipes.items():
            if key.startswith(direction_key + ".") and recipe.check(view):
                return key
        raise NotApplicable(f"no rule recipe under direction {direction_key} applies")

    def _emit(self, recipe: Recipe | TuningRecipe, view: TaskView, request: GenerationRequest) -> str:
        if isinstance(recipe, TuningRecipe):
            return self._tune(recipe, view, request)
        config, note = self.autotuner.start_config(request, recipe)
        return _with_note(recipe.emit(view, config), note)

    def _tune(self, recipe: TuningRecipe, view: TaskView, request: GenerationRequest) -> str:
        """The base kernel re-emitted with the next unmeasured configuration of the tuning recipe's ladder."""
        base, current = recipe.base_for(view, request.base_source)
        ladder = recipe.ladders[base.key]
        config = self.autotuner.propose(request, base.key, ladder, current)
        what = "the next configuration not yet measured for this task, shape and device"
        if config is None:
            config = self.autotuner.exhausted(request, base.key, ladder, current)
            what = "every configuration is measured or proposed: the fastest correct one measured"
        if config is None:
            raise NotApplicable(
                f"{recipe.key}: all {len(ladder)} configurations of {base.key} for this task, "
                "shape and device "
                "are measured or already proposed, and the fastest correct one measured is the "
                "current kernel "
                "(or none was measured correct)"
            )
        note = f"Tuned by {recipe.key}: {show_config(current)} -> {show_config(config)} ({what})."
        return _with_note(base.emit(view, config), note)


def _with_note(source: str, note: str) -> str:
    """The note as a comment line right after the machine-readable header line."""
    if not note:
        return source
    first, _, rest = source.partition("\n")
    return f"{first}\n# {note}\n{rest}"


def _no_code(reason: str) -> GenerationReply:
    return GenerationReply(source=None, error=reason, model="rules")


@functools.cache
def default_generator() -> RulesGenerator:
    """The shared generator over the default recipe library."""
    return RulesGenerator()


def recipes_for(
    task: Task,
    device: Device = "cuda",
    language: Language = Language.TRITON,
    precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT,
) -> list[str]:
    """Local keys with an applicable recipe for `task` (see `RulesGenerator.recipes_for`)."""
    return default_generator().recipes_for(task, device, language, precision_policy)


def applies(
    local_key: str, task: Task, precision_policy: PrecisionPolicy = PrecisionPolicy.FP32_STRICT
) -> Applicability:
    (
        """Whether `local_key`'s recipe applies to `task` under a precision policy; falsy with """
        """`.reason` when not."""
    )
    return default_generator().applies(local_key, task, precision_policy)
