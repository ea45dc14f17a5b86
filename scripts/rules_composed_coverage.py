"""How many KernelBench tasks the composed path (fusion.composed_kernels) applies to, and how many had no
applicable recipe without it. Static: analysis and `check()` only, no kernel runs, no GPU.

Usage: python scripts/rules_composed_coverage.py [KERNELBENCH_DIR] [-v]
KERNELBENCH_DIR defaults to tests/data/kernelbench (the dev split); its level1 and level2 tasks are counted.
-v prints, per task without the composed path, why it does not apply.
"""

import sys
from pathlib import Path

from htam_graph.importers.kernelbench import parse_task
from htam_graph.model import Task
from htam_graph.rules.compose import KEY
from htam_graph.rules.generator import default_generator

root = Path(next((a for a in sys.argv[1:] if not a.startswith("-")), "tests/data/kernelbench"))
verbose = "-v" in sys.argv
generator = default_generator()
total = composed = none_before = rescued = 0
for level in ("level1", "level2"):
    for path in sorted((root / level).glob("*.py")):
        task = parse_task(path, root)
        if not isinstance(task, Task):
            continue
        total += 1
        keys = generator.recipes_for(task)
        others = [k for k in keys if k != KEY]
        composed += KEY in keys
        none_before += not others
        rescued += KEY in keys and not others
        if verbose and KEY not in keys:
            print(f"{level}/{path.name}: {generator.applies(KEY, task).reason}")
print(f"tasks: {total}")
print(f"composed path applies: {composed}")
print(f"no applicable recipe without the composed path: {none_before}")
print(f"  of which the composed path applies to: {rescued}")
