"""Offline autotuning of rule kernels: measure a recipe's launch-config ladder once per (kernel, shape, GPU).

Design (why not `triton.autotune` in the generated file): a generated file must stand alone and give the same
results wherever it is kept, so the choice is made HERE, at generation time, and written into the file as its
module-level launch constants (`BLOCK_*`, `NUM_WARPS_*`), exactly like any other `KernelConfig`. The file never
reads the cache. The cache only remembers which ladder configuration won, keyed by (recipe key, shape signature
of the task's inputs, GPU name), in a JSON file under `~/.htam-graph/autotune/`:

- a cache entry can only select a configuration from the recipe's own ladder (`htam_graph.rules.recipes.tuning`);
  anything else in the file (hand edits, an old ladder) is ignored, so a lookup changes launch parameters only;
- on the CPU / under TRITON_INTERPRET=1 there is nothing to measure: `autotune` returns the recipe's default
  configuration without touching the cache;
- measuring is the caller's job (`measure(source) -> ms | None`: the rules package imports no runtime); a
  configuration whose candidate is not correct must be reported as None and is never chosen.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from htam_graph.rules.base import KernelConfig, Recipe, TaskView

log = logging.getLogger(__name__)

__all__ = ["AutotuneCache", "TuneKey", "autotune", "default_cache_dir", "ladder_for", "shape_signature"]

Measure = Callable[[str], float | None]


def default_cache_dir(htam_home: Path | None = None) -> Path:
    """`<htam_home>/autotune` (default `~/.htam-graph/autotune`)."""
    return (htam_home if htam_home is not None else Path.home() / ".htam-graph") / "autotune"


@dataclass(frozen=True)
class TuneKey:
    """What a measurement is valid for."""

    recipe: str
    shapes: str
    gpu: str

    def text(self) -> str:
        return f"{self.recipe}|{self.shapes}|{self.gpu}"


def shape_signature(view: TaskView) -> str:
    """The task's forward inputs as `name:dtype:AxBxC;...` (the sizes a launch configuration depends on)."""
    return ";".join(
        f"{i.name}:{i.dtype.removeprefix('torch.')}:{'x'.join(map(str, i.shape)) or 'scalar'}"
        for i in view.graph.inputs
    )


def ladder_for(recipe_key: str) -> tuple[KernelConfig, ...]:
    """The configurations `parallelism.block_size_tuning` explores for a recipe (empty when it has none)."""
    from htam_graph.rules.recipes import base_recipes
    from htam_graph.rules.recipes.tuning import BLOCK_SIZE_TUNING, tuning_recipes

    for tuner in tuning_recipes(base_recipes()):
        if tuner.key == BLOCK_SIZE_TUNING:
            return tuner.ladders.get(recipe_key, ())
    return ()


class AutotuneCache:
    """One JSON file of {key text: {"config": KernelConfig json, "ms": {config text: ms}}}."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "rules_autotune.json"

    def _load(self) -> dict[str, dict[str, object]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("autotune cache %s unreadable (%s): ignoring it", self.path, e)
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: TuneKey, ladder: tuple[KernelConfig, ...]) -> KernelConfig | None:
        """The cached winner, only if it is one of `ladder` (anything else is ignored)."""
        entry = self._load().get(key.text())
        if not isinstance(entry, dict):
            return None
        try:
            config = KernelConfig.from_json(entry.get("config"))
        except (ValueError, TypeError):
            return None
        return config if config in ladder else None

    def put(self, key: TuneKey, config: KernelConfig, timings: dict[str, float]) -> None:
        """Record a winner (atomic replace: concurrent writers lose entries, never corrupt the file)."""
        data = self._load()
        data[key.text()] = {"config": config.to_json(), "ms": timings}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def autotune(
    view: TaskView,
    recipe: Recipe,
    *,
    device: str,
    gpu_name: str,
    measure: Measure,
    cache: AutotuneCache,
) -> KernelConfig:
    """The fastest correct ladder configuration of `recipe` for this task on this GPU (measured once, cached).

    CPU / interpreter: the recipe's default configuration, nothing measured or cached. When every configuration
    fails (`measure` returned None for all), the default configuration is returned and nothing is cached.
    """
    ladder = ladder_for(recipe.key)
    if device != "cuda" or not ladder:
        return recipe.default_config
    key = TuneKey(recipe.key, shape_signature(view), gpu_name)
    cached = cache.get(key, ladder)
    if cached is not None:
        return cached
    timings: dict[str, float] = {}
    best: tuple[float, KernelConfig] | None = None
    for config in ladder:
        ms = measure(recipe.emit(view, config))
        if ms is None:
            log.info("autotune %s: %s failed or was not correct", recipe.key, config)
            continue
        timings[json.dumps(config.to_json(), sort_keys=True)] = ms
        if best is None or ms < best[0]:
            best = (ms, config)
    if best is None:
        return recipe.default_config
    cache.put(key, best[1], timings)
    return best[1]
