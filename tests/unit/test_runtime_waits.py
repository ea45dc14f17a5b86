"""The evaluation records how long it waited for the GPU (`queued_s`, in total and per kind), forwarding every
event unchanged."""

from __future__ import annotations

import time

from htam_graph.kernels_runtime.recorder import queued_seconds
from htam_graph.kernels_runtime.worker import harness


class _Rec:
    def __init__(self) -> None:
        self.infos: dict[str, str] = {}

    def info(self, name: str, text: str) -> None:
        self.infos[name] = text


def test_waits_are_summed_and_events_forwarded() -> None:
    seen: list[str] = []
    rec = _Rec()
    waits = harness._Waits(seen.append, rec)  # type: ignore[arg-type]
    for pause, kind in ((0.05, "memory"), (0.02, "timing"), (0.03, "timing")):
        waits("queued", kind)
        time.sleep(pause)
        waits("admitted", kind)
    assert seen == ["queued", "admitted"] * 3  # the evaluator's protocol: the event alone
    assert rec.infos["queued_s"].split()[1:4] == ["in", "3", "waits:"]
    total, by_kind = queued_seconds({"queued_s": f"info: {rec.infos['queued_s']}"})
    assert 0.10 <= total < 1.0
    assert by_kind.keys() == {"memory", "timing"}
    assert 0.05 <= by_kind["memory"] < 0.5 and 0.05 <= by_kind["timing"] < 0.5
    assert abs(sum(by_kind.values()) - total) < 0.01


def test_an_admission_without_a_wait_records_nothing() -> None:
    seen: list[str] = []
    rec = _Rec()
    waits = harness._Waits(seen.append, rec)  # type: ignore[arg-type]
    waits("admitted", "shared")
    assert seen == ["admitted"] and rec.infos == {}
