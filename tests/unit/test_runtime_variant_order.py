"""Shape variants run in increasing input size, so a candidate's first call is at the smallest shape.

The H200 run let the adversarial `hardcoded_shape` candidate (remembers its first call's element count and clips
later calls to it) pass at default sizes: there the extra variant is smaller than the main one and ran after it.
The harness now runs smaller extra variants before the main trials and larger ones after them.
"""

from __future__ import annotations

from htam_graph.kernels_runtime.worker import harness, sharing
from htam_graph.model import EvalRequest

TASK = """
import torch
import torch.nn as nn

N = 64
ROWS = 4


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(ROWS, N)]


def get_init_inputs():
    return []
"""


def _request() -> EvalRequest:
    return EvalRequest(
        task_key="t/tanh", task_source=TASK, candidate_source="", device="cpu", shape="default"
    )


def test_input_elements_are_counted_on_the_meta_device() -> None:
    task = harness._load_task(_request(), {"N": 1 << 40})  # 4 TiB of fp32 if it were allocated
    assert sharing.input_elements(task) == 4 << 40


def test_smaller_variants_run_first_and_larger_after() -> None:
    req = _request()
    main = harness._load_task(req, {})
    smaller, larger = harness._split_by_size(req, main, [{"N": 16}, {"N": 256}, {"ROWS": 2}, {"ROWS": 8}])
    assert smaller == [{"N": 16}, {"ROWS": 2}]
    assert larger == [{"N": 256}, {"ROWS": 8}]


def test_unknown_sizes_run_after_the_main_trials() -> None:
    req = _request().model_copy(
        update={"task_source": TASK.replace("torch.randn(ROWS, N)", "open('/nonexistent')")}
    )
    main = harness._load_task(req, {})
    assert sharing.input_elements(main) == -1
    assert harness._split_by_size(req, main, [{"N": 16}]) == ([], [{"N": 16}])


def test_variant_selection_is_cached_on_disk_and_round_trips_tuples(tmp_path, monkeypatch) -> None:
    source = TASK.replace("ROWS = 4", "ROWS = 4\nKERNEL = (3, 5)")
    req = _request().model_copy(update={"task_source": source, "extra_shapes": 1})
    calls = []

    def select(r: EvalRequest) -> list[dict]:
        calls.append(r.task_key)
        return [{}, {"N": 48, "KERNEL": (3, 4)}]

    monkeypatch.setattr(harness, "_select_variants", select)
    monkeypatch.setattr(harness, "VARIANT_CACHE_DIR", str(tmp_path))
    first = harness._variants(req)
    second = harness._variants(req)
    assert first == second == [{}, {"N": 48, "KERNEL": (3, 4)}]
    assert isinstance(second[1]["KERNEL"], tuple)
    assert calls == ["t/tanh"]  # the second evaluation read the cache
    other = req.model_copy(update={"task_source": source + "\n# changed\n"})
    harness._variants(other)
    assert len(calls) == 2  # a changed source is a different key
