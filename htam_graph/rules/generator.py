"""The offline rule generator: the `Generator` port over the recipe library (no LLM, no network, no cost).

The loop picks a Local strategy of the seed memory; if a recipe implements that key and applies to the task,
the reply carries a standalone Triton `ModelNew`. Otherwise the reply has no source and says why (the loop
records it as `no_code`), so `recipes_for` should be used to restrict the choice to executable strategies.
"""

from __future__ import annotations

import functools
import logging

from htam_graph.model import Device, GenerationReply, GenerationRequest, Language, Task, Usage
from htam_graph.rules.analysis import analyse_source
from htam_graph.rules.base import Applicability, NotApplicable, Recipe, TaskView
from htam_graph.rules.recipes import TuningRecipe, default_recipes
from htam_graph.rules.skeleton import model_skeleton

log = logging.getLogger(__name__)

__all__ = ["RulesGenerator", "recipes_for", "applies", "default_generator", "task_view"]


def task_view(task: Task) -> TaskView:
    """Analyse a task once (cached by source). Raises NotApplicable."""
    return TaskView(task.key, analyse_source(task.source), model_skeleton(task.source))


class RulesGenerator:
    """`htam_graph.ports.Generator` implemented by executable recipes."""

    name = "rules"

    def __init__(self, recipes: dict[str, Recipe | TuningRecipe] | None = None) -> None:
        self._recipes = recipes if recipes is not None else default_recipes()

    @property
    def keys(self) -> list[str]:
        """Every local key a recipe implements."""
        return list(self._recipes)

    def applies(self, local_key: str, task: Task) -> Applicability:
        """Whether the recipe for `local_key` applies to `task` (falsy with the reason when not)."""
        recipe = self._recipes.get(local_key)
        if recipe is None:
            return Applicability.no(f"no rule recipe implements {local_key}")
        try:
            view = task_view(task)
        except NotApplicable as e:
            return Applicability.no(f"cannot analyse {task.key}: {e}")
        return recipe.check(view)

    def recipes_for(
        self, task: Task, device: Device = "cuda", language: Language = Language.TRITON
    ) -> list[str]:
        """Local keys with a recipe that applies to `task` (the same code serves both devices)."""
        if language is not Language.TRITON:
            return []
        return [key for key in self._recipes if self.applies(key, task)]

    def generate(self, request: GenerationRequest) -> GenerationReply:
        """A ModelNew source for the request's strategy, or no source and the reason."""
        if request.language is not Language.TRITON:
            return _no_code(f"the rule recipes write Triton only, not {request.language.value}")
        key = request.strategy.key if request.strategy is not None else None
        try:
            view = task_view(request.task)
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
        log.info("rules: %s wrote %d lines for %s", key, source.count("\n"), request.task.key)
        return GenerationReply(source=source, raw_text=source, model=f"rules/{key}", usage=Usage())

    def _pick_for_direction(self, direction_key: str, view: TaskView) -> str:
        for key, recipe in self._recipes.items():
            if key.startswith(direction_key + ".") and recipe.check(view):
                return key
        raise NotApplicable(f"no rule recipe under direction {direction_key} applies")

    @staticmethod
    def _emit(recipe: Recipe | TuningRecipe, view: TaskView, request: GenerationRequest) -> str:
        if isinstance(recipe, TuningRecipe):
            tuned = recipe.choose(view, request.base_source, request.step, request.seed)
            source = tuned.base.emit(view, tuned.config)
            first, _, rest = source.partition("\n")
            return f"{first}\n# {tuned.note}\n{rest}"
        return recipe.emit(view, recipe.default_config)


def _no_code(reason: str) -> GenerationReply:
    return GenerationReply(source=None, error=reason, model="rules")


@functools.cache
def default_generator() -> RulesGenerator:
    """The shared generator over the default recipe library."""
    return RulesGenerator()


def recipes_for(task: Task, device: Device = "cuda", language: Language = Language.TRITON) -> list[str]:
    """Local keys with an applicable recipe for `task` (see `RulesGenerator.recipes_for`)."""
    return default_generator().recipes_for(task, device, language)


def applies(local_key: str, task: Task) -> Applicability:
    """Whether `local_key`'s recipe applies to `task`; falsy with `.reason` when not."""
    return default_generator().applies(local_key, task)
