"""Autotuning of rule kernels inside the loop: a small launch-configuration space per kernel, a measured
cache.

How it works (nothing here measures anything, and no timing is ever invented):
- the *space* of a base recipe's kernel is the union of the tuning recipes' ladders for it
  (`htam_graph.rules.recipes.tuning`): BLOCK / num_warps / the register-row limit / vector hints;
- a tuning step (`parallelism.block_size_tuning`, `memory_access.vectorized_loads`) proposes the first
  configuration of its ladder that has not been measured (nor proposed earlier in this process) for the key;
- the loop evaluates the candidate with the hardened runtime as usual and hands the result back through
  `RulesGenerator.observe`; the median runtime of a *correct* candidate is recorded under
  (task key, shape variant, GPU name, base recipe); an incorrect one is recorded as failed and never chosen;
- a base recipe's first emission on a (task, shape, GPU) that has measurements starts from the fastest correct
  measured configuration instead of its default one.

The cache is a small JSON file under the htam home (`<htam_home>/autotune/rules_autotune.json`), not graph
nodes: launch parameters are machine-local facts of one GPU and one task size, the rules adapter cannot reach
the store (layering), and the evidence behind every entry is already in the graph (each tuning step is an
Attempt with its source and runtime), so the file is a rebuildable index. The generated file never reads the
cache: the chosen configuration is written into it as module constants, so a kept kernel stands alone.
CPU (Triton interpreter) measurements are kept under the device label "cpu" and never mix with GPU entries.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from htam_graph.model import ErrorKind, EvalResult, GenerationReply, GenerationRequest
from htam_graph.rules.base import KernelConfig, Recipe, parse_header

log = logging.getLogger(__name__)

__all__ = [
    "CPU_DEVICE",
    "AutotuneCache",
    "Autotuner",
    "Measurement",
    "TuneKey",
    "config_text",
    "default_cache_dir",
    "show_config",
    "space_for",
]

CPU_DEVICE = "cpu"  # the device label of interpreter measurements (the runtime reports no GPU name there)
_MAX_RUNS = 5  # medians kept per configuration (the recorded value is their median)


def default_cache_dir(htam_home: Path | None = None) -> Path:
    """`<htam_home>/autotune` (default `~/.htam-graph/autotune`)."""
    return (htam_home if htam_home is not None else Path.home() / ".htam-graph") / "autotune"


@dataclass(frozen=True)
class TuneKey:
    """What a measurement is valid for: one task at one shape variant on one device, one base kernel."""

    task: str
    shape: str
    device: str  # the GPU name the runtime reported, or CPU_DEVICE
    recipe: str  # the base recipe whose kernel is launched with the configuration

    def text(self) -> str:
        return f"{self.task}|{self.shape}|{self.device}|{self.recipe}"


@dataclass(frozen=True)
class Measurement:
    """What the loop's evaluations said about one configuration under one key."""

    runtime_us: float | None  # median over the recorded runs' medians; None when it never ran correctly
    runs: int
    error: str = ""  # the last failure kind when it was not correct

    @property
    def ok(self) -> bool:
        return self.runtime_us is not None


def config_text(config: KernelConfig) -> str:
    """The canonical JSON of a configuration (the cache's inner key)."""
    return json.dumps(config.to_json(), sort_keys=True)


@functools.cache
def space_for(recipe_key: str) -> tuple[KernelConfig, ...]:
    """The base recipe's default configuration, then every configuration the tuning recipes explore for it
    (ladder order, duplicates dropped); empty when no tuning recipe covers the recipe."""
    from htam_graph.rules.recipes import base_recipes
    from htam_graph.rules.recipes.tuning import tuning_recipes

    bases = base_recipes()
    seen: dict[KernelConfig, None] = {}
    if recipe_key in bases and any(recipe_key in t.ladders for t in tuning_recipes(bases)):
        seen[bases[recipe_key].default_config] = None
    for tuner in tuning_recipes(bases):
        seen.update(dict.fromkeys(tuner.ladders.get(recipe_key, ())))
    return tuple(seen)


class AutotuneCache:
    """{key text: {config text: {"us": [medians], "error": str}}} in one JSON file; `directory=None`: in
    memory.

    Writes are read-modify-write under an advisory file lock and an atomic replace, so concurrent runs on one
    machine neither corrupt the file nor lose each other's entries.
    """

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / "rules_autotune.json" if directory is not None else None
        self._memory: dict[str, dict[str, dict[str, object]]] = {}

    def _load(self) -> dict[str, dict[str, dict[str, object]]]:
        if self.path is None:
            return self._memory
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("autotune cache %s unreadable (%s): ignoring it", self.path, e)
            return {}
        return data if isinstance(data, dict) else {}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.path is None:
            yield
            return
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def measurements(self, key: TuneKey, space: tuple[KernelConfig, ...]) -> dict[KernelConfig, Measurement]:
        (
            """The recorded configurations of `key` that belong to `space` (anything else in the file """
            """is ignored)."""
        )
        entry = self._load().get(key.text())
        out: dict[KernelConfig, Measurement] = {}
        if not isinstance(entry, dict):
            return out
        by_text = {config_text(c): c for c in space}
        for text, value in entry.items():
            config = by_text.get(text)
            if config is None or not isinstance(value, dict):
                continue
            runs = _runs(value)
            error = str(value.get("error") or "")
            out[config] = Measurement(_median(runs) if runs else None, len(runs), error)
        return out

    def best(self, key: TuneKey, space: tuple[KernelConfig, ...]) -> tuple[KernelConfig, float] | None:
        """The fastest configuration of `space` under `key` that never failed, with its runtime, or None."""
        timed = [
            (m.runtime_us, c)
            for c, m in self.measurements(key, space).items()
            if m.runtime_us is not None and not m.error
        ]
        if not timed:
            return None
        runtime, config = min(timed, key=lambda t: (t[0], space.index(t[1])))
        return config, runtime

    def record(self, key: TuneKey, config: KernelConfig, runtime_us: float | None, error: str = "") -> None:
        """Add one evaluation: a correct candidate's median runtime, or None and why it failed."""
        with self._locked():
            data = self._load()
            entry = data.setdefault(key.text(), {})
            value = entry.setdefault(config_text(config), {"us": [], "error": ""})
            if runtime_us is not None and runtime_us > 0:
                value["us"] = [*_runs(value), float(runtime_us)][-_MAX_RUNS:]
            else:
                value["error"] = error or "not correct"
            self._save(data)

    def _save(self, data: dict[str, dict[str, dict[str, object]]]) -> None:
        if self.path is None:
            self._memory = data
            return
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def _runs(value: dict[str, object]) -> list[float]:
    """The recorded medians of one configuration (anything that is not a positive number is dropped)."""
    raw = value.get("us")
    items = raw if isinstance(raw, list) else []
    return [float(v) for v in items if isinstance(v, int | float) and not isinstance(v, bool) and v > 0]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# Failures that say nothing about a launch configuration (the machine, not the kernel): not recorded.
_NOT_THE_CONFIG = frozenset({ErrorKind.TIMEOUT, ErrorKind.INFRA_ERROR, ErrorKind.NO_CODE})


class Autotuner:
    """The generator's side of autotuning: keys, the configuration to start from, proposals, observations.

    `device_name`: the GPU the evaluator will run on (as `torch.cuda.get_device_name()` reports it), so that
    the first step of a run can already use the cache; it is also learned from the first observed result.
    """

    def __init__(self, cache: AutotuneCache | None = None, device_name: str = "") -> None:
        self.cache = cache if cache is not None else AutotuneCache(None)
        self.device_name = device_name
        self._proposed: dict[TuneKey, set[KernelConfig]] = {}

    def key(self, request: GenerationRequest, recipe_key: str) -> TuneKey:
        """The cache key of a request's task, shape and device for one base recipe."""
        device = CPU_DEVICE if request.device == "cpu" else (self.device_name or "unknown GPU")
        return TuneKey(request.task.key, request.shape, device, recipe_key)

    def start_config(self, request: GenerationRequest, recipe: Recipe) -> tuple[KernelConfig, str]:
        (
            """The fastest measured configuration of the recipe's space for this key (and a note), """
            """else its default."""
        )
        space = space_for(recipe.key)
        key = self.key(request, recipe.key)
        best = self.cache.best(key, space) if space else None
        if best is None:
            return recipe.default_config, ""
        config, runtime_us = best
        note = (
            "Launch configuration from the autotune cache: the fastest correct one measured for this "
            "task at "
            f"the {key.shape} shapes on {key.device} ({runtime_us:.1f} us median, {show_config(config)})."
        )
        return config, note

    def propose(
        self,
        request: GenerationRequest,
        base_key: str,
        ladder: tuple[KernelConfig, ...],
        current: KernelConfig,
    ) -> KernelConfig | None:
        (
            """The first configuration of `ladder` neither measured nor proposed yet for this key """
            """(None: none left)."""
        )
        key = self.key(request, base_key)
        measured = self.cache.measurements(key, space_for(base_key))
        proposed = self._proposed.setdefault(key, set())
        for config in ladder:
            if config != current and config not in measured and config not in proposed:
                proposed.add(config)
                return config
        return None

    def exhausted(
        self,
        request: GenerationRequest,
        base_key: str,
        ladder: tuple[KernelConfig, ...],
        current: KernelConfig,
    ) -> KernelConfig | None:
        """Every ladder configuration is taken: the fastest measured one when it is not the current kernel."""
        best = self.cache.best(self.key(request, base_key), space_for(base_key))
        if best is None or best[0] == current or best[0] not in ladder:
            return None
        return best[0]

    def observe(self, request: GenerationRequest, reply: GenerationReply, result: EvalResult | None) -> None:
        """Record the loop's evaluation of a rules kernel under (task, shape, device, base recipe)."""
        header = parse_header(reply.source or "")
        if header is None or result is None:
            return
        if result.gpu_name:
            device = result.gpu_name
            self.device_name = self.device_name or device
        elif result.device == "cpu":
            device = CPU_DEVICE
        else:
            return  # a GPU evaluation that never reached the device: nothing known about the configuration
        space = space_for(header.recipe)
        if header.config not in space:
            return
        key = TuneKey(request.task.key, request.shape, device, header.recipe)
        if result.correct and result.runtime_us:
            self.cache.record(key, header.config, result.runtime_us)
        elif not result.correct and result.error_kind not in _NOT_THE_CONFIG:
            self.cache.record(key, header.config, None, str(result.error_kind or "not correct"))


def show_config(config: KernelConfig) -> str:
    """A configuration as the launch constants it sets."""
    text = f"BLOCK={config.block}, num_warps={config.num_warps}"
    if config.max_single_block != KernelConfig().max_single_block:
        text += f", max_single_block={config.max_single_block}"
    if config.vector_hints:
        text += ", vector hints"
    return text
