"""Every recipe that applies to a dev-split task is reachable by the loop for that task.

The loop offers a Local only when its seed op_tags share a tag with the task's (cypher/memory_locals_for), and
only then asks the rules generator for it. A recipe whose Local is tagged more narrowly than the tasks it
applies to is dead code the bench never runs: the first H200 bench with algebraic_rewrite.conv_transpose_as_conv
(op_tags [conv]) never chose it on any transposed-conv task (their tag is conv_transpose).
"""

from __future__ import annotations

from pathlib import Path

from htam_graph.importers.kernelbench import parse_task
from htam_graph.model import Task
from htam_graph.rules.generator import recipes_for
from htam_graph.seed import load_seed

KB = Path(__file__).resolve().parents[1] / "data" / "kernelbench"


def _dev_tasks() -> list[Task]:
    tasks = []
    for level in ("level1", "level2"):
        for path in sorted((KB / level).glob("*.py")):
            task = parse_task(path, KB)
            assert isinstance(task, Task), f"{path.name}: {task}"
            tasks.append(task)
    return tasks


def test_every_applicable_recipe_passes_the_loops_op_tag_filter() -> None:
    seed_tags = {local.key: set(local.op_tags) for local in load_seed().locals}
    unreachable = []
    applied = 0
    for task in _dev_tasks():
        for key in recipes_for(task):
            applied += 1
            tags = seed_tags[key]
            if tags and not tags & set(task.op_tags):
                unreachable.append(f"{task.key}: {key} tagged {sorted(tags)}, task {sorted(task.op_tags)}")
    assert applied > 100  # the dev split exercises most recipes
    assert unreachable == []
