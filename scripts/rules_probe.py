"""Every applicable rules recipe of each task in a folder, run on the CPU against the task's reference: a probe
of what the offline generator covers, and whether what it writes is correct, without a GPU.

Usage: TRITON_INTERPRET=1 python scripts/rules_probe.py FOLDER [NN ...]
FOLDER holds level2/NN_Name.py tasks and small_sizes.json ({file name: {module constant: small value}}), the
sizes the check runs at (the tasks' own are GPU-sized). NN ... limits the run to those task numbers.

Per task, one line: the recipes that apply (tuning recipes left out: they re-emit another recipe's kernel),
each `ok` with its largest absolute error or FAILED with the reason. The check is
tests/integration/composed_checks.py: allclose(rtol=1e-4, atol=1e-4), parameters randomised and shared with
the reference, in a child process, at the small sizes and again with the first constant + 1, the same
candidate at both. When nothing applies: why the composed path does not.
"""

import json
import re
import runpy
import sys
import tempfile
from pathlib import Path

from htam_graph.model import Task
from htam_graph.rules.compose import KEY
from htam_graph.rules.generator import default_generator, task_view
from htam_graph.rules.recipes import default_recipes
from htam_graph.rules.recipes.tuning import TuningRecipe

CHECKS = runpy.run_path(str(Path(__file__).parents[1] / "tests" / "integration" / "composed_checks.py"))


def sized(source: str, sizes: dict[str, object]) -> str:
    """The task source with each named module constant set to its value."""
    for name, value in sizes.items():
        source, count = re.subn(rf"^{name}\s*=.*$", f"{name} = {value!r}", source, flags=re.M)
        if count != 1:
            raise SystemExit(f"{name} is assigned {count} times at module level, not once")
    return source


def probe(path: Path, sizes: dict[str, object]) -> str:
    first = next(iter(sizes))
    bigger = {**sizes, first: sizes[first] + 1} if isinstance(sizes[first], int) else sizes
    sources = [sized(path.read_text(), sizes), sized(path.read_text(), bigger)]
    task = Task(key=f"probe/level2/{path.stem}", suite="kernelbench", level=2, name=path.name,
                source=sources[0], source_sha256="0" * 64)  # fmt: skip
    generator, recipes = default_generator(), default_recipes()
    keys = [k for k in generator.recipes_for(task) if not isinstance(recipes[k], TuningRecipe)]
    if not keys:
        return f"no strategy: {generator.applies(KEY, task).reason}"
    verdicts = []
    for key in keys:
        candidate = recipes[key].emit(task_view(task), recipes[key].default_config)  # type: ignore[arg-type]
        try:
            with tempfile.TemporaryDirectory() as folder:
                worst = max(CHECKS["run_checks"](sources, [candidate, candidate], Path(folder)))
            verdicts.append(f"{key}: ok (max abs error {worst:.2g})")  # the child asserted allclose
        except AssertionError as e:  # the child's failure, with the tail of its stderr
            verdicts.append(f"{key}: FAILED {str(e).strip().splitlines()[-1][:160]}")
    return " | ".join(verdicts)


def main() -> None:
    folder, only = Path(sys.argv[1]), sys.argv[2:]
    small = json.loads((folder / "small_sizes.json").read_text())
    for path in sorted((folder / "level2").glob("*.py")):
        if not only or path.name[:2] in only:
            print(f"{path.name:52s} {probe(path, small[path.name])}", flush=True)


if __name__ == "__main__":
    main()
